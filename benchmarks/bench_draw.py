"""Pictures of video frames: drawn on the host (results back, then the task's renderer) against drawn where
the model runs (TaskSpec.draw: one uint8 picture back per frame). A script, not a test.

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 .venv/bin/python benchmarks/bench_draw.py [--device cpu|cuda]
        [--checkpoint-dir /tmp/sapiens2-tiny] [--frames 16] [--batch-size 2] [--repeat 3]

Per task (segment, normals and depth with the body-part mask, matting), milliseconds per 1280x720 frame of
gpu.answers + drawing, best of --repeat, and the bytes that come back per frame as a multiple of the frame's
uint8 RGB bytes (what ZeroGPU would pickle). On the CPU the app keeps the host path (device_post.use_device_post
is CUDA only); this script switches the device path on there to measure it. The machine is shared: the load
average is printed.
"""

from __future__ import annotations

import argparse
import os
import pickle
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

TASKS = {"segment": {}, "normals": {"remove_background": True}, "pointmap": {"remove_background": True}, "matting": {}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--checkpoint-dir", default="/tmp/sapiens2-tiny")
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    from sapiens2_demo import gpu, tasks
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.pipelines import device_post
    from sapiens2_demo.results import Job

    if not (Path(args.checkpoint_dir) / "sapiens2-seg-0.4b").exists():  # written once, as bench_video does
        from sapiens2_demo.standins.tiny import write_all

        write_all(Path(args.checkpoint_dir))
    manager = ModelManager(args.checkpoint_dir, device=args.device)
    key = gpu.register(manager)
    rng = np.random.default_rng(0)
    base = np.zeros((720, 1280, 3), np.uint8)
    base[100:650, 500:800] = (200, 150, 120)  # a person-sized block over a plain background
    frames = [np.clip(base + rng.integers(0, 20, base.shape), 0, 255).astype(np.uint8) for _ in range(args.frames)]
    rgb_bytes = frames[0].nbytes
    print(f"{args.frames} frames of 1280x720, batch {args.batch_size}, device {manager.device}; "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'task':10s} {'host ms/frame':>14s} {'device ms/frame':>16s} {'host/device':>12s} "
          f"{'bytes back host':>16s} {'device':>7s}")
    real_switch = device_post.use_device_post
    for name, options in TASKS.items():
        spec = tasks.get(name)
        job = spec.job(None, options)
        drawn_job = Job(job.task, job.size, {**job.options, "draw": dict(options)})
        renderer = spec.renderer(**options)

        def host():
            [results] = gpu.answers(key, frames, [job], args.batch_size)
            return [renderer.annotate(f, r) for f, r in zip(frames, results)], results

        def device():
            device_post.use_device_post = lambda _device: True
            try:
                [results] = gpu.answers(key, frames, [drawn_job], args.batch_size)
            finally:
                device_post.use_device_post = real_switch
            return [r.image for r in results], results

        timings = {}
        back = {}
        for label, run in (("host", host), ("device", device)):
            run()  # warm up: models loaded
            best = float("inf")
            for _ in range(args.repeat):
                started = time.perf_counter()
                _, results = run()
                best = min(best, time.perf_counter() - started)
            timings[label] = best * 1000 / args.frames
            back[label] = len(pickle.dumps(results[0])) / rgb_bytes
        print(f"{name:10s} {timings['host']:14.1f} {timings['device']:16.1f} "
              f"{timings['host'] / timings['device']:11.2f}x {back['host']:15.2f}x {back['device']:6.2f}x")
    print(f"load at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

"""x264 settings on the frames our videos really hold: each task's rendered 720p frames (a script, not a test).

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 .venv/bin/python benchmarks/bench_encoder.py [--tasks pose,seg,matting,normal]
        [--frames 24] [--reps 3] [--variants "veryfast" "superfast" ...]

The stand-ins (structured maps, as a real model's) render the astronaut panning through the app's video road once
(bench_video.measure_ours); the frames are decoded back and each variant encodes them as `VideoSink` does (x264's
frame threads, CRF 20, yuv420p), the best of --reps: this process's CPU ms a frame (all threads: x264 runs several),
the file's size, and PSNR against the frames given. `media.video.PRESET_PARAMS` was chosen with it (docs/host.md).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

VARIANTS = {
    "veryfast": {"preset": "veryfast"},
    "superfast": {"preset": "superfast"},
    "superfast+mbtree": {"preset": "superfast", "x264-params": "mbtree=1:rc-lookahead=10"},
    "veryfast dia subme1 nopart": {"preset": "veryfast", "x264-params": "me=dia:subme=1:partitions=none"},
    "ultrafast": {"preset": "ultrafast"},
}


def rendered(task: str, frames: int, work: Path) -> np.ndarray:
    """The task's rendered frames of the panning clip, through the app's own video road on the stand-ins."""
    import bench_video as bv
    from host_video import rendered_frames

    from sapiens2_demo.standins.train import cached_standins

    ckpts = cached_standins(log=lambda message: None)
    manager = bv.make_manager(bv.Checkpoints(ckpts, ckpts / "yolov8n-random.pt", "standins"), "cpu")
    clip = bv.make_clip(work / f"clip_{frames}.mp4", frames, content="photo")
    bv.load_models(manager, task)
    bv.measure_ours(clip, task, manager, work / f"ours_{task}")
    return np.stack(rendered_frames(next((work / f"ours_{task}").rglob(f"*_{task}.mp4"))))


def encode(frames: np.ndarray, options: dict, path: Path) -> float:
    """CPU ms a frame to encode `frames` with x264 `options` (CRF 20) into `path`."""
    import av

    cpu = time.process_time()
    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=24, options={"crf": "20", **options})
        stream.thread_type = "AUTO"  # as VideoSink
        stream.width, stream.height, stream.pix_fmt = frames.shape[2], frames.shape[1], "yuv420p"
        for frame in frames:
            out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24").reformat(format="yuv420p")))
        out.mux(stream.encode(None))
    return 1e3 * (time.process_time() - cpu) / len(frames)


def psnr(path: Path, frames: np.ndarray) -> float:
    import av

    with av.open(str(path)) as source:
        back = np.stack([f.to_ndarray(format="rgb24") for f in source.decode(video=0)])
    mse = float(np.mean((back.astype(np.float32) - frames.astype(np.float32)) ** 2))
    return 10 * math.log10(255 ** 2 / max(mse, 1e-9))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="pose,seg,matting,normal")
    parser.add_argument("--frames", type=int, default=24)
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    args = parser.parse_args()
    import bench_endpoints as be

    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        drawn = {task: rendered(task, args.frames, work) for task in args.tasks.split(",")}
        cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                    if line.startswith("model name")), "unknown CPU")
        print(f"{cpu}, {os.cpu_count()} CPUs; load {be.load_average()}; "
              f"{args.frames} rendered 720p frames a task (stand-ins); CPU ms a frame (best of {args.reps}), kB, "
              "PSNR dB against the frames given, size against the first variant's")
        print(f"{'variant':28}" + "".join(f"{task:>30}" for task in drawn))
        first = {}
        for number, name in enumerate(args.variants):
            cells = []
            for task, frames in drawn.items():
                path = work / f"{task}_{number}.mp4"
                ms = min(encode(frames, VARIANTS[name], path) for _ in range(args.reps))
                size = path.stat().st_size
                first.setdefault(task, size)
                cells.append(f"{ms:6.1f} {size / 1024:5.0f} ({size / first[task]:.2f}x) {psnr(path, frames):5.1f}")
            print(f"{name:28}" + "".join(f"{cell:>30}" for cell in cells), flush=True)
        print(f"load at the end {be.load_average()}")


if __name__ == "__main__":
    main()

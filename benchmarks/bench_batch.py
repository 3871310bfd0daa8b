"""Batch throughput on tiny random-weight checkpoints, or any --checkpoint-dir (a script, not a test).

1. The local engine (reader threads, batches through every pipeline, one shared segmentation, a writer
   thread) against a one-image-at-a-time loop over the same pipelines and writers (load, run each task on a
   batch of one, write): target >= 1.5x.
2. `--engine ray` with 2 single-thread CPU actors against 1: target >= 1.6x. Ray figures are steady-state
   throughput: the inputs finished after the first batch came back, over the time from then to the last
   (the cluster's and actors' start-up, imports and model loading are a fixed cost per run, printed apart).

    python benchmarks/bench_batch.py [--images 200] [--tasks all] [--batch-size 8] [--skip-ray] [--checkpoint-dir DIR]

--checkpoint-dir: e.g. stand-ins (`python -m sapiens2_demo.standins DIR --trained --detector`, not models);
default: tiny random weights in a temporary folder. Its detector: DIR/yolov8n-random.pt.

Inputs: crops/resizes of the assets at 640x480 JPEG. The tiny models make the model cheap, so these figures
weigh the pipeline around it (reading, post-processing, writing) more than a real checkpoint would.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.update(HF_HUB_OFFLINE="1", YOLO_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")


def make_images(folder: Path, count: int, size=(640, 480)) -> list[Path]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    photos = [Image.open(ROOT / "assets" / name).convert("RGB") for name in ("astronaut.jpg", "grace_hopper.jpg",
                                                                             "camera.jpg")]
    paths = []
    for i in range(count):
        photo = photos[i % len(photos)]
        w, h = photo.size
        cw, ch = int(rng.integers(w // 2, w + 1)), int(rng.integers(h // 2, h + 1))
        x, y = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        path = folder / f"group{i % 4}" / f"img{i:04d}.jpg"
        path.parent.mkdir(parents=True, exist_ok=True)
        photo.crop((x, y, x + cw, y + ch)).resize(size).save(path, quality=90)
        paths.append(path)
    return paths


def one_at_a_time(paths: list[Path], out: Path, options) -> float:
    """The naive loop: each image read, each task run on it alone (no shared segmentation), files written."""
    from sapiens2_demo import tasks
    from sapiens2_demo.media.image import load_image

    started = time.perf_counter()
    manager = options.make_manager()
    for path in paths:
        rgb = load_image(path).rgb
        for task in options.tasks:
            spec = tasks.get(task)
            job = spec.job(options.size, options.task_options())
            [result] = spec.run([rgb], manager, job.size, **job.options)
            spec.write_files(rgb, result, out / path.parent.name / path.stem / spec.out_folder,
                             **options.task_options())
    return time.perf_counter() - started


def engine_run(folder: Path, out: Path, options, engine: str, workers: int) -> tuple[float, float, int]:
    """(wall seconds, steady-state items/s, items) for one run of the batch command's engine."""
    from sapiens2_demo.batch.inputs import discover
    from sapiens2_demo.batch.manifest import Manifest
    from sapiens2_demo.batch.report import Progress

    class Timed(Progress):
        def done(self, record):
            super().done(record)
            stamps.append(time.perf_counter())

    stamps: list[float] = []
    items = discover([str(folder)], out)
    progress = Timed(Manifest(out), total=len(items), quiet=True, stream=open(os.devnull, "w"))
    started = time.perf_counter()
    if engine == "ray":
        from sapiens2_demo.batch.ray_engine import run_ray

        run_ray(items, out, options, progress, workers=workers)
    else:
        from sapiens2_demo.batch.local import run_local

        run_local(items, out, options, progress, workers=workers)
    wall = time.perf_counter() - started
    failed = progress.counts["failed"]
    if failed:
        raise SystemExit(f"{failed} inputs failed; see {out / 'manifest.jsonl'}")
    # steady state: the inputs finished after the first batch came back, over the time since then
    first_batch = sum(stamp - stamps[0] < 0.05 for stamp in stamps)
    span = stamps[-1] - stamps[0]
    steady = (len(stamps) - first_batch) / span if span > 0 else 0.0
    return wall, steady, len(stamps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--tasks", default="all")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--skip-ray", action="store_true")
    parser.add_argument("--skip-local", action="store_true")
    parser.add_argument("--checkpoint-dir", type=Path, default=None)
    args = parser.parse_args()

    from transformers.utils import logging as transformers_logging

    from sapiens2_demo.batch.options import BatchOptions, parse_tasks
    from sapiens2_demo.standins.tiny import write_all, write_tiny_detector

    transformers_logging.disable_progress_bar()

    with tempfile.TemporaryDirectory(prefix="bench_batch_") as tmp:
        tmp = Path(tmp)
        ckpt = args.checkpoint_dir or tmp / "ckpt"
        if args.checkpoint_dir is None:
            write_all(ckpt)
            write_tiny_detector(ckpt / "yolov8n-random.pt")
        paths = make_images(tmp / "images", args.images)
        base = BatchOptions(tasks=parse_tasks(args.tasks), checkpoint_dir=str(ckpt), device="cpu",
                            detector=str(ckpt / "yolov8n-random.pt"), batch_size=args.batch_size)
        print(f"{len(paths)} images 640x480, tasks {', '.join(base.tasks)}, batch size {args.batch_size}, "
              f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at start")
        make_images(tmp / "warm_in", 4)
        engine_run(tmp / "warm_in", tmp / "warm_out", base, "local", 2)  # imports and first calls: not timed

        if not args.skip_local:
            loop = one_at_a_time(paths, tmp / "loop", base)
            wall, _, n = engine_run(tmp / "images", tmp / "local", base, "local", 2)
            print(f"one image at a time: {len(paths) / loop:6.2f} images/s ({loop:.1f} s)")
            print(f"local engine:        {n / wall:6.2f} images/s ({wall:.1f} s)  -> {loop / wall:.2f}x (target 1.5x)")

        if not args.skip_ray:
            from dataclasses import replace

            single = replace(base, threads=1)
            rates = {}
            for workers in (1, 2):
                wall, steady, n = engine_run(tmp / "images", tmp / f"ray{workers}", single, "ray", workers)
                rates[workers] = steady
                print(f"ray, {workers} single-thread worker(s): {steady:6.2f} images/s steady "
                      f"({n} images in {wall:.1f} s with start-up)")
            print(f"ray 2 workers vs 1: {rates[2] / rates[1]:.2f}x (target 1.6x)")
        print(f"load average {os.getloadavg()[0]:.1f} at the end (other processes share these cores)")


if __name__ == "__main__":
    main()

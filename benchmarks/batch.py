"""The batch CLI: its engines against one image at a time (`batch`), compiled launches cold and warm (`compile`)."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from benchmarks import harness


# -- batch -----------------------------------------------------------------------------------------------------------
def make_images(folder: Path, count: int, size=(640, 480)) -> list[Path]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    photos = [Image.open(harness.ROOT / "assets" / name).convert("RGB") for name in ("astronaut.jpg", "grace_hopper.jpg",
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
    if engine == "ray":  # the engine's import is timed too
        from sapiens2_demo.batch.ray_engine import run_ray as run_engine
    else:
        from sapiens2_demo.batch.local import run_local as run_engine
    run_engine(items, out, options, progress, workers=workers)
    wall = time.perf_counter() - started
    failed = progress.counts["failed"]
    if failed:
        raise SystemExit(f"{failed} inputs failed; see {out / 'manifest.jsonl'}")
    # steady state: the inputs finished after the first batch came back, over the time since then
    first_batch = sum(stamp - stamps[0] < 0.05 for stamp in stamps)
    span = stamps[-1] - stamps[0]
    steady = (len(stamps) - first_batch) / span if span > 0 else 0.0
    return wall, steady, len(stamps)


def batch(argv: list[str], run: harness.Run) -> None:
    """The batch CLI's throughput on tiny random weights and 640x480 crops of the assets: the local engine against a
    one-image-at-a-time loop (target >= 1.5x); Ray with 2 single-thread CPU actors against 1 (target >= 1.6x)."""
    from dataclasses import replace

    from sapiens2_demo.batch.options import BatchOptions, parse_tasks

    parser = harness.parser(run, batch.__doc__)
    parser.add_argument("--images", type=int, default=200)
    parser.add_argument("--skip-ray", action="store_true", help="the local engine only (Ray not installed)")
    args = parser.parse_args(argv)
    run.weights, ckpt = "tiny random weights", harness.tiny_checkpoints()
    with tempfile.TemporaryDirectory(prefix="bench_batch_") as tmp:
        tmp = Path(tmp)
        paths = make_images(tmp / "images", args.images)
        base = BatchOptions(tasks=parse_tasks("all"), checkpoint_dir=str(ckpt), device="cpu",
                            detector=str(ckpt / "yolov8n-random.pt"), batch_size=8)
        print(f"{len(paths)} images 640x480, tasks {', '.join(base.tasks)}, batch size 8; load {harness.load()}")
        make_images(tmp / "warm_in", 4)
        engine_run(tmp / "warm_in", tmp / "warm_out", base, "local", 2)  # imports and first calls: not timed

        loop = one_at_a_time(paths, tmp / "loop", base)
        wall, _, n = engine_run(tmp / "images", tmp / "local", base, "local", 2)
        run.figures.update(loop_images_s=round(len(paths) / loop, 2), local_images_s=round(n / wall, 2))
        print(f"one image at a time: {len(paths) / loop:6.2f} images/s ({loop:.1f} s)")
        print(f"local engine:        {n / wall:6.2f} images/s ({wall:.1f} s)  -> {loop / wall:.2f}x (target 1.5x)")
        if not args.skip_ray:
            for workers in (1, 2):
                wall, steady, n = engine_run(tmp / "images", tmp / f"ray{workers}", replace(base, threads=1), "ray",
                                             workers)
                run.figures[f"ray_{workers}_images_s"] = round(steady, 2)
                print(f"ray, {workers} single-thread worker(s): {steady:6.2f} images/s steady "
                      f"({n} images in {wall:.1f} s with start-up)")
            print(f"ray 2 workers vs 1: {run.figures['ray_2_images_s'] / run.figures['ray_1_images_s']:.2f}x "
                  "(target 1.6x)")


# -- compile ---------------------------------------------------------------------------------------------------------
def compiled_launches(argv: list[str], run: harness.Run) -> None:
    """--compile on the batch CLI, cold and warm, against off (three images, a 20-frame video): wall times, warm / cold
    (<= 0.5), recompiles, labels and keypoints against off (tests/compile_parity.py; docs/compile.md)."""
    from tests.compile_parity import IMAGES, compare, make_inputs, pose_parity, record_pose, run_cli

    parser = harness.parser(run, compiled_launches.__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", help="float32: the comparison the test makes; auto: this "
                        "CPU's road (bf16 where native, whose keypoints move further)")
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="default: tiny checkpoints")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench_compile_"))
    checkpoints, cache = args.checkpoint_dir or harness.tiny_checkpoints(), work / "compile-cache"
    inputs = make_inputs(work / "inputs")
    run.weights = "tiny random weights" if args.checkpoint_dir is None else str(args.checkpoint_dir)
    print(f"{len(IMAGES)} images {', '.join(f'{w}x{h}' for _, (w, h) in IMAGES)} and a 20-frame video; seg and pose; "
          f"device {args.device}, {args.dtype}; load {harness.load()}", flush=True)
    launches = {}
    for name, mode in (("off", "off"), ("cold", "on"), ("warm", "on")):
        launches[name] = found = run_cli(inputs, work / f"out_{name}", checkpoints, mode, cache, args.device,
                                         dtype=args.dtype)
        run.figures[name] = {"seconds": round(found.seconds, 1), "recompiles": found.recompiles,
                             "after_warm_up": found.after_warm_up}
        print(f"  --compile {mode:3s} {name:4s}: {found.seconds:6.1f} s, recompiles {found.recompiles} "
              f"({found.after_warm_up} after the warm-up at load)", flush=True)
    print(f"warm / cold wall time: {launches['warm'].seconds / launches['cold'].seconds:.2f} (target <= 0.5)")
    for name in ("cold", "warm"):
        run.figures[f"{name}_files"] = compare(launches["off"].output, launches[name].output)
        print(f"{name} against off (output files): {run.figures[f'{name}_files']}")
    # the pose maps behind the keypoints, recorded in this process (the cache is warm by now)
    recorded = {mode: record_pose(inputs, work / f"pose_{mode}", checkpoints, mode, cache, args.device, args.dtype)
                for mode in ("off", "on")}
    run.figures["pose"] = pose_parity(recorded["off"], recorded["on"])
    print(f"pose keypoints, --compile on against off, by how well-defined: {run.figures['pose']}")

"""The batch CLI: its engines against one image at a time, and compiled launches cold and warm.

    python -m benchmarks batch [--images 200] [--skip-ray]
    python -m benchmarks compile [--checkpoint-dir DIR] [--device cpu]
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from benchmarks import harness


# -- batch ---------------------------------------------------------------------------------------------------------
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


def batch(argv: list[str], run: harness.Run) -> None:
    """The batch CLI's throughput: the local engine (reader threads, batches through every pipeline, a writer) against
    a one-image-at-a-time loop over the same pipelines (target >= 1.5x); `--engine ray` with 2 single-thread CPU actors
    against 1 (steady-state throughput, start-up printed apart; target >= 1.6x). Tiny random weights unless
    --checkpoint-dir; inputs: 640x480 crops of the assets (the model cheap: these weigh the pipeline around it)."""
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


# -- compile -------------------------------------------------------------------------------------------------------
IMAGES = (("astronaut", (512, 512)), ("grace_hopper", (320, 400)), ("camera", (640, 360)))
RECOMPILE = re.compile(r"Recompiling function")
LOADED = re.compile(r"loaded facebook/sapiens2-")


def make_inputs(folder: Path, video_frames: int = 20) -> Path:
    """Three images of three sizes and a short video (tests/videos.py's moving pattern)."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for name, size in IMAGES:
        Image.open(harness.ROOT / "assets" / f"{name}.jpg").convert("RGB").resize(size).save(folder / f"{name}.jpg")
    def frame(i: int) -> np.ndarray:  # a yellow box moving right over a blue ramp
        rgb = np.zeros((120, 160, 3), np.uint8)
        rgb[..., 2] = np.linspace(40, 120, 160, dtype=np.uint8)[None, :]
        rgb[40:80, 4 + i * 5:44 + i * 5] = (230, 200, 60)
        return rgb

    harness.encode(folder / "clip.mp4", map(frame, range(video_frames)), fps=10)
    return folder


@dataclass
class Launch:
    seconds: float
    recompiles: int
    after_warm_up: int
    log: str
    output: Path


def run_cli(inputs: Path, output: Path, checkpoint_dir: Path, compile_mode: str, cache: Path, device: str = "cpu",
            tasks: str = "seg,pose") -> Launch:
    """The batch command in its own process, with TORCH_LOGS=recompiles; raises on a non-zero exit."""
    env = {**os.environ, "SAPIENS2_COMPILE_CACHE": str(cache), "TORCH_LOGS": "recompiles", "HF_HUB_OFFLINE": "1",
           "YOLO_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "PYTHONPATH": str(harness.ROOT)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    detector = checkpoint_dir / "yolov8n-random.pt"
    command = [sys.executable, "-m", "sapiens2_demo.cli", "--input", str(inputs), "--output", str(output),
               "--tasks", tasks, "--checkpoint-dir", str(checkpoint_dir), "--detector", str(detector),
               "--device", device, "--compile", compile_mode, "--quiet", "--overwrite"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=harness.ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    log = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{log[-3000:]}")
    lines = log.splitlines()
    last_load = max((i for i, line in enumerate(lines) if LOADED.search(line)), default=-1)
    after = sum(1 for line in lines[last_load + 1:] if RECOMPILE.search(line))
    return Launch(seconds, len(RECOMPILE.findall(log)), after, log, output)


def _label_maps(folder: Path) -> dict[str, object]:
    """Every body-part label map of a run: image PNGs and the video's zipped frames, by name."""
    import numpy as np
    from PIL import Image

    maps = {p.relative_to(folder).as_posix(): np.asarray(Image.open(p)) for p in folder.rglob("body_parts_labels.png")}
    for archive in folder.rglob("body_parts_labels.zip"):
        with zipfile.ZipFile(archive) as zipped:
            for name in zipped.namelist():
                maps[f"{archive.relative_to(folder)}/{name}"] = np.asarray(Image.open(io.BytesIO(zipped.read(name))))
    return maps


def _keypoints(folder: Path) -> dict[str, list]:
    """Every person's (keypoints, scores) of a run: pose_sapiens2.json per image, pose_frames.jsonl per frame."""
    found = {}
    for path in folder.rglob("pose_sapiens2.json"):
        found[path.relative_to(folder).as_posix()] = [(p["keypoints"], p["keypoint_scores"])
                                                      for p in json.loads(path.read_text())["instances"]]
    for path in folder.rglob("pose_frames.jsonl"):
        for line in path.read_text().splitlines():
            frame = json.loads(line)
            found[f"{path.relative_to(folder)}#{frame['frame']}"] = [(p["keypoints"], p["keypoint_scores"])
                                                                     for p in frame["people"]]
    return found


def compare(reference: Path, other: Path) -> dict:
    """The output files of two runs: label agreement (the worst map's share of equal pixels) and keypoints (the
    share within 0.05 px, the median and largest move): figures; `pose_parity` says which moves are well-defined."""
    import numpy as np

    labels_a, labels_b = _label_maps(reference), _label_maps(other)
    points_a, points_b = _keypoints(reference), _keypoints(other)
    if labels_a.keys() != labels_b.keys() or points_a.keys() != points_b.keys():
        raise AssertionError(f"different outputs: {sorted(labels_a.keys() ^ labels_b.keys())} "
                             f"{sorted(points_a.keys() ^ points_b.keys())}")
    agreement = min(float((labels_a[k] == labels_b[k]).mean()) for k in labels_a)
    distances = []
    for key in points_a:
        if len(points_a[key]) != len(points_b[key]):
            raise AssertionError(f"{key}: {len(points_a[key])} people against {len(points_b[key])}")
        for (a, _), (b, _) in zip(points_a[key], points_b[key]):
            distances.append(np.abs(np.asarray(a, float) - np.asarray(b, float)).max(axis=1))
    moved = np.concatenate(distances) if distances else np.zeros(0)
    return {"label_maps": len(labels_a), "labels_equal": round(agreement, 6), "keypoints": int(moved.size),
            "keypoints_within_0.05px": round(float((moved <= 0.05).mean()) if moved.size else 1.0, 5),
            "keypoints_median_px": float(np.median(moved)) if moved.size else 0.0,
            "keypoints_max_px": float(moved.max()) if moved.size else 0.0, "further": int((moved > 0.05).sum())}


# -- keypoints: which are well-defined ------------------------------------------------------------------------
PEAK_MARGIN = 1e-5  # of the map's range: 20x the largest compiled-vs-eager map difference measured (5e-7)


def record_pose(inputs: Path, output: Path, checkpoint_dir: Path, compile_mode: str, cache: Path,
                device: str = "cpu") -> list[tuple]:
    """The batch command's pose task in this process, recording every decoder call: (heatmaps, boxes, keypoints)."""
    import numpy as np

    import sapiens2_demo.pipelines.device_post as device_post
    import sapiens2_demo.pipelines.pose as pipeline
    from sapiens2_demo import cli

    # the host road's decoder and the device road's (CUDA), where the pose pipeline finds them
    roads = ((pipeline, "decode_heatmaps"), (device_post, "pose_keypoints"))
    calls, originals = [], [(module, name, getattr(module, name)) for module, name in roads]

    def recorder(decode):
        def recorded(heatmaps, boxes, *args, **kwargs):
            keypoints, scores = decode(heatmaps, boxes, *args, **kwargs)
            calls.append((heatmaps.detach().float().cpu().numpy(), np.array(boxes, np.float32), np.array(keypoints)))
            return keypoints, scores
        return recorded

    saved = {name: os.environ.get(name) for name in ("SAPIENS2_COMPILE_CACHE", "TORCHINDUCTOR_CACHE_DIR")}
    os.environ["SAPIENS2_COMPILE_CACHE"] = str(cache)
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    try:
        for module, name, decode in originals:
            setattr(module, name, recorder(decode))
        detector = checkpoint_dir / "yolov8n-random.pt"
        status = cli.main(["--input", str(inputs), "--output", str(output), "--tasks", "pose", "--checkpoint-dir",
                           str(checkpoint_dir), "--detector", str(detector), "--device", device, "--compile",
                           compile_mode, "--quiet", "--overwrite"])
        if status:
            raise RuntimeError(f"the pose run with --compile {compile_mode} exited {status}")
    finally:
        for module, name, decode in originals:
            setattr(module, name, decode)
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
    return calls


def pose_parity(reference: list[tuple], other: list[tuple]) -> dict:
    """Keypoints of two recorded runs (`record_pose`), compared where they are well-defined:
    (a) the same crop: video frames between detections take boxes that follow the last frame's keypoints, so an
        earlier difference moves the crop (and the heatmaps with it);
    (b) a unique peak: the map's maximum beats every value outside its 3x3 neighbourhood by PEAK_MARGIN of the
        map's range (else rounding picks between two far-apart peaks of the same height: the flip test makes
        mirror-image twins);
    (c) a well-conditioned sub-pixel step: the decoder settles it on its fast path in both runs (a 1e-6 change of
        the log map moves it by < 0.02 px; pose.decode.slow_path_maps). The others are nearly flat around the
        peak, where the reference's DARK step amplifies float32 rounding up to thousands of pixels.
    Target: every well-defined keypoint within 0.05 px; heatmaps of the same crops within 1e-4 of their range."""
    import numpy as np

    from sapiens2_demo.pose.decode import slow_path_maps

    if len(reference) != len(other):
        raise AssertionError(f"{len(reference)} decoder calls against {len(other)}")
    moved, kinds, map_difference = [], [], 0.0
    for (maps_a, boxes_a, points_a), (maps_b, boxes_b, points_b) in zip(reference, other):
        if maps_a.shape != maps_b.shape:
            raise AssertionError(f"heatmaps {maps_a.shape} against {maps_b.shape}")
        same_crop = np.broadcast_to((boxes_a == boxes_b).all(axis=-1)[:, None], maps_a.shape[:2])
        if same_crop.any():
            rows = same_crop[:, 0]
            span = float(np.ptp(maps_a[rows])) or 1.0
            map_difference = max(map_difference, float(np.abs(maps_a[rows] - maps_b[rows]).max()) / span)
        kind = np.where(~same_crop, "other crop", np.where(~_unique_peak(maps_a), "tied peaks", np.where(
            slow_path_maps(maps_a) | slow_path_maps(maps_b), "ill-conditioned step", "well-defined")))
        moved.append(np.abs(points_a - points_b).max(axis=-1).ravel())
        kinds.append(kind.ravel())
    moved, kinds = (np.concatenate(x) if x else np.zeros(0) for x in (moved, kinds))
    found = {"keypoints": int(moved.size), "same_crop_maps_max_difference": float(f"{map_difference:.2e}")}
    for kind in ("well-defined", "ill-conditioned step", "tied peaks", "other crop"):
        chosen = moved[kinds == kind]
        found[kind] = {"count": int(chosen.size), "within_0.05px": int((chosen <= 0.05).sum()),
                       "max_px": float(f"{chosen.max():.3g}") if chosen.size else 0.0}
    return found


def _unique_peak(maps):
    """(N, K) True where each (h, w) map's maximum beats every value outside its 3x3 neighbourhood by
    PEAK_MARGIN of the map's range."""
    import numpy as np

    n, k, h, w = maps.shape
    flat = maps.reshape(n * k, h * w)
    index = flat.argmax(axis=1)
    top = flat[np.arange(n * k), index]
    ys, xs = np.divmod(np.arange(h * w), w)
    near = (np.abs(ys[None] - (index // w)[:, None]) <= 1) & (np.abs(xs[None] - (index % w)[:, None]) <= 1)
    rest = np.where(near, -np.inf, flat).max(axis=1)
    return (top - rest > PEAK_MARGIN * np.ptp(flat, axis=1)).reshape(n, k)


def compiled_launches(argv: list[str], run: harness.Run) -> None:
    """--compile on the batch CLI: a cold launch (empty cache), a warm one, and --compile off, over three images of
    three sizes and a 20-frame video: wall times, warm / cold (target <= 0.5), recompiles after the warm-up (target
    none), body-part labels (>= 99.9 % equal) and well-defined keypoints (within 0.05 px) against --compile off.
    tests/system/test_compile_cli.py runs the same as a test."""
    parser = harness.parser(run, compiled_launches.__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="default: tiny checkpoints")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="bench_compile_"))
    checkpoints, cache = args.checkpoint_dir or harness.tiny_checkpoints(), work / "compile-cache"
    inputs = make_inputs(work / "inputs")
    run.weights = "tiny random weights" if args.checkpoint_dir is None else str(args.checkpoint_dir)
    print(f"{len(IMAGES)} images {', '.join(f'{w}x{h}' for _, (w, h) in IMAGES)} and a 20-frame video; seg and pose; "
          f"device {args.device}; load {harness.load()}", flush=True)
    launches = {}
    for name, mode in (("off", "off"), ("cold", "on"), ("warm", "on")):
        launches[name] = found = run_cli(inputs, work / f"out_{name}", checkpoints, mode, cache, args.device)
        run.figures[name] = {"seconds": round(found.seconds, 1), "recompiles": found.recompiles,
                             "after_warm_up": found.after_warm_up}
        print(f"  --compile {mode:3s} {name:4s}: {found.seconds:6.1f} s, recompiles {found.recompiles} "
              f"({found.after_warm_up} after the warm-up at load)", flush=True)
    print(f"warm / cold wall time: {launches['warm'].seconds / launches['cold'].seconds:.2f} (target <= 0.5)")
    for name in ("cold", "warm"):
        run.figures[f"{name}_files"] = compare(launches["off"].output, launches[name].output)
        print(f"{name} against off (output files): {run.figures[f'{name}_files']}")
    # the pose maps behind the keypoints, recorded in this process (the cache is warm by now)
    recorded = {mode: record_pose(inputs, work / f"pose_{mode}", checkpoints, mode, cache, args.device)
                for mode in ("off", "on")}
    run.figures["pose"] = pose_parity(recorded["off"], recorded["on"])
    print(f"pose keypoints, --compile on against off, by how well-defined: {run.figures['pose']}")

"""The device road, counted and timed: the transfer ledger (what a GPU would see, counted on the CPU), pose's
decode on the host and device roads (`pose`), and a lent GPU's measurements in one call (`session`)."""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import numpy as np

from benchmarks import harness

# -- ledger: what crosses between host and device --------------------------------------------------------------------
HEIGHT, WIDTH = 1080, 1920
PEOPLE = 3
KEYPOINTS = 308
LEDGER_TASKS = {"pose": "pose", "seg": "segment", "normal": "normals", "pointmap": "pointmap", "matting": "matting"}
VIDEO_OPTIONS = {"pose": {}, "mocap": {"motion_3d": True}, "seg": {}, "normal": {"temporal_smoothing": True},
                 "pointmap": {"temporal_smoothing": True}, "matting": {"matting_background": "image"}}
SIDE, WIDE, STEP, TOP = 640, 560, 600, 300  # each person: a 640 px tall, 560 px wide tile, 600 px apart


def scene_frame(i: int = 0) -> tuple[np.ndarray, list[list[float]]]:
    """A 1080p frame of three astronauts on grey, moving right half a pixel a frame; their boxes."""
    import cv2

    from sapiens2_demo.standins.targets import load_photo

    person = cv2.resize(load_photo("astronaut"), (SIDE, SIDE), interpolation=cv2.INTER_AREA)[:, 40:40 + WIDE]
    frame = np.full((HEIGHT, WIDTH, 3), 96, np.uint8)
    for k in range(PEOPLE):
        x = 20 + k * STEP + i // 2
        frame[TOP:TOP + SIDE, x:x + WIDE] = person
    return frame, people_boxes(20 + i // 2)


def people_boxes(left: int) -> list[list[float]]:
    return [[left + k * STEP + 30.0, TOP + 10.0, left + k * STEP + WIDE - 30.0, TOP + SIDE - 1.0]
            for k in range(PEOPLE)]


def three_people(monkeypatch_target):
    """The detector runs (and counts), then its random boxes are replaced by the three people's."""
    from sapiens2_demo.pipelines import pose as pipeline

    def placed(frame) -> tuple[np.ndarray, np.ndarray, list]:
        tile = (np.abs(frame[TOP:TOP + SIDE].astype(np.int16) - 96) > 12).any(axis=(0, 2))
        return np.asarray(people_boxes(int(np.argmax(tile))), np.float32), np.full(PEOPLE, 0.9, np.float32), []

    real_one, real_queued = pipeline.find_people, pipeline.find_people_queued

    def one(frame, *args, **kwargs):
        real_one(frame, *args, **kwargs)
        return placed(frame)

    def queued(frames, *args, **kwargs):  # each frame's boxes when its detector's copy back has come
        found = real_queued(frames, *args, **kwargs)
        return [lambda get=get, frame=frame: (get(), placed(frame))[1] for get, frame in zip(found, frames)]

    monkeypatch_target.setattr(pipeline, "find_people", one)
    monkeypatch_target.setattr(pipeline, "find_people_queued", queued)  # the batched detector (the device road's)


def image_figures(ctx, task: str, where: bool) -> dict:
    from sapiens2_demo import ledger
    from sapiens2_demo.jobs.image import run_task
    from sapiens2_demo.media.image import LoadedImage

    rgb, _ = scene_frame()
    with tempfile.TemporaryDirectory() as folder, ledger.recording() as book:
        out = run_task(ctx, LoadedImage(rgb, rgb.shape[:2]), task=LEDGER_TASKS[task], run_dir=Path(folder))
        answer = ledger.answer_bytes(rgb.size, out.files)  # the render: one RGB uint8 picture
    if where:
        print(f"-- image {task}\n{book.table()}\n{book.launch_table()}")
    return {"d2h_bytes": book.bytes("d2h"), "answer_bytes": answer, "waits": book.waits, "launches": book.launches}


def video_figures(key: str, clip: Path, task: str, frames: int, where: bool) -> dict:
    from sapiens2_demo import ledger
    from sapiens2_demo.jobs.video import VideoLimits, process_video

    options = dict(VIDEO_OPTIONS[task])
    if task == "matting":
        from sapiens2_demo.standins.targets import load_photo

        options["background_image"] = load_photo("camera")  # a photo, resized to cover each frame
    name = "pose" if task == "mocap" else LEDGER_TASKS[task]
    with tempfile.TemporaryDirectory() as folder, ledger.recording() as book:
        out = process_video(clip, name, key, folder, batch_size=8, limits=VideoLimits(max_side=WIDTH), **options)
    if where:
        print(f"-- video {task}\n{book.table()}\n{book.launch_table()}")
    n = out.frames
    batches, overlapped = book.overlapped()
    needed = HEIGHT * WIDTH * 3
    if task in ("pose", "mocap"):
        needed += PEOPLE * KEYPOINTS * (12 + (17 if task == "mocap" else 0))
    return {"frames": n, "waits_per_frame": round(book.waits / n, 3),
            "uploads_per_frame": round(book.uploads(HEIGHT * WIDTH) / n, 3),
            "h2d_bytes_per_frame": book.bytes("h2d") // n, "d2h_bytes_per_frame": book.bytes("d2h") // n,
            "needed_bytes_per_frame": needed, "batches": batches, "overlapped_batches": overlapped,
            "launches_per_frame": round(book.launches / n, 1),
            "queue_launches_per_frame": round(book.launches_on("queue") / n, 1)}


def live_figures(ctx, task: str, where: bool) -> dict:
    from sapiens2_demo import ledger
    from sapiens2_demo.ui.live_tab import live_frame

    rgb, _ = scene_frame()
    with ledger.recording():  # the first frame loads the model and uploads the colour tables (once a process)
        live_frame(ctx, rgb, LEDGER_TASKS[task])
    with ledger.recording() as book:  # the second is the one counted
        live_frame(ctx, scene_frame(1)[0], LEDGER_TASKS[task])
    if where:
        print(f"-- live {task}\n{book.table()}\n{book.launch_table()}")
    return {"d2h_bytes": book.bytes("d2h"), "waits": book.waits, "launches": book.launches}


def ledger(argv: list[str], run: harness.Run) -> None:
    """The transfer ledger at 1080p on the stand-ins (docs/ledger.md): copies, waits and queued operations per image
    request, video frame and live frame, the CUDA road counted on a CPU. 6-12 minutes on 2 cores (--only image: 1)."""
    parser = harness.parser(run, ledger.__doc__)
    parser.add_argument("--frames", type=int, default=96)
    parser.add_argument("--tasks", default=",".join([*LEDGER_TASKS, "mocap"]))
    parser.add_argument("--only", default="image,live,video", help="the parts to run: image, live, video")
    parser.add_argument("--where", action="store_true", help="the places in our code that copy or wait")
    args = parser.parse_args(argv)
    import pytest

    from sapiens2_demo import tasks as catalog
    from sapiens2_demo.jobs.image import AppContext

    chosen, parts = harness.names(args.tasks), set(harness.names(args.only))
    if not parts <= {"image", "live", "video"}:
        parser.error(f"--only takes image, live, video; got {args.only!r}")
    ctx = AppContext(harness.manager(harness.standin_checkpoints(), dtype="float32"))
    figures: dict = {"image": {}, "video": {}, "live": {}}
    started = time.perf_counter()
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as folder:
        three_people(patch)
        for task in (t for t in chosen if t in LEDGER_TASKS):
            if "image" in parts:
                figures["image"][task] = image_figures(ctx, task, args.where)
            if "live" in parts and LEDGER_TASKS[task] in catalog.names(live=True):
                figures["live"][task] = live_figures(ctx, task, args.where)
        if "video" in parts:
            clip = harness.encode(Path(folder) / "three_people.mp4", (scene_frame(i)[0] for i in range(args.frames)),
                                  preset="ultrafast", crf="18")
            for task in chosen:
                figures["video"][task] = video_figures(ctx.manager_key, clip, task, args.frames, args.where)
    print(f"transfer ledger, the CUDA road simulated on the CPU, {WIDTH}x{HEIGHT}, stand-ins, "
          f"{time.perf_counter() - started:.0f} s")
    run.weights, run.figures, megabytes = "stand-ins", figures, lambda n: f"{n / 1e6:.2f}"
    if figures["image"]:
        run.table("image", ["image request", "device→host MB", "answer MB", "waits", "operations"],
                  [[task, megabytes(f["d2h_bytes"]), megabytes(f["answer_bytes"]), f["waits"], f["launches"]]
                   for task, f in figures["image"].items()], caption="1080p, three people.")
    if figures["video"]:
        run.table("video", [f"{args.frames}-frame video", "waits / frame", "frame-sized uploads / frame",
                            "host→device MB / frame", "device→host MB / frame", "needed MB / frame",
                            "overlapped batches", "operations / frame"],
                  [[task, f"{f['waits_per_frame']:.3f}", f"{f['uploads_per_frame']:.2f}",
                    megabytes(f["h2d_bytes_per_frame"]), megabytes(f["d2h_bytes_per_frame"]),
                    megabytes(f["needed_bytes_per_frame"]), f"{f['overlapped_batches']}/{f['batches']}",
                    f"{f['launches_per_frame']:.1f}"] for task, f in figures["video"].items()],
                  caption="1080p, three people, CUDA's batch of 8 and chunk of 16.")
    if figures["live"]:
        run.table("live", ["live frame", "device→host MB", "waits", "operations"],
                  [[task, megabytes(f["d2h_bytes"]), f["waits"], f["launches"]] for task, f in figures["live"].items()])


# -- pose: DARK-UDP decode on the host and device roads --------------------------------------------------------------
HEATMAP = (308, 256, 192)
INPUT = (1024, 768)


def model_like_heatmaps(people: int, seed: int = 0) -> np.ndarray:
    """Sigma-6 Gaussian peaks (the training target's width) of varied height plus a little noise."""
    rng = np.random.default_rng(seed)
    k, h, w = HEATMAP
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    out = np.empty((people, k, h, w), np.float32)
    for p in range(people):
        cx, cy = (rng.uniform(0, side, (k, 1, 1)).astype(np.float32) for side in (w, h))
        amp = rng.uniform(0.05, 1.0, (k, 1, 1)).astype(np.float32)
        out[p] = amp * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 72.0)
        out[p] += rng.normal(0, 0.01, (k, h, w)).astype(np.float32)
    return out


def bench_decode(repeat: int, people_counts: list[int], device: str) -> list[list]:
    import torch
    from transformers import Sapiens2ImageProcessor
    from transformers.models.sapiens2.modeling_sapiens2 import Sapiens2PoseEstimatorOutput

    from sapiens2_demo.pipelines.device_post import pose_keypoints
    from sapiens2_demo.pose.decode import decode_heatmaps

    processor = Sapiens2ImageProcessor(size={"height": INPUT[0], "width": INPUT[1]})
    rows = []
    for kind in ("model-like", "uniform"):
        for people in people_counts:
            heatmaps = (model_like_heatmaps(people) if kind == "model-like"
                        else np.random.default_rng(1).random((people, *HEATMAP), dtype=np.float32))
            boxes = np.array([[10 + 40 * i, 20, 300 + 40 * i, 700] for i in range(people)], np.float32)
            xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], 1).tolist()
            tensor = torch.from_numpy(heatmaps).to(device)
            host = partial(decode_heatmaps, tensor, boxes, INPUT)
            on_device = partial(pose_keypoints, tensor, boxes, INPUT)

            def theirs(t=tensor, xywh=xywh):
                return processor.post_process_pose_estimation(Sapiens2PoseEstimatorOutput(heatmaps=t), boxes=[xywh])

            times = [min(harness.timings(host, repeat, device)), min(harness.timings(on_device, repeat, device)),
                     min(harness.timings(theirs, max(1, repeat // 2), device))]
            ref = theirs()[0]
            diffs = [max(float(np.abs(got[i] - r["keypoints"].cpu().numpy()).max()) for i, r in enumerate(ref))
                     for got in (host()[0], on_device()[0])]
            rows.append([kind, people, *(f"{t:.4f}" for t in times), f"{diffs[0]:.2e} / {diffs[1]:.2e}"])
    return rows


def bench_pipeline(args) -> dict:
    """estimate_pose_batch on --frames 720p frames of the astronaut with --people fixed boxes, the flip test on:
    crop, forward and decode ms a person on this device's road, and the bytes a person the device road copies back
    (the transfer ledger's count of a warm-up run; on a CPU its CUDA road simulated)."""
    import cv2

    from sapiens2_demo import ledger
    from sapiens2_demo.pipelines import device_post
    from sapiens2_demo.pipelines.pose import Detections, estimate_pose_batch

    manager = harness.manager(harness.tiny_checkpoints(), args.device, "float32" if args.device == "cpu" else "auto")
    frame = np.full((720, 1280, 3), 128, np.uint8)
    frame[:, 280:1000] = cv2.resize(cv2.imread(str(harness.ROOT / "assets" / "astronaut.jpg"))[..., ::-1], (720, 720))
    boxes = np.array([[320 + 6 * i, 10 + 4 * i, 800 - 6 * i, 720 - 4 * i] for i in range(args.people)], np.float32)
    frames = [frame] * args.frames
    detections = [Detections(boxes, np.ones(len(boxes), np.float32)) for _ in frames]
    with ledger.recording() as book:  # the warm-up, counted: what the device road copies back (simulated on a CPU)
        estimate_pose_batch(frames, manager, detections=detections, batch_size=8)
    runs = []
    for _ in range(args.repeat):
        runs.append({})
        estimate_pose_batch(frames, manager, detections=detections, batch_size=8, timings=runs[-1])
    persons = args.frames * args.people
    found = {stage: round(statistics.median(t[stage] for t in runs) * 1000 / persons, 2)
             for stage in ("crop", "forward", "decode")}
    road = "device" if device_post.use_device_post(manager.device) else "host"
    return {**found, "road": road, "bytes_off_device": round(book.bytes("d2h") / persons)}


def pose(argv: list[str], run: harness.Run) -> None:
    """Pose's decode and pipeline: real-size 308x256x192 heatmaps (model-like and noise) decoded on the host road, the
    device road (only keypoints cross) and by transformers, best of --repeat, with the largest difference to
    transformers; then the pipeline on tiny random weights (`bench_pipeline`), medians of --repeat."""
    parser = harness.parser(run, pose.__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--people", type=int, default=10)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--device", default="cpu", help="cpu, cuda")
    args = parser.parse_args(argv)
    run.weights = "synthetic heatmaps; tiny random weights"
    run.table("decode", ["heatmaps", "people", "host road s", "device road s", "transformers s",
                         "max |dx| px host / device"], bench_decode(args.repeat, sorted({1, args.people}), args.device),
              caption=f"308x256x192 heatmaps a person on {args.device}, best of {args.repeat}.")
    run.figures["pipeline"] = found = bench_pipeline(args)
    run.table("pipeline", ["road", "crop ms", "forward ms", "decode ms", "bytes back, device road"],
              [[found["road"], found["crop"], found["forward"], found["decode"], f"{found['bytes_off_device']:,}"]],
              caption=f"a person, {args.frames} frames of 720p, {args.people} boxes, flip test, batch 8.")


# -- a lent GPU's measurements in one call ---------------------------------------------------------------------------
def session(argv: list[str], run: harness.Run) -> None:
    """A lent GPU's measurements in one call (docs/benchmarks.md): `gpu`, `video --breakdown` and a cProfile of one
    request a task, each under its own time limit, logs and results files under $OUT. --dry-run: here, tiny."""
    import glob
    import shutil
    import subprocess

    parser = harness.parser(run, session.__doc__)
    parser.add_argument("--dry-run", action="store_true", help="on this CPU, tiny checkpoints, 8 frames, no install")
    parser.add_argument("--tasks", default="pose,seg,normal,pointmap")
    args = parser.parse_args(argv)
    limits = (600, 600, 600) if args.dry_run else (200, 220, 50)  # seconds: requests, video, the profile
    out = Path(os.environ.get("OUT") or tempfile.mkdtemp(prefix="gpu_session_"))
    out.mkdir(parents=True, exist_ok=True)
    wheels = sorted(glob.glob(str(harness.ROOT / ".whl" / "*.whl")))
    if wheels and not args.dry_run:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                        "--no-cache-dir", *wheels], check=True)
    device, full = ("cpu", []) if args.dry_run else ("cuda", ["--fullsize"])
    sizes, frames = ("tiny", "8") if args.dry_run else ("full", "96")
    steps = {"requests": ["gpu", "--device", device, "--sizes", sizes, "--compile",
                          "--tasks", args.tasks, "--batches", "1", "--repeat", "3", "--forward-repeat", "5"],
             "video": ["video", "--device", device, *full, "--frames", frames, "--tasks", args.tasks,
                       "--breakdown"],
             "requests_profile": ["gpu", "--device", device, "--sizes", "tiny", "--profile", "--tasks", args.tasks]}
    env = {**os.environ, **harness.OFFLINE, "SAPIENS2_COMPILE": "on", "PYTHONPATH": str(harness.ROOT)}
    for (name, command), limit in zip(steps.items(), limits):
        with open(out / f"{name}.txt", "w") as log:
            try:
                code = subprocess.run([sys.executable, "-m", "benchmarks", *command], cwd=harness.ROOT, env=env,
                                      stdout=log, stderr=subprocess.STDOUT, timeout=limit).returncode
            except subprocess.TimeoutExpired:
                code = "timed out"
        print(f"== {name}: {code}\n" + "".join((out / f"{name}.txt").read_text().splitlines(True)[-30:]), flush=True)
        for results in harness.RESULTS.glob("*.json"):
            shutil.copy(results, out)
    run.figures["logs"] = str(out)

"""The GPU road: forwards and image requests against their forwards on a device, and the transfer ledger's
counts of what a GPU would see, on the CPU.

    python -m benchmarks gpu --device cuda [--sizes tiny,full] [--compile] [--skip-forward] [--profile]
    python -m benchmarks ledger [--where] [--only image,live,video] [--frames 96]
"""

from __future__ import annotations

import argparse
import inspect
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from benchmarks import harness
from benchmarks.video import MASKED, TASKS, make_manager, size_of, sync

# -- gpu -----------------------------------------------------------------------------------------------------------
TARGET_REQUEST_X = 1.3  # issue 37: an image request on a GPU, against its forwards
ENDPOINTS = {"pose": "/pose", "seg": "/segment", "normal": "/normals", "pointmap": "/pointmap",
             "matting": "/matting", "all": "/all"}


def compile_supported() -> bool:
    from sapiens2_demo.models.manager import ModelManager

    return "compile" in inspect.signature(ModelManager.__init__).parameters


def needed(task: str) -> list[tuple[str, str]]:
    """The checkpoints a task's request runs (normals and depth also segment, to remove the background)."""
    if task == "all":
        return [(t, size_of(t)) for t in TASKS]
    return [(task, size_of(task))] + ([("seg", "0.4b")] if task in MASKED else [])


class ForwardClock:
    """Forward hooks on the models: seconds spent inside their forwards (synchronised on CUDA)."""

    def __init__(self, device: str):
        self.cuda = str(device).startswith("cuda")
        self.seconds = 0.0
        self._starts: dict = {}
        self._hooked: set[int] = set()
        self._lock = threading.Lock()
        self.calls: list[str] = []  # what each forward since the last take() was given: shape, dtype, ms

    def attach_all(self, manager, tasks) -> None:
        from sapiens2_demo.models.registry import checkpoint

        for task in tasks:
            for name, size in needed(task):
                self.attach(manager.get(checkpoint(name, size)).model)
            if task in ("pose", "all"):
                self.attach(detector_network(manager))

    def attach(self, module) -> None:
        if id(module) not in self._hooked:
            self._hooked.add(id(module))
            module.register_forward_pre_hook(self._pre, with_kwargs=True)
            module.register_forward_hook(self._post, with_kwargs=True)

    def _sync(self):
        if self.cuda:
            import torch

            torch.cuda.synchronize()

    def _pre(self, module, args, kwargs):
        self._sync()
        self._starts[(id(module), threading.get_ident())] = time.perf_counter()

    def _post(self, module, args, kwargs, output):
        self._sync()
        elapsed = time.perf_counter() - self._starts.pop((id(module), threading.get_ident()))
        given = kwargs.get("pixel_values", args[0] if args else None)
        shape = "x".join(map(str, getattr(given, "shape", ()))) or type(given).__name__
        dtype = str(getattr(given, "dtype", "")).replace("torch.", "")
        with self._lock:
            self.seconds += elapsed
            self.calls.append(f"{type(module).__name__.removeprefix('Sapiens2')} {shape} {dtype} {1000 * elapsed:.1f}")

    def take(self) -> float:
        with self._lock:
            seconds, self.seconds, self.calls = self.seconds, 0.0, []
        return seconds


def detector_network(manager):
    """The network ultralytics runs: its predictor deep-copies the YOLO model at the first predict, so hook
    that copy (set up here with a blank image when no request has run yet). On a CPU that is the ONNX export's
    runner (models/detector_cpu.py), whose backend module wraps the onnxruntime session."""
    import numpy as np

    from sapiens2_demo.pose.detector import find_people

    loaded = manager.get_detector()
    yolo = loaded.runner or loaded.model
    if getattr(yolo, "predictor", None) is None:
        find_people(np.zeros((64, 64, 3), np.uint8), manager)
    return yolo.predictor.model


class TestImages:
    """1920x1080 JPEGs: the astronaut photo on a grey canvas, a new one for every request (a different corner
    mark), so that no request is answered from the app's segmentation cache."""

    def __init__(self, folder: Path):
        from PIL import Image

        self.folder, self.count = folder, 0
        person = Image.open(harness.ROOT / "assets" / "astronaut.jpg").convert("RGB").resize((1080, 1080))
        self.canvas = Image.new("RGB", (1920, 1080), (96, 112, 128))
        self.canvas.paste(person, (420, 0))

    def next(self) -> Path:
        from PIL import ImageDraw

        self.count += 1
        image = self.canvas.copy()
        i = self.count
        ImageDraw.Draw(image).rectangle([0, 0, 31, 31], fill=(37 * i % 256, 255 - 11 * i % 256, i // 256 % 256))
        path = self.folder / f"image_1080p_{i}.jpg"
        image.save(path, quality=95)
        return path


# -- 1. forward -----------------------------------------------------------------------------------------------
def forward_ms(manager, task: str, batch: int, repeat: int, warmup: int) -> tuple[float, float]:
    """(median, fastest) milliseconds of one forward at this batch size."""
    import torch

    from sapiens2_demo.models.inference import input_size
    from sapiens2_demo.models.registry import checkpoint

    loaded = manager.get(checkpoint(task, size_of(task)))
    pixels = torch.randn(batch, 3, *input_size(loaded.processor)).to(loaded.device, loaded.dtype)
    times = []
    with torch.inference_mode():
        for i in range(warmup + repeat):
            sync(loaded.device)
            started = time.perf_counter()
            loaded.model(pixel_values=pixels)
            sync(loaded.device)
            if i >= warmup:
                times.append(time.perf_counter() - started)
    return 1000 * statistics.median(times), 1000 * min(times)


def bench_forward(managers, tasks, batches, args) -> None:
    print(f"\n== 1. forward, ms per call: median (fastest) of {args.forward_repeat} after 2 warm-up calls; "
          "full-size on the CPU: 1 call, no warm-up; pose: per crop, no flip")
    print(f"{'size':6} {'task':9}" + "".join(f"{'batch ' + str(b):>18}" for b in batches)
          + (f"{'per image @8':>14}" if 8 in batches else ""))
    for size, manager in managers.items():
        slow = size == "full" and manager.device == "cpu"
        for task in tasks:
            if size == "full" and task == "matting":
                print(f"{size:6} {task:9} (no full-size matting: released at 1b only)")
                continue
            ms = {b: forward_ms(manager, task, b, 1 if slow else args.forward_repeat, 0 if slow else 2)
                  for b in batches}
            per_image = f"{ms[8][0] / 8:14.1f}" if 8 in ms else ""
            print(f"{size:6} {task:9}" + "".join(f"{ms[b][0]:10.1f} ({ms[b][1]:5.1f})" for b in batches)
                  + per_image, flush=True)
    if 8 not in batches:
        print("(batch 8 skipped: --batches " + ",".join(map(str, batches)) + ")")


# -- 2. end-to-end through the task functions --------------------------------------------------------------------
def task_function(task: str):
    """The request as the tab streams it: a generator of outputs (the render first, then the complete answer)."""
    import functools

    from sapiens2_demo import tasks
    from sapiens2_demo.jobs import image

    if task == "all":
        return image.stream_all
    return functools.partial(image.stream_task, task=tasks.get(task).name)


def timed_request(fn, ctx, image, run_dir) -> tuple[float, float, object]:
    """(seconds to the first output: the render on the page, seconds to the complete answer, that answer)."""
    started, shown, out = time.perf_counter(), None, None
    for out in fn(ctx, image, run_dir=run_dir):
        shown = shown or time.perf_counter() - started
    return shown, time.perf_counter() - started, out


def bench_task_functions(managers, tasks, images, args, work: Path) -> None:
    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.jobs.outputs import OutputStore
    from sapiens2_demo.media.image import load_image

    print(f"\n== 2. end-to-end per 1080p image through the task functions (jobs.image.stream_task on a loaded image; "
          f"median of {args.repeat}, full-size on the CPU: 1). e2e: the complete answer (downloads written); shown: the "
          f"render's first output; target (issue 37, GPU): a request <= {TARGET_REQUEST_X}x its forwards")
    print(f"{'size':6} {'task':9} {'e2e ms':>9} {'forward ms':>11} {'beyond ms':>10} {'not forward':>12} "
          f"{'shown ms':>9} {'shown/fwd':>10} {'e2e/fwd':>8}")
    for size, manager in managers.items():
        ctx = AppContext(manager=manager, outputs=OutputStore(work / f"outputs_{size}"))
        clock = ForwardClock(manager.device)
        slow = size == "full" and manager.device == "cpu"
        for task in tasks:
            if size == "full" and task in ("matting", "all"):
                continue
            fn = task_function(task)
            clock.attach_all(manager, [task])  # loads the models outside the timings
            rows = []
            for i in range(1 if slow else args.repeat + 1):  # the first call (warm-up) is not counted
                clock.take()
                image = load_image(images.next())
                shown, complete, _ = timed_request(fn, ctx, image, ctx.outputs.new_run_dir(None))
                calls = list(clock.calls)
                rows.append((complete, clock.take(), shown))
            rows = rows if slow else rows[1:]
            shown = statistics.median(r[2] for r in rows)
            print_split(f"{size:6} {task:9}", rows, lambda _, fwd, e2e, shown=shown: (
                f" {1000 * shown:9.0f} {shown / fwd if fwd else float('nan'):9.2f}x "
                f"{e2e / fwd if fwd else float('nan'):7.2f}x"))
            print(f"{'':16} the last request's forwards (input, ms): {'; '.join(calls)}")


def print_split(label: str, rows, suffix=lambda beyond, fwd, e2e: "") -> float:
    """Print median end-to-end, forward, beyond-the-forward (per call, then the median) and the share;
    returns the beyond seconds."""
    e2e = statistics.median(r[0] for r in rows)
    fwd = statistics.median(r[1] for r in rows)
    beyond = statistics.median(r[0] - r[1] for r in rows)
    print(f"{label} {1000 * e2e:9.0f} {1000 * fwd:11.1f} {1000 * beyond:10.0f} {beyond / e2e:11.0%}"
          f"{suffix(beyond, fwd, e2e)}", flush=True)
    return beyond


def profile_handlers(manager, tasks, images, work: Path) -> None:
    """cProfile of what an image request runs in the app, minus gradio: load_image -> the job's stream (render,
    then downloads) -> the display files (ui.common.as_display_files, where gradio is installed), one warm call per
    task; top 15 by own time, then our own functions by cumulative time. The downloads' writer thread is not in it."""
    import cProfile
    import io
    import pstats

    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.jobs.outputs import OutputStore
    from sapiens2_demo.media.image import load_image

    try:
        from sapiens2_demo.ui.common import as_display_files
    except ImportError:  # a lent GPU machine without gradio: the display copies are left out
        as_display_files = None
    ctx = AppContext(manager=manager, outputs=OutputStore(work / "outputs_profile"))
    for task in tasks:
        fn = task_function(task)

        def handler():
            path = images.next()
            loaded = load_image(str(path))
            run_dir = ctx.outputs.new_run_dir(None)
            for out in fn(ctx, loaded, run_dir=run_dir):
                if as_display_files is not None:
                    as_display_files(out, run_dir, loaded, str(path))

        handler()  # warm: models loaded, first-call costs paid
        profile = cProfile.Profile()
        profile.enable()
        handler()
        profile.disable()
        what = "load_image + job + display files" if as_display_files else "load_image + job (no gradio: no display files)"
        for order, title, restrict in (("tottime", "own time", ()), ("cumulative", "cumulative time, ours", ("sapiens2_demo",))):
            text = io.StringIO()
            pstats.Stats(profile, stream=text).sort_stats(order).print_stats(*restrict, 15)
            print(f"\n-- cProfile, {task} request minus gradio ({what}), top 15 by {title}:")
            print("\n".join(line for line in text.getvalue().splitlines()[4:] if line.strip()), flush=True)


def gpu(argv: list[str], run: harness.Run) -> None:
    """Model and request speed per task and size on whatever device there is: forward ms at batch 1 and 8 (random
    pixels at the input size; pose: crops, no flip), and per 1080p image through the task functions, end to end against
    its forwards (hooks on the models and the detector's network) and the share that is not the forward. Sizes: tiny
    random weights, `full` (full-size 0.4b random weights, `python -m benchmarks fullsize`). --profile: cProfile's top 15
    of one request a task instead. CUDA runs bf16 (the app's default); a full-size CPU forward takes ~30 s."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks gpu", description=gpu.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda")
    parser.add_argument("--dtype", default="auto", help="auto (bf16 on CUDA, fp32 on the CPU), float32, bfloat16")
    parser.add_argument("--compile", action="store_true", help="torch.compile, when this build supports it")
    parser.add_argument("--sizes", default="tiny", help="tiny,full (full = full-size 0.4b random weights)")
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="checkpoints for the `tiny` size, e.g. stand-ins (standins/train.py; not models); "
                             "default: tiny random weights, written to a temporary folder")
    parser.add_argument("--tasks", default=",".join(TASKS))
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--repeat", type=int, default=3, help="requests per task (end-to-end)")
    parser.add_argument("--forward-repeat", type=int, default=10, help="forwards per task and batch size")
    parser.add_argument("--skip-forward", action="store_true")
    parser.add_argument("--skip-e2e", action="store_true")
    parser.add_argument("--profile", action="store_true", help="cProfile one request per task (tiny), then stop")
    args = parser.parse_args(argv)
    import torch

    from sapiens2_demo.models.manager import resolve_device

    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    sizes = [s.strip() for s in args.sizes.split(",") if s.strip()]
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    if set(tasks) - set(TASKS) or set(sizes) - {"tiny", "full"}:
        raise SystemExit(f"tasks: {', '.join(TASKS)}; sizes: tiny, full")
    device, dtype = resolve_device(args.device, args.dtype)
    args.device = device
    extra = {"compile": "on" if args.compile else "off"} if compile_supported() else {}
    if args.compile and not compile_supported():
        print("torch.compile: unsupported in this build (ModelManager has no compile= parameter); running without it")
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as tmp:
        work = Path(tmp)
        from benchmarks.cpu import ensure_fullsize

        tiny = harness.tiny_checkpoints(args.checkpoint_dir or work / "tiny")
        detector = tiny / "yolov8n-random.pt"
        ckpts = {"tiny": tiny}
        if "full" in sizes:
            ckpts["full"] = ensure_fullsize(sorted({t for t in tasks if t != "matting"} | {"seg"}))
        managers = {size: make_manager(ckpts[size], detector, device, args.dtype, **extra) for size in sizes}
        run.device, run.weights = str(device), " and ".join(f"{s} random weights" for s in sizes)
        print(f"device {device}, dtype {str(dtype).replace('torch.', '')}, compile "
              f"{'on' if extra.get('compile') == 'on' else 'off'}; torch {torch.__version__}, {torch.get_num_threads()} threads, "
              f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
        images = TestImages(work)
        if args.profile:
            profile_handlers(managers[sizes[0]], tasks + ["all"], images, work)
            return
        if not args.skip_forward:
            bench_forward(managers, tasks, batches, args)
        if not args.skip_e2e:
            bench_task_functions(managers, tasks + ["all"] * ("tiny" in sizes), images, args, work)
        print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


# -- ledger --------------------------------------------------------------------------------------------------------
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

    real_one, real_queued = pipeline.find_people, getattr(pipeline, "find_people_queued", None)

    def one(frame, *args, **kwargs):
        real_one(frame, *args, **kwargs)
        return placed(frame)

    def queued(frames, *args, **kwargs):  # each frame's boxes when its detector's copy back has come
        found = real_queued(frames, *args, **kwargs)
        return [lambda get=get, frame=frame: (get(), placed(frame))[1] for get, frame in zip(found, frames)]

    monkeypatch_target.setattr(pipeline, "find_people", one)
    if real_queued is not None:  # the batched detector (the device road's)
        monkeypatch_target.setattr(pipeline, "find_people_queued", queued)


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


def write_clip(path: Path, frames: int) -> None:
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"preset": "ultrafast", "crf": "18"}
        for i in range(frames):
            out.mux(stream.encode(av.VideoFrame.from_ndarray(scene_frame(i)[0], format="rgb24")))
        out.mux(stream.encode())


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
    """The transfer ledger over the GPU road at 1080p on the stand-ins: what crosses between host and device, how
    often the host waits, and the operations queued outside the forwards, per image request (`run_task`, defaults),
    per frame of a --frames clip (CUDA's batch of 8, chunks of 16: pose with three people, mocap, body parts, steady
    normals and depth, matting) and per live frame. On a CPU it takes the CUDA road and counts what would cross. The
    detector's boxes are replaced by the three people's (its upload, forward and copies still count). --where: the
    places in our code that copy, wait or queue the most. About 6-12 minutes on 2 cores (--only image: a minute)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks ledger", description=ledger.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=96)
    parser.add_argument("--tasks", default=",".join([*LEDGER_TASKS, "mocap"]))
    parser.add_argument("--only", default="image,live,video", help="the parts to run: image, live, video")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--where", action="store_true", help="the places in our code that copy or wait")
    args = parser.parse_args(argv)
    import pytest

    from sapiens2_demo import tasks as catalog
    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.standins.train import cached_standins

    chosen = [t.strip() for t in args.tasks.split(",") if t.strip()]
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    if not parts <= {"image", "live", "video"}:
        parser.error(f"--only takes image, live, video; got {args.only!r}")
    standins = cached_standins(log=lambda message: print(message, file=sys.stderr))
    manager = ModelManager(checkpoint_dir=standins, device=args.device, dtype="float32",
                           detector=str(standins / "yolov8n-random.pt"))
    ctx = AppContext(manager)
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
            clip = Path(folder) / "three_people.mp4"
            write_clip(clip, args.frames)
            for task in chosen:
                figures["video"][task] = video_figures(ctx.manager_key, clip, task, args.frames, args.where)
    print(f"transfer ledger, {args.device} ({'counted' if 'cuda' in args.device else 'the CUDA road simulated'}), "
          f"{WIDTH}x{HEIGHT}, stand-ins, {time.perf_counter() - started:.0f} s")
    if figures["image"]:
        print(f"{'image':10}{'d2h MB':>10}{'answer MB':>11}{'waits':>7}{'ops':>7}")
    for task, f in figures["image"].items():
        print(f"{task:10}{f['d2h_bytes'] / 1e6:10.2f}{f['answer_bytes'] / 1e6:11.2f}{f['waits']:7d}{f['launches']:7d}")
    if figures["live"]:
        print(f"{'live':10}{'d2h MB':>10}{'waits':>18}{'ops':>7}")
    for task, f in figures["live"].items():
        print(f"{task:10}{f['d2h_bytes'] / 1e6:10.2f}{f['waits']:18d}{f['launches']:7d}")
    if figures["video"]:
        print(f"{'video':10}{'frames':>7}{'waits/fr':>9}{'uploads/fr':>11}{'h2d MB/fr':>10}{'d2h MB/fr':>10}"
              f"{'needed MB/fr':>13}{'overlapped':>12}{'ops/fr':>8}{'queue':>7}")
    for task, f in figures["video"].items():
        print(f"{task:10}{f['frames']:7d}{f['waits_per_frame']:9.3f}{f['uploads_per_frame']:11.2f}"
              f"{f['h2d_bytes_per_frame'] / 1e6:10.2f}{f['d2h_bytes_per_frame'] / 1e6:10.2f}"
              f"{f['needed_bytes_per_frame'] / 1e6:13.2f}{f['overlapped_batches']:>7d}/{f['batches']:<4}"
              f"{f['launches_per_frame']:8.1f}{f['queue_launches_per_frame']:7.1f}")
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


# -- a lent GPU's measurements in one call ---------------------------------------------------------------------------
def session(argv: list[str], run: harness.Run) -> None:
    """A lent GPU's measurements in one `device` call: the carried wheels (.whl/, as ../shared/reference/GPU.md lists
    them) installed into the machine's own Python, then `gpu` (image requests against their forwards, compiled) and
    `video --breakdown`, full size, and a cProfile of one request a task on tiny checkpoints; each under its own time
    limit, its log and the results files under $OUT as each finishes (what finished comes back if the lease ends).
    Its dry run here, on tiny checkpoints: `python -m benchmarks session --dry-run` (a minute or two)."""
    import glob
    import shutil
    import subprocess

    parser = argparse.ArgumentParser(prog="python -m benchmarks session", description=session.__doc__)
    parser.add_argument("--dry-run", action="store_true", help="on this CPU, tiny checkpoints, 8 frames, no install")
    parser.add_argument("--tasks", default="pose,seg,normal,pointmap")
    parser.add_argument("--limits", default=None, help="seconds for requests, video, the profile (200,220,50; "
                                                       "a dry run on a 2-core CPU: 600,600,600)")
    args = parser.parse_args(argv)
    args.limits = args.limits or ("600,600,600" if args.dry_run else "200,220,50")
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
    for (name, command), limit in zip(steps.items(), (int(s) for s in args.limits.split(","))):
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

"""Image requests (`host`, `gpu`, `cpu`), all timed by one `request` (the job's stream and the display copies, as a
tab's handler makes it) against a `Clock` of the GPU call and of the models' own forwards."""

from __future__ import annotations

import json
import statistics
import tempfile
import threading
import time
import uuid
from pathlib import Path

import numpy as np

from benchmarks import harness

IMAGE_FIGURES = ("gpu_call", "shown", "all_shown", "complete", "request_cpu")  # host's image rows, in ms


class Clock:
    """While entered, seconds inside the GPU call (`jobs.image.infer`); once attached, inside the models' own forwards
    (hooks, synchronised on CUDA; wall and process CPU), with each forward's input and milliseconds."""

    def __init__(self, device: str = "cpu"):
        self.device, self.lock, self.starts, self.hooked = str(device), threading.Lock(), {}, set()
        self.reset()

    def reset(self) -> None:
        self.forward = self.forward_cpu = 0.0
        self.calls: list[str] = []
        self.timers = harness.Timers()

    @property
    def gpu_call(self) -> float:
        return self.timers.seconds.get("GPU call", 0.0)

    def attach(self, manager, task: str) -> None:
        """Hooks on the models `task`'s request runs (its detector's network too), loading them outside the timings."""
        from sapiens2_demo import tasks

        modules = [loaded.model for loaded in harness.task_models(manager, task)]
        modules += [detector_network(manager)] if task == "all" or tasks.get(task).detector else []
        for module in (m for m in modules if id(m) not in self.hooked):
            self.hooked.add(id(module))
            module.register_forward_pre_hook(self._pre, with_kwargs=True)
            module.register_forward_hook(self._post, with_kwargs=True)

    def _pre(self, module, args, kwargs) -> None:
        harness.sync(self.device)
        self.starts[(id(module), threading.get_ident())] = time.perf_counter(), time.process_time()

    def _post(self, module, args, kwargs, output) -> None:
        harness.sync(self.device)
        wall, cpu = self.starts.pop((id(module), threading.get_ident()))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        given = kwargs.get("pixel_values", args[0] if args else None)
        shape = "x".join(map(str, getattr(given, "shape", ()))) or type(given).__name__
        with self.lock:
            self.forward, self.forward_cpu = self.forward + wall, self.forward_cpu + cpu
            self.calls.append(f"{type(module).__name__.removeprefix('Sapiens2')} {shape} "
                              f"{str(getattr(given, 'dtype', '')).replace('torch.', '')} {1000 * wall:.1f}")

    def __enter__(self) -> Clock:
        from sapiens2_demo.jobs import image as image_jobs

        self.reset()
        self.timers.wrap(image_jobs, "infer", "GPU call")
        return self

    def __exit__(self, *exc) -> None:
        self.timers.__exit__()


def detector_network(manager):
    """The network ultralytics runs: its predictor deep-copies the YOLO model at the first predict, so hook that copy
    (set up here with a blank image). On a CPU that is the ONNX export's runner (models/detector_cpu.py)."""
    from sapiens2_demo.pose.detector import find_people

    loaded = manager.get_detector()
    yolo = loaded.runner or loaded.model
    if getattr(yolo, "predictor", None) is None:
        find_people(np.zeros((64, 64, 3), np.uint8), manager)
    return yolo.predictor.model


def request(ctx, path: str, task: str, run_dir: Path, clock: Clock, **options) -> dict:
    """One request as the tab's handler makes it (the picture loaded afresh, the job's stream, the display copies).
    Seconds: `wall`, `first` (output), `gpu_call`, `forward` (attached clock), `request_cpu`; `shown` / `all_shown` /
    `complete`: the first render, the last (All tasks: a tile each), the answer, each less the GPU call until then."""
    from sapiens2_demo import tasks
    from sapiens2_demo.jobs import image as image_jobs
    from sapiens2_demo.media.image import load_image

    try:  # the display copies, where gradio is installed (a lent GPU machine may lack it)
        from sapiens2_demo.ui.common import as_display_files as display
    except ImportError:
        display = None
    stream = image_jobs.stream_all if task == "all" else image_jobs.stream_task
    options = options if task == "all" else {"task": tasks.get(task).name, **options}
    run_dir.mkdir(parents=True, exist_ok=True)  # as OutputStore.new_run_dir: the render may come first
    saved: dict = {}
    with clock:
        started, cpu = time.perf_counter(), time.process_time()
        renders, loaded = [], load_image(path)
        for out in stream(ctx, loaded, run_dir=run_dir, **options):
            if display:
                display(out, run_dir, loaded, path, saved)
            if not out.files:
                renders.append((time.perf_counter() - started, clock.gpu_call))
        wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    (first, first_call), (last, last_call) = renders[0] if renders else (wall, 0), renders[-1] if renders else (wall, 0)
    return {"wall": wall, "first": first, "gpu_call": clock.gpu_call, "forward": clock.forward,
            "forward_cpu": clock.forward_cpu, "shown": first - first_call, "all_shown": last - last_call,
            "complete": wall - clock.gpu_call, "request_cpu": cpu, "calls": list(clock.calls)}


def profile_request(ctx, pictures, task: str, run_dir: Path, clock: Clock) -> None:
    """cProfile's top 15 of one warm request (load_image, the job, the display copies)."""
    request(ctx, pictures(), task, run_dir / "warm", clock)
    stats = harness.profiled(lambda: request(ctx, pictures(), task, run_dir / "profiled", clock))
    harness.print_top(stats, f"a {task} request minus gradio")


def timed_requests(managers: dict, task: str, pictures, work: Path, reps: int, warm: bool = True, **options) -> dict:
    """`task`'s requests on each manager (a road, a size, a kind of checkpoints), loaded first (`load_s`), then `reps`
    each (after an untimed one with `warm`), alternating so load drift hits them alike: per manager the medians."""
    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.jobs.outputs import OutputStore

    found = {}
    for label, manager in managers.items():
        started, clock = time.perf_counter(), Clock(manager.device)
        clock.attach(manager, task)
        found[label] = {"load_s": round(time.perf_counter() - started, 1), "road": manager.road, "runs": [],
                        "ctx": AppContext(manager, outputs=OutputStore(work / f"outputs_{label}")), "clock": clock}
        print(f"  {task} {label}: loaded in {found[label]['load_s']} s ({manager.road}); load {harness.load()}",
              flush=True)
    for rep in range(int(warm) + reps):
        for label, row in found.items():
            row["runs"].append(request(row["ctx"], pictures(), task, work / f"{task}-{label}-{rep}", row["clock"],
                                       **options))
            print(f"  {task} {label} rep {rep}: " + ", ".join(f"{key} {row['runs'][-1][key]:.3f} s" for key in (
                "forward", "wall", "forward_cpu", "request_cpu")) + f"; load {harness.load()}", flush=True)
    for row in found.values():
        runs = row.pop("runs")[int(warm):]
        del row["ctx"], row["clock"]
        row.update({key: statistics.median(r[key] for r in runs) for key in runs[0] if key != "calls"}, calls=runs[-1]["calls"])
    return found


def launch_echo():
    """gradio's own floor: an image filepath in; a JPEG of it, a file and notes out, from a generator (as the tabs')."""
    import gradio as gr
    from PIL import Image

    def echo_stream(path):
        with Image.open(path) as image:
            yield np.asarray(image.convert("RGB")), [path], "echo"

    with gr.Blocks() as demo:
        image, shown = gr.Image(type="filepath"), gr.Image(format="jpeg", interactive=False)
        files, notes = gr.File(file_count="multiple"), gr.Markdown()
        gr.Button().click(echo_stream, [image], [shown, files, notes], api_name="echo_stream")
    demo.queue()
    port = harness.free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return demo, f"http://127.0.0.1:{port}/"


class PageCalls:
    """Calls a Blocks event as the browser does (upload, queue/join, queue/data's events): the tabs' streamed events
    are private, out of gradio_client's reach. A call gives seconds until the first render, the last, the answer."""

    def __init__(self, demo, url: str):
        import httpx

        self.demo, self.url, self.http = demo, url.rstrip("/") + "/gradio_api", httpx.Client(timeout=120)

    def call(self, api_name: str, image: str) -> tuple[float, float, float]:
        index, fn = next((i, fn) for i, fn in self.demo.fns.items() if fn.api_name == api_name)
        with open(image, "rb") as file:
            [uploaded] = self.http.post(f"{self.url}/upload", files={"files": file}).json()
        data = [{"path": uploaded, "meta": {"_type": "gradio.FileData"}, "orig_name": Path(image).name}]
        data += [getattr(block, "value", None) for block in fn.inputs[1:]]
        session, updates = uuid.uuid4().hex, []
        started = time.perf_counter()
        self.http.post(f"{self.url}/queue/join", json={"data": data, "fn_index": index, "session_hash": session,
                                                        "trigger_id": None, "event_data": None})
        with self.http.stream("GET", f"{self.url}/queue/data", params={"session_hash": session}) as events:
            for line in events.iter_lines():
                message = json.loads(line[5:]) if line.startswith("data:") else {}
                if message.get("msg") == "process_generating":
                    updates.append(time.perf_counter() - started)
                if message.get("msg") == "process_completed":
                    if not message.get("success", False):
                        raise RuntimeError(f"{api_name} failed: {message.get('output')}")
                    done = time.perf_counter() - started
                    renders = updates[:-1] or updates or [done]  # the last update carries the files
                    return renders[0], renders[-1], done
        raise RuntimeError(f"{api_name}: the event stream ended before the answer")


def bench_gradio(checkpoint_dir: Path, pictures, reps: int, endpoints) -> dict:
    from tests.conftest import launch_app  # the real app, started as the tests and app.py start it

    page = PageCalls(*launch_app(checkpoint_dir, checkpoint_dir / "yolo26n-random.pt"))
    floor = PageCalls(*launch_echo())
    try:
        for _ in range(3):
            floor.call("echo_stream", pictures.path)
        for endpoint in endpoints:
            page.call(f"{endpoint}_tab", pictures())
        rows = {e: {"floor": [], "shown": [], "all_shown": [], "complete": []} for e in endpoints}
        for _ in range(reps):
            for endpoint in endpoints:  # each right after an echo call: load drift hits both alike
                image = pictures()
                *_, base = floor.call("echo_stream", image)
                for key, value in zip(("shown", "all_shown", "complete"), page.call(f"{endpoint}_tab", image)):
                    rows[endpoint][key].append(value - base)
                rows[endpoint]["floor"].append(base)
    finally:
        page.demo.close()
        floor.demo.close()
    return {e: {key: round(1000 * statistics.median(values), 1) for key, values in r.items()} for e, r in rows.items()}


def host(argv: list[str], run: harness.Run) -> None:
    """The host's work around the forwards (docs/host.md): 1080p requests in this process and through gradio (beyond
    an echo app's floor), a 720p video's host work against its I/O floor. The detector: a random YOLO26n."""
    from benchmarks.video import host_frames
    from sapiens2_demo.standins.tiny import write_tiny_detector

    parser = harness.parser(run, host.__doc__)
    parser.add_argument("--kinds", default="tiny,standins", help="tiny (random weights), standins, or both")
    parser.add_argument("--tasks", default="pose,segment,normals,pointmap,matting")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--frames", type=int, default=48, help="video clip length")
    parser.add_argument("--video-reps", type=int, default=3, help="runs of each video task (the median's row)")
    parser.add_argument("--profile", action="store_true", help="cProfile's top 15 of one request a task first")
    parser.add_argument("--fresh", action="store_true", help="each request's picture never seen before")
    for part in ("image", "gradio", "video"):
        parser.add_argument(f"--no-{part}", action="store_true")
    args = parser.parse_args(argv)
    task_names, kinds = [t for t in harness.names(args.tasks) if t != "all"], harness.names(args.kinds)
    run.weights = " and ".join(kinds)
    with tempfile.TemporaryDirectory(prefix="bench_host_") as tmp:
        work, pictures = Path(tmp), harness.Pictures(Path(tmp), args.fresh)
        for kind in kinds:
            checkpoint_dir = harness.checkpoints(kind)
            detector = checkpoint_dir / "yolo26n-random.pt"
            if not detector.is_file():  # random weights: its forward's arithmetic is what is timed
                write_tiny_detector(detector, "yolo26n")
            found = run.figures.setdefault(kind, {})
            if not args.no_image:
                if args.profile:
                    from sapiens2_demo.jobs.image import AppContext

                    ctx = AppContext(harness.manager(checkpoint_dir, detector=detector))
                    for task in [*task_names, "all"]:
                        profile_request(ctx, pictures, task, work / f"profile_{kind}_{task}", Clock())
                found["image"], manager = {}, harness.manager(checkpoint_dir, detector=detector)
                for task in [*task_names, "all"]:
                    [timed] = timed_requests({kind: manager}, task, pictures, work, args.reps).values()
                    found["image"][task] = {key: round(1000 * timed[key], 1) for key in IMAGE_FIGURES}
            if not args.no_gradio:
                found["gradio"] = bench_gradio(checkpoint_dir, pictures, args.reps, [*task_names, "all"])
            if not args.no_video:
                found["video"] = host_frames(kind, checkpoint_dir, detector, args.frames, task_names, work,
                                             args.video_reps)
    for kind, found in run.figures.items():
        suffix = "" if kind == "standins" else f"-{kind}"
        if "image" in found:
            run.table(f"image{suffix}", ["task", "GPU call", "shown", "all shown", "complete", "request CPU"],
                      [[f"/{task}", *row.values()] for task, row in found["image"].items()],
                      caption=f"ms, medians of {args.reps}, in this process.")
        if "gradio" in found:
            run.table(f"gradio{suffix}", ["endpoint", "gradio's floor", "shown beyond it", "all shown",
                                          "complete beyond it"],
                      [[f"/{e}", *r.values()] for e, r in found["gradio"].items()],  # floor, shown, all, complete
                      caption=f"ms, medians of {args.reps}{', fresh pictures' if args.fresh else ''}.")
        if "video" in found:
            run.table(f"video{suffix}", ["task", "ours ms a frame", "host ms", "floor ms", "host / floor",
                                         "host / drawn floor", "runs"],
                      [[task, r["ours_ms"], r["host_ms"], r["floor_ms"], r["host_vs_floor"], r["host_vs_drawn_floor"],
                        ", ".join(map(str, r["host_vs_floor_runs"]))] for task, r in found["video"].items()],
                      caption=f"{args.frames} frames of 720p; target 1.2.")


def forward_ms(manager, task: str, batch: int, repeat: int, warmup: int) -> tuple[float, float]:
    """(median, fastest) milliseconds of one forward at this batch size, on random pixels at the input size."""
    import torch

    from sapiens2_demo import tasks
    from sapiens2_demo.models.inference import input_size
    from sapiens2_demo.models.registry import checkpoint

    spec = tasks.get(task)
    loaded = manager.get(checkpoint(spec.family, spec.default_size()))
    pixels = torch.randn(batch, 3, *input_size(loaded.processor)).to(loaded.device, loaded.dtype)
    with torch.inference_mode():
        times = harness.timings(lambda: loaded.model(pixel_values=pixels), repeat, loaded.device, warmup)
    return 1000 * statistics.median(times), 1000 * min(times)


def gpu(argv: list[str], run: harness.Run) -> None:
    """Forward ms per task at each of --batches, then each 1080p request's complete answer and first render against
    its own forwards (docs/gpu.md), on any device (CUDA runs bf16; a full-size CPU forward: one request, no warm-up)."""
    from benchmarks.checkpoints import ensure_fullsize

    parser = harness.parser(run, gpu.__doc__)
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda")
    parser.add_argument("--compile", action="store_true", help="torch.compile (regional)")
    parser.add_argument("--sizes", default="tiny", help="tiny,full (full = full-size 0.4b random weights)")
    parser.add_argument("--tasks", default="pose,seg,normal,pointmap,matting")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--repeat", type=int, default=3, help="requests per task")
    parser.add_argument("--forward-repeat", type=int, default=10, help="forwards per task and batch size")
    parser.add_argument("--skip-forward", action="store_true")
    parser.add_argument("--profile", action="store_true", help="cProfile one request per task, then stop")
    args = parser.parse_args(argv)
    import torch

    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.models.manager import resolve_device

    tasks, sizes = harness.names(args.tasks), harness.names(args.sizes)
    device, dtype = resolve_device(args.device, "auto")
    run.device, run.weights = str(device), " and ".join(f"{s} random weights" for s in sizes)
    print(f"device {device}, dtype {str(dtype).replace('torch.', '')}, compile {'on' if args.compile else 'off'}; "
          f"torch {torch.__version__}, {torch.get_num_threads()} threads; load {harness.load()}")
    slow = "full" in sizes and str(device) == "cpu"  # a full-size CPU forward: one call, no warm-up
    with tempfile.TemporaryDirectory(prefix="bench_gpu_") as tmp:
        work, pictures = Path(tmp), harness.Pictures(Path(tmp), fresh=True)
        tiny = harness.tiny_checkpoints(work / "tiny")
        folders = {"tiny": tiny, "full": ensure_fullsize(tasks) if "full" in sizes else None}
        managers = {size: harness.manager(folders[size], device, detector=tiny / "yolov8n-random.pt",
                                          compile="on" if args.compile else "off") for size in sizes}
        if args.profile:
            for task in [*tasks, "all"]:
                profile_request(AppContext(managers[sizes[0]]), pictures, task, work / f"profile_{task}", Clock())
            return
        batches, forwards = harness.names(args.batches), 1 if slow else args.forward_repeat
        requests = 1 if slow else args.repeat
        for size, manager in managers.items() if not args.skip_forward else ():
            print(f"\n{size}: forward ms, median (fastest) of {forwards}, by batch")
            for task in (t for t in tasks if not (size == "full" and t == "matting")):  # matting: released at 1b only
                found = [forward_ms(manager, task, int(b), forwards, 0 if slow else 2) for b in batches]
                print(f"{task:9}" + "".join(f"{b:>4}: {m:8.1f} ({f:6.1f})" for b, (m, f) in zip(batches, found)),
                      flush=True)
        rows: dict = {size: [] for size in sizes}
        for task in [*tasks, "all"]:  # all: every task's forwards, tiny only
            chosen = {size: m for size, m in managers.items() if size == "tiny" or task not in ("matting", "all")}
            found = timed_requests(chosen, task, pictures, work, requests, warm=not slow)
            for size, row in found.items():
                wall, forward, first = (1000 * row[key] for key in ("wall", "forward", "first"))
                ratio = (lambda ms: f"{ms / forward:.2f}x") if forward else (lambda ms: "-")  # no forward: a cache
                rows[size].append([task, f"{wall:.0f} / {forward:.1f}", ratio(wall), f"{first:.0f} ({ratio(first)})"])
                print(f"  {task} {size}: the last request's forwards (input, ms): {'; '.join(row['calls'])}")
        for size in sizes:
            run.table("image" if size == "full" else f"image-{size}", ["task", "complete ms / forwards ms", "ratio",
                      "render shown ms (ratio)"], rows[size], caption=f"1080p, medians of {requests}, target 1.3x.")


ROADS = {"float32": ("float32", "off"), "bfloat16": ("bfloat16", "off"), "auto": ("auto", "auto")}
CPU_TASKS = {"seg": ("segment", {}), "pose": ("pose", {"flip_test": True}),
             "pose-noflip": ("pose", {"flip_test": False}), "normal": ("normals", {}), "pointmap": ("pointmap", {})}


def cpu(argv: list[str], run: harness.Run) -> None:
    """The CPU's roads on full-size random weights (docs/cpu.md): per task, the request and its forwards on eager
    float32 and on the auto road (bf16 + regional compile where native). `pose` has the flip test, `pose-noflip` not."""
    from benchmarks.checkpoints import DEFAULT_DIR, ensure_fullsize

    parser = harness.parser(run, cpu.__doc__)
    parser.add_argument("--tasks", default="seg,pose,pose-noflip,normal,pointmap", help=", ".join(CPU_TASKS))
    parser.add_argument("--roads", default="float32,auto", help=", ".join(ROADS))
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--checkpoint-dir", type=Path, default=DEFAULT_DIR,
                        help="full-size checkpoints (python -m benchmarks fullsize --dir DIR)")
    args = parser.parse_args(argv)
    tasks, roads = harness.names(args.tasks), harness.names(args.roads)
    unknown = [t for t in tasks if t not in CPU_TASKS] + [r for r in roads if r not in ROADS]
    if unknown:
        parser.error(f"unknown task or road: {', '.join(unknown)}")
    folder = ensure_fullsize(tasks, args.checkpoint_dir)
    run.weights, rows = "full-size 0.4b random weights", []
    with tempfile.TemporaryDirectory() as tmp:
        work, pictures = Path(tmp), harness.Pictures(Path(tmp), fresh=True)
        for task in tasks:
            name, options = CPU_TASKS[task]
            managers = {road: harness.manager(folder, dtype=ROADS[road][0], compile=ROADS[road][1]) for road in roads}
            run.figures[task] = found = timed_requests(managers, name, pictures, work, args.reps, False, **options)
            for road, row in found.items():
                speed_up = f"{found['float32']['wall'] / row['wall']:.2f}x" if "float32" in found else "-"
                rows.append([task, f"{road}: {row['road']}", f"{row['forward']:.1f}", f"{row['wall']:.1f}",
                             f"{row['forward_cpu']:.1f} / {row['request_cpu']:.1f}", speed_up])
    run.table("roads", ["task", "road", "forward s", "request s", "CPU s: forward / request", "request vs float32"],
              rows, caption=f"Medians of {args.reps} per road, the roads alternating.")

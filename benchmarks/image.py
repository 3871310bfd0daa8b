"""The host's work around the forwards: a 1080p image request in this process and through gradio, and a 720p video
a frame; and each image endpoint through gradio_client.

    python -m benchmarks host [--kinds tiny,standins] [--reps 5] [--frames 48] [--video-reps 3]
        [--tasks pose,segment,normals,pointmap,matting[,all]] [--no-image] [--no-gradio] [--no-video] [--profile]
        [--fresh] [--detector yolo26n] [--root DIR]
    python -m benchmarks endpoints [--reps 7] [--checkpoint-dir tiny|standins|DIR] [--download-files] [--root DIR]

`host`, in this process (medians of --reps): forward (the GPU call: pre-processing, forwards, post-processing);
shown / all shown / complete (the job's first render, last render and complete answer, each less the forwards made
until then, with the display copies gradio is handed); the render, the display copies and the files alone; CPU
(this process's, all threads). --profile: the request thread's CPU per stage (cProfile on thread time). Then
through gradio as the page calls it (upload, queue/join, the event stream: the tabs' streamed events), each call
right after a call of an echo app's generator event: ms beyond gradio's floor until the render reaches the caller
and until the answer is complete. Then the video (video.host_frames): host = ours - forwards against the floor.
--fresh: each request's picture one never seen (a pixel changed), so no cache serves it. Targets (stand-ins, 1080p,
2 cores): complete <= 0.2 s beyond the floor (/all <= 0.8 s), shown <= 0.1 s; a video's host <= 1.2x its floor.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import harness

IMAGE_TASKS = ("pose", "segment", "normals", "pointmap", "matting")
STAGES = {"load_image": ("media/image.py", "load_image"), "detector": ("pose/detector.py", "detect_people_batch"),
          "crops": ("models/crops.py", "crop_people"), "preprocess": ("models/inference.py", "preprocess"),
          "model forward": ("models/inference.py", "forward"), "seg-cache key": ("pipelines/dense.py", "key"),
          "GPU call": ("jobs/image.py", "infer"), "present": ("tasks/present.py", "present_"),
          "summary": ("tasks/summary.py", "summarize"), "display copies": ("ui/common.py", "as_display_files")}


def ms(seconds: float) -> float:
    return round(1000 * seconds, 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def detector_weights(checkpoint_dir: Path, architecture: str) -> Path:
    """Random weights of `architecture` beside the checkpoints (its forward's arithmetic is what is timed)."""
    from sapiens2_demo.standins.tiny import write_tiny_detector

    path = checkpoint_dir / f"{architecture}-random.pt"
    return path if path.is_file() else write_tiny_detector(path, architecture)


def launch_app(checkpoint_dir: Path, detector: Path):
    """The real app, as tests/conftest.py's launch_app: (demo, url)."""
    import app

    args = app.parse_args(["--checkpoint-dir", str(checkpoint_dir), "--detector", str(detector), "--device", "cpu",
                           "--port", str(free_port())])
    demo = app.create_app(args)
    demo.launch(server_name="127.0.0.1", server_port=args.port, prevent_thread_lock=True, quiet=True,
                max_file_size=args.max_file_size)
    return demo, f"http://127.0.0.1:{args.port}/"


def launch_echo():
    """gradio's own floor: an image filepath in; a JPEG of it, a file and a notes string out, as a plain function
    (`echo`) and a generator (`echo_stream`, as the tabs' events are)."""
    import gradio as gr
    import numpy as np
    from PIL import Image

    def echo(path):
        with Image.open(path) as image:
            return np.asarray(image.convert("RGB")), [path], "echo"

    def echo_stream(path):
        yield echo(path)

    with gr.Blocks() as demo:
        image, shown = gr.Image(type="filepath"), gr.Image(format="jpeg", interactive=False)
        files, notes = gr.File(file_count="multiple"), gr.Markdown()
        gr.Button().click(echo, [image], [shown, files, notes], api_name="echo")
        gr.Button().click(echo_stream, [image], [shown, files, notes], api_name="echo_stream")
    demo.queue()
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return demo, f"http://127.0.0.1:{port}/"


class Pictures:
    """The request's picture: the one 1080p image, or (fresh) a copy with one pixel changed, never seen before."""

    def __init__(self, image: str, fresh: bool, work: Path):
        self.image, self.fresh, self.work, self.made = image, fresh, work, 0

    def __call__(self) -> str:
        if not self.fresh:
            return self.image
        import cv2

        self.made += 1
        picture = cv2.imread(self.image)
        picture[0, 0] = (self.made % 256, self.made // 256 % 256, 7)
        path = self.work / f"fresh_{self.made}.jpg"
        cv2.imwrite(str(path), picture, [cv2.IMWRITE_JPEG_QUALITY, 95])
        return str(path)


# -- in this process -----------------------------------------------------------------------------------------------
class ForwardClock:
    """Times jobs.image.infer (the GPU call) while installed."""

    def __enter__(self):
        from sapiens2_demo.jobs import image as image_jobs

        self.module, self.original, self.seconds = image_jobs, image_jobs.infer, 0.0

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return self.original(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        image_jobs.infer = timed
        return self

    def __exit__(self, *exc):
        self.module.infer = self.original


def request(ctx, path: str, task: str, run_dir: Path) -> dict:
    """One request through the job and the display copies, as the tab's handler makes it (the image loaded afresh,
    as an upload is): seconds of the forward, of the host until the render is shown and until it is complete."""
    from sapiens2_demo.jobs import image as image_jobs
    from sapiens2_demo.media.image import load_image
    from sapiens2_demo.ui.common import as_display_files

    stream, kwargs = (image_jobs.stream_all, {}) if task == "all" else (image_jobs.stream_task, {"task": task})
    run_dir.mkdir(parents=True, exist_ok=True)  # as OutputStore.new_run_dir: the render may come first
    saved: dict = {}
    with ForwardClock() as clock:
        started, cpu = time.perf_counter(), time.process_time()
        renders, loaded = [], load_image(path)
        for out in stream(ctx, loaded, run_dir=run_dir, **kwargs):
            as_display_files(out, run_dir, loaded, path, saved)
            if not out.files:  # a render update (All tasks: one a tile), less the forwards until then
                renders.append(time.perf_counter() - started - clock.seconds)
        complete, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"forward": clock.seconds, "shown": renders[0], "all_shown": renders[-1],
            "complete": complete - clock.seconds, "request_cpu": cpu}


def stages(ctx, loaded, task: str, work: Path) -> dict:
    """The render, the display copies and the files each on their own (wall and CPU seconds)."""
    from sapiens2_demo import tasks
    from sapiens2_demo.jobs import image as image_jobs
    from sapiens2_demo.results import TaskOutput
    from sapiens2_demo.ui.common import as_display_files

    spec = tasks.get(task)
    work.mkdir(parents=True, exist_ok=True)
    chosen = spec.defaults(ctx.manager.device)
    job = image_jobs.make_job(ctx, spec.name, None, {})
    image_jobs.ask_light_answer(spec, job, chosen)
    [result] = image_jobs.infer(ctx, [loaded.rgb], [job])[0]
    figures = {}

    def timed(name, step):
        started, cpu = time.perf_counter(), time.process_time()
        made = step()
        figures[name], figures[f"{name}_cpu"] = time.perf_counter() - started, time.process_time() - cpu
        return made

    out = timed("render", lambda: spec.present(loaded, result, **chosen))
    timed("display", lambda: as_display_files(out, work, loaded, None))
    timed("files", lambda: spec.finish(TaskOutput(), loaded.rgb, result, work / "files", **chosen))
    return figures


def profile_stages(ctx, path: str, task: str, run_dir: Path, reps: int) -> dict:
    """ms of the request thread's CPU per stage (cProfile on thread time, outermost calls, medians of `reps`)."""
    import cProfile
    import pstats

    request(ctx, path, task, run_dir / "warm")
    seen: dict = {name: [] for name in [*STAGES, "request"]}
    for i in range(reps):
        profiler, cpu = cProfile.Profile(time.thread_time), time.thread_time()
        profiler.enable()
        request(ctx, path, task, run_dir / str(i))
        profiler.disable()
        seen["request"].append(time.thread_time() - cpu)
        stats = pstats.Stats(profiler).stats
        for name, (suffix, prefix) in STAGES.items():
            def ours(key, suffix=suffix, prefix=prefix):
                return key[0].endswith(suffix) and key[2].startswith(prefix)
            seen[name].append(sum(v[3] for key, v in stats.items() if ours(key) and not any(map(ours, v[4]))))
    return {name: ms(statistics.median(values)) for name, values in seen.items()}


def bench_image(kind: str, checkpoint_dir: Path, pictures: Pictures, reps: int, task_names, work: Path,
                detector: Path, profile: bool) -> dict:
    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.media.image import load_image
    from sapiens2_demo.models.manager import ModelManager

    ctx = AppContext(ModelManager(checkpoint_dir=checkpoint_dir, device="cpu", detector=str(detector)))
    loaded, rows = load_image(pictures.image), {}
    for task in [*task_names, "all"]:
        request(ctx, pictures(), task, work / f"{kind}_{task}_warm")  # models load, first calls
        runs = [request(ctx, pictures(), task, work / f"{kind}_{task}_{i}") for i in range(reps)]
        row = {key: ms(statistics.median(r[key] for r in runs)) for key in runs[0]}
        if task != "all":
            alone = [stages(ctx, loaded, task, work / f"{kind}_{task}_stages_{i}") for i in range(reps)]
            row.update({key: ms(statistics.median(a[key] for a in alone)) for key in alone[0]})
        if profile:
            row["profile"] = profile_stages(ctx, pictures.image, task, work / f"{kind}_{task}_profile", reps)
        rows[task] = row
        print(f"  [{kind}] /{task}: {row}  (load {harness.load()})", file=sys.stderr, flush=True)
    return rows


# -- through gradio, as the page calls it --------------------------------------------------------------------------
class PageCalls:
    """Calls a Blocks event as the browser does (upload, queue/join, queue/data's events): the tabs' streamed events
    are private, out of gradio_client's reach. A call gives seconds until the first render, the last, the answer."""

    def __init__(self, demo, url: str):
        import httpx

        self.demo, self.url, self.http = demo, url.rstrip("/") + "/gradio_api", httpx.Client(timeout=120)

    def call(self, api_name: str, image: str) -> tuple[float, float, float]:
        import uuid

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


def bench_gradio(checkpoint_dir: Path, pictures: Pictures, reps: int, endpoints, detector: Path) -> dict:
    real, real_url = launch_app(checkpoint_dir, detector)
    echo, echo_url = launch_echo()
    try:
        page, floor = PageCalls(real, real_url), PageCalls(echo, echo_url)
        for _ in range(3):
            floor.call("echo_stream", pictures.image)
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
        real.close()
        echo.close()
    return {e: {key: ms(statistics.median(values)) for key, values in r.items()} for e, r in rows.items()}


def host(argv: list[str], run: harness.Run) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks host", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", default="tiny,standins", help="tiny (random weights), standins, or both")
    parser.add_argument("--tasks", default=",".join(IMAGE_TASKS))
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--frames", type=int, default=48, help="video clip length")
    parser.add_argument("--video-reps", type=int, default=3, help="runs of each video task (the median's row)")
    parser.add_argument("--profile", action="store_true", help="the request thread's CPU per stage")
    parser.add_argument("--fresh", action="store_true", help="each request's picture never seen before")
    parser.add_argument("--detector", default="yolo26n", help="the detector's architecture, random weights")
    for part in ("image", "gradio", "video"):
        parser.add_argument(f"--no-{part}", action="store_true")
    parser.add_argument("--root", type=Path, default=None, help="import sapiens2_demo and app from this checkout")
    args = parser.parse_args(argv)
    if args.root:
        sys.path.insert(0, str(args.root.resolve()))
    from benchmarks.video import host_frames

    task_names = [t.strip() for t in args.tasks.split(",") if t.strip()]
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    run.weights = " and ".join(kinds)
    with tempfile.TemporaryDirectory(prefix="bench_host_") as tmp, contextlib.redirect_stdout(sys.stderr):
        work = Path(tmp)
        pictures = Pictures(str(harness.astronaut(work / "astronaut_1080p.jpg")), args.fresh, work)
        for kind in kinds:
            checkpoint_dir = harness.checkpoints(kind)
            detector = detector_weights(checkpoint_dir, args.detector)
            found = run.figures.setdefault(kind, {})
            if not args.no_image:
                found["image"] = bench_image(kind, checkpoint_dir, pictures, args.reps,
                                             [t for t in task_names if t != "all"], work, detector, args.profile)
            if not args.no_gradio:
                found["gradio"] = bench_gradio(checkpoint_dir, pictures, args.reps, [*dict.fromkeys([*task_names,
                                                                                                     "all"])], detector)
            if not args.no_video:
                found["video"] = host_frames(kind, checkpoint_dir, detector, args.frames, task_names, work,
                                             args.video_reps)
    for kind, found in run.figures.items():
        tables(run, kind, found, args)


def tables(run: harness.Run, kind: str, found: dict, args) -> None:
    """The docs' tables of one kind of checkpoints (printed too)."""
    suffix = "" if kind == "standins" else f"-{kind}"
    if "image" in found:
        columns = ["task", "forward", "shown", "complete", "request CPU", "render", "display", "files"]
        rows = [[f"/{task}"] + [row.get(key, "-") for key in ("forward", "shown", "complete", "request_cpu",
                                                               "render", "display", "files")]
                for task, row in found["image"].items()]
        run.table(f"image{suffix}", columns, rows, caption=f"ms, medians of {args.reps}, in this process.")
    if "gradio" in found:
        columns = ["endpoint", "gradio's floor", "shown beyond it", "all shown", "complete beyond it"]
        rows = [[f"/{e}", r["floor"], r["shown"], r["all_shown"], r["complete"]] for e, r in found["gradio"].items()]
        run.table(f"gradio{suffix}", columns, rows, caption=f"ms, medians of {args.reps}"
                  f"{', fresh pictures' if args.fresh else ''}.")
    if "video" in found:
        columns = ["task", "ours ms a frame", "host ms", "floor ms", "host / floor", "host / drawn floor", "runs"]
        rows = [[task, r["ours_ms"], r["host_ms"], r["floor_ms"], r["host_vs_floor"], r["host_vs_drawn_floor"],
                 ", ".join(map(str, r["host_vs_floor_runs"]))] for task, r in found["video"].items()]
        run.table(f"video{suffix}", columns, rows, caption=f"{args.frames} frames of 720p; target 1.2.")
    for key in (f"{part}{suffix}" for part in ("image", "gradio", "video") if part in found):
        table = run.tables[key]
        print(f"\n{key}:\n" + "\n".join(" | ".join(map(str, r)) for r in [table["columns"], *table["rows"]]))


# -- through gradio_client -------------------------------------------------------------------------------------------
def endpoints(argv: list[str], run: harness.Run) -> None:
    """Each image endpoint at 1080p through gradio_client, after one warm-up, each call right after an echo call:
    seconds beyond gradio's floor until the first output and the complete answer (median, best); with
    --download-files also the files and MB the client fetched a call."""
    from gradio_client import Client, handle_file
    from gradio_client import client as gradio_client

    parser = argparse.ArgumentParser(prog="python -m benchmarks endpoints", description=endpoints.__doc__)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--endpoints", default="pose,segment,normals,pointmap,matting,all")
    parser.add_argument("--checkpoint-dir", default="tiny", help="tiny (random weights), standins, or a folder")
    parser.add_argument("--download-files", action="store_true")
    parser.add_argument("--root", type=Path, default=None, help="import app and sapiens2_demo from this checkout")
    args = parser.parse_args(argv)
    if args.root:
        sys.path.insert(0, str(args.root.resolve()))
    run.weights = f"{args.checkpoint_dir} checkpoints"
    fetched: list[int] = []
    download = gradio_client.Endpoint._download_file

    def counted(self, x):
        path = download(self, x)
        fetched.append(os.path.getsize(path))
        return path

    def timed(client, image, api_name) -> tuple[float, float]:
        started, job, first = time.perf_counter(), client.submit(handle_file(image), api_name=api_name), None
        while not job.done():
            first = first or (job.outputs() and time.perf_counter() - started) or None
            time.sleep(0.002)
        job.result()  # raises the endpoint's error, if any
        return first or time.perf_counter() - started, time.perf_counter() - started

    checkpoint_dir = harness.checkpoints(args.checkpoint_dir)
    names = [e.strip().lstrip("/") for e in args.endpoints.split(",") if e.strip()]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_endpoints_") as tmp:
        image = str(harness.astronaut(Path(tmp) / "astronaut_1080p.jpg"))
        real, real_url = launch_app(checkpoint_dir, checkpoint_dir / "yolov8n-random.pt")
        echo, echo_url = launch_echo()
        gradio_client.Endpoint._download_file = counted
        try:
            where = str(Path(tmp) / "downloads") if args.download_files else False
            client, floor = (Client(url, verbose=False, download_files=where) for url in (real_url, echo_url))
            for name in ["echo"] * 3 + names:
                timed(floor if name == "echo" else client, image, f"/{name}")
            for name in names:
                shown, complete, files = [], [], []
                for _ in range(args.reps):
                    _, base = timed(floor, image, "/echo")
                    fetched.clear()
                    first, done = timed(client, image, f"/{name}")
                    shown.append(first - base)
                    complete.append(done - base)
                    files.append(list(fetched))
                rows.append([f"/{name}", f"{statistics.median(shown):.3f}", f"{statistics.median(complete):.3f}",
                             f"{min(complete):.3f}", len(files[-1]), f"{sum(files[-1]) / 1e6:.2f}"])
                print(" | ".join(map(str, rows[-1])), flush=True)
        finally:
            gradio_client.Endpoint._download_file = download
            real.close()
            echo.close()
    run.table("endpoints", ["endpoint", "shown s", "complete s", "best s", "files fetched", "MB"], rows,
              caption=f"Seconds beyond gradio's echo floor, medians of {args.reps}; client downloads: "
                      f"{'yes' if args.download_files else 'no'}.")

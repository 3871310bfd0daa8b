"""The host's work around the forwards: a 1080p image request in this process and through gradio, and a 720p video
a frame; and the stand-ins' structure against random weights.

    python -m benchmarks host [--kinds tiny,standins] [--reps 5] [--frames 48] [--video-reps 3]
        [--tasks pose,segment,normals,pointmap,matting[,all]] [--no-image] [--no-gradio] [--no-video] [--profile]
        [--fresh] [--detector yolo26n]
    python -m benchmarks standins [--checkpoint-dir DIR] [--random-dir DIR] [--build]

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

import numpy as np

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
    args = parser.parse_args(argv)
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


# -- standins ------------------------------------------------------------------------------------------------------
ASTRONAUT_BOX = [[30, 10, 370, 512]]  # x1 y1 x2 y2 around the astronaut


def figures(checkpoint_dir: Path) -> dict[str, float]:
    from unittest import mock

    from sapiens2_demo.export.image import write_normals_png
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.pipelines import pose as pose_pipeline
    from sapiens2_demo.pipelines.dense import estimate_matting, estimate_normals, segment
    from sapiens2_demo.pipelines.features import extract_features
    from sapiens2_demo.pose.decode import slow_path_maps
    from sapiens2_demo.standins.targets import build_scene

    scene = build_scene("astronaut")
    image = scene.image
    manager = ModelManager(checkpoint_dir=checkpoint_dir, device="cpu", dtype="float32")
    out = {}
    labels = segment(image, manager).labels
    with tempfile.TemporaryDirectory() as folder:  # as the normals task writes it: background removed (default)
        normals = estimate_normals(image, manager, mask=labels > 0)
        out["normals16_png_bytes"] = write_normals_png(normals, folder, bits=16).stat().st_size
    out["labels_equal_right"] = float((labels[:, 1:] == labels[:, :-1]).mean())
    out["part_classes_over_1pct"] = int((np.bincount(labels.ravel(), minlength=29) > 0.01 * labels.size).sum())
    captured = []
    real = pose_pipeline.decode_heatmaps

    def capture(heatmaps, *args, **kwargs):
        captured.append(np.array(heatmaps))
        return real(heatmaps, *args, **kwargs)

    with mock.patch.object(pose_pipeline, "decode_heatmaps", capture):
        pose_pipeline.estimate_pose(image, manager, boxes=ASTRONAUT_BOX)
    out["pose_fast_path"] = float(1 - slow_path_maps(np.concatenate(captured)).mean())
    alpha = estimate_matting(image, manager).alpha
    person = scene.parts > 0
    out["matte_iou"] = float(((alpha > 0.5) & person).sum() / ((alpha > 0.5) | person).sum())
    out.update(mesh_figures(image, labels > 0, manager))
    patches = extract_features([image], manager)[0].patches
    rough = (np.square(np.diff(patches, axis=0)).mean() + np.square(np.diff(patches, axis=1)).mean())
    out["feature_roughness"] = float(rough / patches.var(axis=(0, 1)).mean())
    out.update(body_keypoint_figures(manager))
    return out


def body_keypoint_figures(manager) -> dict[str, float]:
    from sapiens2_demo.pipelines import pose as pose_pipeline
    from sapiens2_demo.pose.meta import DEFAULT_KEYPOINT_THRESHOLD
    from sapiens2_demo.standins.targets import PHOTOS, build_scene

    out = {}
    for name in PHOTOS:
        scene = build_scene(name)
        ys, xs = np.nonzero(scene.parts)
        box = [[float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)]]
        pose = pose_pipeline.estimate_pose(scene.image, manager, boxes=box)
        placed, scores = pose.keypoints[0, :17], pose.keypoint_scores[0, :17]
        layout = scene.keypoints[:17]
        h, w = scene.parts.shape
        inside = (layout[:, 0] >= 0) & (layout[:, 0] < w) & (layout[:, 1] >= 0) & (layout[:, 1] < h)
        out[f"pose_body_px_{name}"] = float(np.median(np.linalg.norm(placed - layout, axis=1)[inside]))
        # a body keypoint outside the photo drawn anyway (its score at the drawing's threshold or above)
        out[f"pose_drawn_outside_{name}"] = int((scores[~inside] >= DEFAULT_KEYPOINT_THRESHOLD).sum())
    return out


def mesh_figures(image, mask, manager) -> dict[str, float]:
    """The depth task's surface mesh (background removed): height over width of its vertices (2nd to 98th
    percentile), its 2nd singular value over the 1st (0 for a line), and how well the pointmap's x and y follow the
    pixel's column and row on the person (1: seen from the front, it is the silhouette)."""
    from sapiens2_demo.export.mesh import result_mesh
    from sapiens2_demo.pipelines.dense import estimate_pointmap

    result = estimate_pointmap(image, manager, mask=mask)
    vertices = np.asarray(result_mesh(result, image, mask).vertices, dtype=np.float64)
    width, height = np.subtract(*np.percentile(vertices[:, :2], [98, 2], axis=0))
    spread = np.linalg.svd(vertices - vertices.mean(axis=0), compute_uv=False)
    rows, cols = np.nonzero(mask)
    points = result.points[rows, cols]
    return {"mesh_height_over_width": float(height / width), "mesh_not_a_line": float(spread[1] / spread[0]),
            "mesh_x_follows_column": float(np.corrcoef(points[:, 0], cols)[0, 1]),
            "mesh_y_follows_row": float(np.corrcoef(points[:, 1], rows)[0, 1])}


def structure(argv: list[str], run: harness.Run) -> None:
    """The stand-ins against random weights on the astronaut photo: the normals' 16-bit PNG bytes (target <= 0.4x),
    part labels equal to their right-hand neighbour (>= 0.9), pose maps on the fast decode path (>= 0.9), the matte
    against the person mask, the mesh's shape, the features' roughness, and on the three photos the body keypoints'
    median distance from the layout and those drawn outside the photo. --build: one build's wall and CPU seconds."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks standins", description=structure.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="stand-in checkpoints")
    parser.add_argument("--random-dir", type=Path, default=None,
                        help="random-weight tiny checkpoints (written there when missing)")
    parser.add_argument("--build", action="store_true", help="time one build from nothing, then stop")
    args = parser.parse_args(argv)
    if args.build:
        return time_build()
    from sapiens2_demo.standins.tiny import write_all
    from sapiens2_demo.standins.train import cached_standins

    start = time.perf_counter()
    standins = args.checkpoint_dir or cached_standins()
    print(f"stand-ins (not models): {standins} ({time.perf_counter() - start:.0f} s to train or find)")
    with tempfile.TemporaryDirectory() as scratch:
        random_dir = args.random_dir or Path(scratch)
        if not (random_dir / "sapiens2-pose-0.4b").exists():
            write_all(random_dir)
        ours, theirs = figures(standins), figures(random_dir)
    print(f"\n{'astronaut photo':<26}{'random':>12}{'stand-ins':>12}{'ratio':>9}")
    for key in ours:
        ratio = ours[key] / theirs[key] if theirs[key] else float("nan")
        print(f"{key:<26}{theirs[key]:>12.4g}{ours[key]:>12.4g}{ratio:>9.2f}")
    print(f"\ntargets: normals PNG <= 0.4x random ({ours['normals16_png_bytes'] / theirs['normals16_png_bytes']:.2f}x), "
          f"labels equal to their right neighbour >= 0.9 ({ours['labels_equal_right']:.3f}), "
          f"pose maps on the fast path >= 0.9 ({ours['pose_fast_path']:.3f})")
    run.weights, run.figures = "stand-ins against tiny random weights", {"standins": ours, "random": theirs}
    run.table("structure", ["astronaut photo", "random weights", "stand-ins", "target"],
              [[LABELS.get(key, key), f"{theirs[key]:.3g}", f"{ours[key]:.3g}", TARGETS.get(key, "")] for key in ours])


LABELS = {"normals16_png_bytes": "normals 16-bit PNG bytes (background removed)",
          "labels_equal_right": "part-label pixels equal to their right-hand neighbour",
          "pose_fast_path": "pose keypoint maps on the fast decode path (one user box)",
          "matte_iou": "alpha > 0.5 against the synthetic person mask (IoU)",
          "part_classes_over_1pct": "body-part classes over 1 % of the picture",
          "mesh_height_over_width": "mesh: height over width (the silhouette's: 1.1)",
          "mesh_not_a_line": "mesh: 2nd singular value of its vertices over the 1st (0: a line)",
          "mesh_x_follows_column": "mesh: pointmap x against the pixel's column (correlation)",
          "mesh_y_follows_row": "mesh: pointmap y against the pixel's row (correlation)",
          "feature_roughness": "features: neighbouring patches' difference over their variance (noise: 2)",
          **{f"pose_body_px_{photo}": f"body keypoints from the layout's, median px at 512 px ({photo})"
             for photo in ("astronaut", "grace_hopper", "camera")},
          **{f"pose_drawn_outside_{photo}": f"body keypoints outside the photo drawn anyway ({photo})"
             for photo in ("astronaut", "grace_hopper", "camera")}}
TARGETS = {"normals16_png_bytes": "<= 0.4x random", "labels_equal_right": ">= 0.9", "pose_fast_path": ">= 0.9"}


def time_build() -> None:
    import platform

    from sapiens2_demo.standins.train import write_standins

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else "?"
    print(f"CPU: {cpu}, {os.cpu_count()} cores; load average before {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        wall, cpu_start = time.perf_counter(), time.process_time()
        write_standins(Path(folder))
        wall, cpu_s = time.perf_counter() - wall, time.process_time() - cpu_start
    print(f"stand-ins built in {wall:.0f} s wall, {cpu_s:.0f} s CPU (all threads); load average after "
          f"(1, 5, 15 min): {' '.join(f'{x:.1f}' for x in os.getloadavg())}")

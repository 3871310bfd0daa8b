"""Video: our `/video` path against the machine's I/O floor and the model alone; the host's work a
frame; motion capture's speed, steady depth's flicker and the Rerun recording's share.

    python -m benchmarks video [--frames 96] [--tasks pose,seg,normal,pointmap,matting] [--fullsize]
        [--device auto|cpu|cuda] [--breakdown] [--set detect_every=1] [--no-model-only]
    python -m benchmarks mocap [--frames 48] [--no-speed] [--figure docs/steady_depth.png]
    python -m benchmarks rerun [--frames 48] [--size-seconds 60]
"""

from __future__ import annotations

import io
import json
import pickle
import statistics
import sys
import tempfile
import time
import zipfile
from fractions import Fraction
from pathlib import Path

import numpy as np

from benchmarks import harness

TASKS = ("pose", "seg", "normal", "pointmap", "matting")
MASKED = ("normal", "pointmap")  # their defaults remove the background: the body-part model runs too
# the app's encoder settings (media/video.py), written out: the floor is the same whatever the app's code
ENCODER_OPTIONS = {"crf": "20", "preset": "superfast", "x264-params": "mbtree=1:rc-lookahead=10"}
BYTES_CLIP_FRAMES = 24
OVERRIDES: dict = {}  # --set NAME=VALUE: the Video tab's options changed for ours (e.g. detect_every=1)


# -- the clip and the floor ------------------------------------------------------------------------------------------
def make_clip(path: Path, frames: int, size=(1280, 720), fps: int = 24, content: str = "shapes") -> Path:
    """A (w, h) H.264 clip with a 440 Hz sine track (tests/videos.make_video): moving shapes, or the astronaut photo
    panning (`photo`)."""
    from tests.videos import make_video

    if path.exists():
        return path
    pattern, (width, height) = "moving", size
    if content == "photo":
        import cv2

        side = int(max(width, height) * 1.15)
        photo = cv2.resize(cv2.imread(str(harness.ROOT / "assets" / "astronaut.jpg"))[..., ::-1], (side, side),
                           interpolation=cv2.INTER_CUBIC)

        def pattern(i: int) -> np.ndarray:
            t = i / max(frames - 1, 1)
            x, y = round((side - width) * t), round((side - height) * t)
            return np.ascontiguousarray(photo[y:y + height, x:x + width])
    return make_video(path, frames=frames, size=size, fps=fps, pattern=pattern)


def measure_floor(clip: Path, out: Path, drawn: list | None = None) -> tuple[int, float, float]:
    """(frames, wall s, CPU s): decode to RGB and encode again with the app's settings, audio copied, no model;
    `drawn` (RGB frames made beforehand) are encoded in place of the decoded ones (a drawn frame costs x264 more)."""
    import av

    started, cpu, count = time.perf_counter(), time.process_time(), 0
    with av.open(str(clip)) as source, av.open(str(out), "w", format="mp4", options={"movflags": "+faststart"}) as sink:
        stream = source.streams.video[0]
        stream.thread_type = "AUTO"  # as the app's reader
        rate = Fraction(stream.average_rate or 24).limit_denominator(1001)
        encoder = sink.add_stream("libx264", rate=rate, options=dict(ENCODER_OPTIONS))
        encoder.height, encoder.width = drawn[0].shape[:2] if drawn else (stream.height, stream.width)
        encoder.pix_fmt = "yuv420p"
        cc = encoder.codec_context
        cc.colorspace = cc.color_primaries = cc.color_trc = cc.color_range = 1  # BT.709 limited, as VideoSink
        audio_in = source.streams.audio[0] if source.streams.audio else None
        audio_out = sink.add_stream_from_template(audio_in) if audio_in is not None else None
        for packet in source.demux(*[s for s in (stream, audio_in) if s is not None]):
            if packet.stream is audio_in:
                if packet.dts is not None:
                    packet.stream = audio_out
                    sink.mux(packet)
                continue
            for frame in packet.decode():
                rgb = drawn[count % len(drawn)] if drawn else frame.to_ndarray(format="rgb24")
                picture = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(
                    format="yuv420p", dst_colorspace="ITU709", dst_color_range="MPEG")
                picture.pts, picture.time_base = count, 1 / rate
                sink.mux(encoder.encode(picture))
                count += 1
        sink.mux(encoder.encode())
    return count, time.perf_counter() - started, time.process_time() - cpu


def decoded(video: Path) -> list:
    import av

    with av.open(str(video)) as source:
        return [frame.to_ndarray(format="rgb24") for frame in source.decode(video=0)]


# -- ours ------------------------------------------------------------------------------------------------------------
def crossing_bytes(sizes: list):
    """Patches gpu.infer to add to `sizes` the pickled bytes of each call's arguments and answer, as ZeroGPU sends
    them (a local launch skips the float16 packing); returns what puts it back."""
    from sapiens2_demo import gpu

    infer, crosses = gpu.infer, gpu.CROSSES_PROCESSES

    def sized(*args, **kwargs):
        result = infer(*args, **kwargs)
        sizes.append(len(pickle.dumps((args, kwargs))) + len(pickle.dumps(result)))
        return result

    gpu.infer, gpu.CROSSES_PROCESSES = sized, True
    return lambda: setattr(gpu, "infer", infer) or setattr(gpu, "CROSSES_PROCESSES", crosses)


def tab_options() -> dict:
    """The options the Video tab passes by default (its handler's signature), with --set's changes."""
    import inspect

    from sapiens2_demo.ui.video_tab import run_video

    names = ("size", "stride", "detection_threshold", "max_people", "tracking", "smoothing", "min_cutoff", "beta",
             "remove_background", "raw_normals", "matting_background", "colour")
    parameters = inspect.signature(run_video).parameters
    return {**{name: parameters[name].default for name in names if name in parameters}, **OVERRIDES}


def measure_ours(clip: Path, task: str, manager, out_dir: Path) -> tuple[int, float]:
    """(frames, seconds) of the `/video` path, models already loaded."""
    from sapiens2_demo import gpu
    from sapiens2_demo.jobs.video import default_batch_size, process_video

    key, started = gpu.register(manager), time.perf_counter()
    out = process_video(clip, task, key, out_dir, **tab_options(), batch_size=default_batch_size(manager.device))
    return out.frames, time.perf_counter() - started


# -- the model alone -------------------------------------------------------------------------------------------------
def model_only(clip: Path, task: str, manager, batch_size: int, warm: bool = False) -> tuple[int, float]:
    """(frames, seconds) of the forwards our path makes, on frames pre-processed beforehand, batched as ours."""
    import torch

    from sapiens2_demo import tasks
    from sapiens2_demo.jobs.video import VideoLimits
    from sapiens2_demo.media.video import read_frames
    from sapiens2_demo.models.inference import preprocess
    from sapiens2_demo.pipelines.pose import model_flip_pairs
    from sapiens2_demo.pose.boxes import xyxy_to_xywh
    from sapiens2_demo.pose.detector import find_people

    frames = [f.rgb for f in read_frames(clip, max_side=VideoLimits().max_side)]
    loaded, *seg = harness.task_models(manager, task)  # the body parts too where the task removes the background
    batches = []
    for start in range(0, len(frames), batch_size):
        chunk, calls = frames[start:start + batch_size], []
        if task == "pose":
            pixels = preprocess(loaded, chunk, "pose", [xyxy_to_xywh(find_people(f, manager)[0]) for f in chunk])
            calls.append((loaded, pixels, {}))
            if tasks.get("pose").defaults(str(manager.device))["flip_test"]:
                calls.append((loaded, pixels.flip(-1), {"flip_pairs": model_flip_pairs(loaded.model).to(pixels.device)}))
        else:
            calls.append((loaded, preprocess(loaded, chunk, task), {}))
        calls += [(model, preprocess(model, chunk, "seg"), {}) for model in seg]
        batches.append((len(chunk), calls))
    count = 0
    harness.sync(manager.device)
    started = time.perf_counter()
    with torch.inference_mode():
        for frames_in, calls in batches[:1] if warm else batches:
            for model, pixels, kwargs in calls:
                model.model(pixel_values=pixels, **kwargs)
            count += frames_in
    harness.sync(manager.device)
    return count, time.perf_counter() - started


# -- where our time goes ---------------------------------------------------------------------------------------------
def stage_timers() -> harness.Timers:
    """Timers on the video path's functions, per thread (they overlap); leave them with `with` (or __exit__)."""
    from sapiens2_demo import gpu
    from sapiens2_demo.jobs import video, video_threads
    from sapiens2_demo.media import video as media
    from sapiens2_demo.pipelines import dense, pose

    timers = harness.Timers()
    for owner, name, label in ((gpu, "infer", "main: gpu.infer (pre + forward + post)"),
                               (dense, "preprocess", "main:   preprocess (dense)"),
                               (dense, "forward", "main:   forward (dense)"), (pose, "forward", "main:   forward (pose)"),
                               (pose, "crop_people", "main:   crops (pose)"),
                               (pose, "detect_batch", "main:   detector (pose)"),
                               (video.VideoJob, "_track", "main: tracking + smoothing (pose)"),
                               (media.VideoSink, "write", "writer thread: encode + mux"),
                               (video_threads.Writer, "put", "main: waiting for the writer (queue full)")):
        timers.wrap(owner, name, label)
    timers.wrap(media, "read_frames", "decode thread: decode + to RGB", generator=True)
    writer = video_threads.Writer
    original_init = writer.__init__

    def init(self, renderers, titles, sink, exports, *args, **kwargs):
        original_init(self, renderers, titles, sink, exports, *args, **kwargs)
        for task, renderer in self.renderers.items():
            timers.wrap(renderer, "annotate", f"writer thread: render ({task})")
        for task, export in self.exports.items():
            timers.wrap(export, "add", f"writer thread: per-frame exports ({task})")

    writer.__init__ = init
    timers.undo.append((writer, "__init__", original_init))
    return timers


def report(timers: harness.Timers, wall: float, frames: int) -> list[str]:
    per = max(frames, 1)
    lines = [f"  where the time goes ({frames} frames, {1000 * wall / per:.1f} ms a frame; threads overlap):"]
    lines += [f"    {label:50} {1000 * value / per:7.1f} ms a frame" for label, value in sorted(timers.seconds.items())
              if label != "GPU calls"]
    lines.append(f"    Sapiens2 forward busy {timers.total('main:   forward') / wall:.0%} of the wall time (a ratio "
                 "within this one run)")
    return lines


# -- video -----------------------------------------------------------------------------------------------------------
def bracketed(clip: Path, task: str, manager, work: Path, breakdown: bool) -> dict:
    """Ours between two runs of the floor (load drift evens out): frames, seconds and CPU seconds of ours, the
    floor's (their mean), and the timers: GPU calls counted (a local video's streamed chunks one each: ZeroGPU's
    calls), with `breakdown` each stage."""
    from sapiens2_demo import gpu

    work.mkdir(parents=True, exist_ok=True)
    floors = [measure_floor(clip, work / "floor.mp4")]
    with stage_timers() if breakdown else harness.Timers() as timers:
        timers.wrap(gpu, "infer", "GPU calls")
        timers.wrap(gpu, "stream", "GPU calls", generator=True)
        cpu = time.process_time()
        frames, seconds = measure_ours(clip, task, manager, work / "ours")
        cpu = time.process_time() - cpu
    floors.append(measure_floor(clip, work / "floor.mp4"))
    return {"frames": max(frames, 1), "seconds": seconds, "cpu": cpu, "floor_frames": max(floors[0][0], 1),
            "floor_s": (floors[0][1] + floors[1][1]) / 2, "floor_cpu": (floors[0][2] + floors[1][2]) / 2,
            "timers": timers}


def bench_task(task: str, clip: Path, warm: Path | None, manager, args, work: Path) -> tuple[dict, list]:
    """One task's frames a second: floor, ours, by CPU, model-only; GPU calls and bytes a frame."""
    harness.task_models(manager, task)
    figures, notes, sizes = {"load_start": harness.load()[0]}, [], []
    if warm is not None:  # first calls out of the timings; the bytes that would cross to ZeroGPU measured here
        undo = crossing_bytes(sizes)
        try:
            frames_warm, _ = measure_ours(warm, task, manager, work / f"warm_{task}")
        finally:
            undo()
        figures["bytes_in_out_x_rgb"] = round(sum(sizes) / frames_warm / (1280 * 720 * 3), 2)
    b = bracketed(clip, task, manager, work / f"ours_{task}", args.breakdown)
    figures.update(ours_fps=round(b["frames"] / b["seconds"], 2), floor_fps=round(b["floor_frames"] / b["floor_s"], 2),
                   ours_vs_floor=round(b["frames"] / b["seconds"] / (b["floor_frames"] / b["floor_s"]), 2),
                   by_cpu=round((b["floor_cpu"] / b["floor_frames"]) / max(b["cpu"] / b["frames"], 1e-9), 2),
                   calls=b["timers"].counts.get("GPU calls", 0))
    if args.breakdown:
        notes += [f"{task}:"] + report(b["timers"], b["seconds"], b["frames"])
    if not args.no_model_only:
        from sapiens2_demo.jobs.video import default_batch_size

        batch = default_batch_size(manager.device)
        model_only(clip, task, manager, batch, warm=True)
        done, taken = model_only(clip, task, manager, batch)
        figures["model_fps"] = round(done / taken, 2)
        figures["ours_vs_model"] = round(figures["ours_fps"] / figures["model_fps"], 2)
    figures["load_end"] = harness.load()[0]
    return figures, notes


def video(argv: list[str], run: harness.Run) -> None:
    """Per task, frames a second of: the floor (decode the same 1280x720 clip of moving shapes to RGB and encode it
    again with the app's x264 settings, audio copied, no model; run just before and just after ours, the mean of the
    two); ours (`jobs.video.process_video` with the Video tab's defaults, models loaded and warmed up first); by CPU
    (ours / floor in this process's CPU time a frame); model-only (the forwards alone on frames pre-processed
    beforehand, batched as ours). GPU calls are counted (a local video's streamed chunks count one each: ZeroGPU's
    calls), and on a warm-up clip the pickled bytes crossing the GPU boundary a frame, as a multiple of the frame's
    RGB bytes. --breakdown times each stage per thread. Tiny random weights unless --fullsize. The machine is
    shared: compare ratios measured in one run, never frames a second across runs."""
    parser = harness.parser(run, video.__doc__)
    parser.add_argument("--frames", type=int, default=None, help="clip length (default 96; 4 with --fullsize)")
    parser.add_argument("--tasks", default=None, help=f"from {','.join(TASKS)} (default all; seg with --fullsize)")
    parser.add_argument("--fullsize", action="store_true", help="full-size 0.4b random-weight checkpoints")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--no-model-only", action="store_true")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a Video tab option changed for ours, e.g. detect_every=1")
    parser.add_argument("--breakdown", action="store_true", help="time each stage of our path, per thread")
    args = parser.parse_args(argv)
    for item in args.set:
        name, _, value = item.partition("=")
        lowered = value.strip().lower()
        OVERRIDES[name.strip()] = lowered == "true" if lowered in ("true", "false") else (
            float(value) if "." in value else int(value))
    import torch

    from sapiens2_demo.jobs.video import default_batch_size
    from sapiens2_demo.models.manager import resolve_device

    tasks = harness.names(args.tasks or ("seg" if args.fullsize else ",".join(TASKS)))
    if set(tasks) - set(TASKS):
        parser.error(f"unknown task(s) {sorted(set(tasks) - set(TASKS))}; choose from {', '.join(TASKS)}")
    frames = args.frames or (4 if args.fullsize else 96)
    device, dtype = resolve_device(args.device)
    run.device, tiny = str(device), harness.tiny_checkpoints()
    folder = tiny
    if args.fullsize:
        from benchmarks.checkpoints import ensure_fullsize

        folder = ensure_fullsize(sorted(set(tasks) | ({"seg"} if set(tasks) & set(MASKED) else set())))
    run.weights = "full-size 0.4b random weights" if args.fullsize else "tiny random weights"
    with tempfile.TemporaryDirectory(prefix="bench_video_") as tmp:
        work = Path(tmp)
        manager = harness.manager(folder, device, detector=tiny / "yolov8n-random.pt")
        clip = make_clip(work / f"clip_{frames}.mp4", frames)
        warm = None if args.fullsize and device == "cpu" else make_clip(work / "warm.mp4", BYTES_CLIP_FRAMES)
        measure_floor(warm or clip, work / "floor_warm.mp4")  # x264's first use out of the timings
        print(f"{run.weights} on {device}/{str(dtype).replace('torch.', '')}; torch {torch.__version__}, "
              f"{torch.get_num_threads()} threads; clip {frames} frames of 1280x720 with audio; batch "
              f"{default_batch_size(device)}; ours: the Video tab's defaults {tab_options()}", flush=True)
        rows, notes = [], []
        for task in tasks:
            figures, task_notes = bench_task(task, clip, warm, manager, args, work)
            run.figures[task], notes = figures, notes + task_notes
            rows.append([task] + [figures.get(key, "-") for key in (
                "ours_fps", "floor_fps", "ours_vs_floor", "by_cpu", "model_fps", "ours_vs_model", "calls",
                "bytes_in_out_x_rgb")])
            print(f"  {task}: {rows[-1][1:]} (load {figures['load_start']} -> {figures['load_end']})", flush=True)
        run.table("fps", ["task", "ours fps", "floor fps", "ours / floor", "by CPU", "model fps", "ours / model",
                          "GPU calls", "bytes a frame (x RGB)"], rows, caption=f"{frames} frames of 1280x720, shapes.")
        print("\n".join(notes))


# -- the host's work a frame (python -m benchmarks host's video part) ------------------------------------------------
HOST_TASKS = {"pose": "pose", "segment": "seg", "normals": "normal", "pointmap": "pointmap", "matting": "matting",
              "all": "all"}  # "all": the Video tab's grid (only when asked for: every task's forwards)


def host_frames(kind: str, checkpoint_dir: Path, detector: Path, frames: int, task_names, work: Path,
                reps: int = 3) -> dict:
    """Per task, ms a frame of ours, of its forwards, the host = ours - forwards, against the floor (decode +
    encode of the input) and the drawn floor (the task's rendered frames encoded): each task `reps` times, each
    between its own floors; the row is the run of median host / floor."""
    manager = harness.manager(checkpoint_dir, detector=detector)
    clip = make_clip(work / f"clip_{frames}.mp4", frames, content="photo")
    warm = make_clip(work / "warm.mp4", 12, content="photo")
    measure_floor(warm, work / "floor_warm.mp4")
    rows = {}
    for task in task_names:
        name = HOST_TASKS[task]
        harness.task_models(manager, name)
        measure_ours(warm, name, manager, work / f"warm_{kind}_{name}")
        runs = sorted((host_run(clip, name, manager, work / f"video_{kind}_{name}_{i}") for i in range(max(1, reps))),
                      key=lambda r: r["host_vs_floor"])
        rows[task] = {**runs[len(runs) // 2], "host_vs_floor_runs": [r["host_vs_floor"] for r in runs]}
        print(f"  [{kind}] video {task}: {rows[task]}  (load {harness.load()})", file=sys.stderr, flush=True)
    return rows


def host_run(clip: Path, name: str, manager, work: Path) -> dict:
    b = bracketed(clip, name, manager, work, breakdown=True)
    timers, per, count = b["timers"], b["frames"], b["floor_frames"]
    rendered = next((work / "ours").rglob(f"*_{name}.mp4"), None)
    drawn = [measure_floor(clip, work / "drawn.mp4", decoded(rendered)) for _ in range(2)] if rendered else []
    floor = 1000 * b["floor_s"] / count
    host = 1000 * (b["seconds"] - timers.total("main:   forward", "main:   detector")) / per
    drawn_floor = 1000 * sum(f[1] for f in drawn) / 2 / count if drawn else None
    return {"ours_ms": round(1000 * b["seconds"] / per, 1), "host_ms": round(host, 1), "floor_ms": round(floor, 1),
            "host_vs_floor": round(host / floor, 2),
            "host_vs_drawn_floor": round(host / drawn_floor, 2) if drawn_floor else None,
            "ours_cpu_ms": round(1000 * b["cpu"] / per, 1),
            "stages_ms": {stage: round(1000 * timers.total(prefix) / per, 1) for stage, prefix in (
                ("decode", "decode"), ("encode", "writer thread: encode"), ("draw", "writer thread: render"),
                ("preprocess", "main:   preprocess"), ("forward", "main:   forward"))}}


# -- motion capture's speed and steady depth -------------------------------------------------------------------------
def alternating(clip: Path, key, batch: int, work: Path, runs: dict, timers: harness.Timers | None = None):
    """`runs` (name: (task, options)) on the clip in the order A B .. B A, after a warm-up run of each (models
    loaded, first calls paid): per name each run's (seconds, the `timers`' seconds within it); and the frames."""
    from sapiens2_demo.jobs.video import process_video

    for task, options in runs.values():
        process_video(clip, task, key, work / "warm", batch_size=batch, **options)
    found: dict = {name: [] for name in runs}
    for i, name in enumerate([*runs, *reversed(runs)]):
        (task, options), started = runs[name], time.perf_counter()
        if timers:
            timers.seconds.clear()
        out = process_video(clip, task, key, work / f"run{i}", batch_size=batch, **options)
        found[name].append((time.perf_counter() - started, timers.total("") if timers else 0.0))
    return found, out.frames


def mocap(argv: list[str], run: harness.Run) -> None:
    """Frames a second of pose, depth and pose with 3D motion on one clip (order A B C C B A, the mean of two runs);
    the mean frame-to-frame change of the exported depth (mm) on a still clip with sensor noise, without and with
    `temporal_smoothing` (tiny random weights: the filter's effect on noisy maps)."""
    from sapiens2_demo import gpu
    from sapiens2_demo.jobs.video import default_batch_size, process_video

    parser = harness.parser(run, mocap.__doc__)
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--figure", type=Path, help="also write the before/after picture of the flicker here")
    parser.add_argument("--no-speed", action="store_true", help="only the flicker figures")
    args = parser.parse_args(argv)
    run.weights = "tiny random weights"
    manager = harness.manager(harness.tiny_checkpoints(), dtype="float32")
    key, batch = gpu.register(manager), default_batch_size(manager.device)
    runs = {"pose": ("pose", {}), "pointmap": ("pointmap", {}), "pose + 3D motion": ("pose", {"motion_3d": True})}
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        if not args.no_speed:
            found, frames = alternating(make_clip(work / "clip.mp4", args.frames, content="photo"), key, batch, work,
                                        runs)
            for name, taken in found.items():
                run.figures[f"{name} fps"] = round(frames / statistics.mean(s for s, _ in taken), 2)
                print(f"  {name:18s} {run.figures[f'{name} fps']:6.2f} frames/s ({', '.join(f'{s:.1f}' for s, _ in taken)} s)")
        from PIL import Image

        base = np.asarray(Image.open(harness.ROOT / "assets" / "astronaut.jpg").convert("RGB").resize((320, 240)),
                          np.float32)
        noise = np.random.default_rng(0)
        still = harness.encode(work / "still.mp4", (np.clip(base + noise.normal(0, 2.0, base.shape), 0, 255).astype(
            np.uint8) for _ in range(24)), pix_fmt="yuv444p", preset="ultrafast", crf="0")
        maps = {}
        for steady in (False, True):
            out = process_video(still, "pointmap", key, work / f"steady{steady}", batch_size=batch,
                                frame_exports=True, temporal_smoothing=steady)
            with zipfile.ZipFile(next(p for p in out.files if p.name == "depth_mm.zip")) as zf:
                maps[steady] = np.stack([np.asarray(Image.open(io.BytesIO(zf.read(n))), np.float64)
                                         for n in sorted(zf.namelist())])
        change = {steady: float(np.abs(np.diff(m[3:], axis=0)).mean()) for steady, m in maps.items()}
        run.figures.update(depth_change_mm=round(change[False], 1), steady_depth_change_mm=round(change[True], 1))
        print(f"still clip (24 frames, noise of 2 grey levels): depth changes {change[False]:.1f} mm a frame, "
              f"{change[True]:.1f} mm with temporal_smoothing ({change[False] / max(change[True], 1e-9):.1f}x less)")
        if args.figure:
            flicker_figure(maps, args.figure)


def flicker_figure(maps: dict, path: Path) -> None:
    """A depth frame and its change from the frame before, without and with the filter."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from PIL import Image

    t = len(maps[False]) // 2
    fig, axes = plt.subplots(2, 2, figsize=(7, 5.6), constrained_layout=True)
    low, high = np.percentile(maps[False][t][maps[False][t] > 0], [2, 98])
    for row, steady in enumerate((False, True)):
        image = axes[row, 0].imshow(maps[steady][t], cmap="turbo", vmin=low, vmax=high)
        axes[row, 0].set_title(f"depth (mm), {'steady over time' if steady else 'as the model gives it'}", fontsize=9)
        change = np.abs(maps[steady][t] - maps[steady][t - 1])
        shown = axes[row, 1].imshow(change, cmap="magma", vmin=0, vmax=60)
        axes[row, 1].set_title(f"change from the frame before: mean {change.mean():.1f} mm", fontsize=9)
        for ax in axes[row]:
            ax.axis("off")
    fig.colorbar(image, ax=axes[:, 0], shrink=0.6)
    fig.colorbar(shown, ax=axes[:, 1], shrink=0.6)
    fig.suptitle("A still clip with sensor noise (tiny random-weight checkpoints)", fontsize=10)
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=100)
    Image.open(buffer).convert("RGB").quantize(128).save(path, optimize=True)  # a third of the bytes


# -- the Rerun recording (export/rerun_recording.py) -----------------------------------------------------------------
def rerun(argv: list[str], run: harness.Run) -> None:
    """Pose with 3D motion on a 720p clip, with and without the recording (order A B B A): the recording's own work
    (each frame's logging in the writer thread, then its close: the 3D skeleton, the angles and their files) against
    the job's time; then recording.rrd's size against the input video's plus 1 MB a person-minute, on a clip of
    --size-seconds at 320x180 (long enough that the fixed part, the contexts and the blueprint, is not what is read)."""
    from sapiens2_demo import gpu
    from sapiens2_demo.export import rerun_recording
    from sapiens2_demo.jobs.video import default_batch_size, process_video

    parser = harness.parser(run, rerun.__doc__)
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--size-seconds", type=int, default=60, help="the size clip's length (24 frames a second)")
    args = parser.parse_args(argv)
    run.weights = "stand-ins"
    manager = harness.manager(harness.standin_checkpoints(), dtype="float32")
    key, batch = gpu.register(manager), default_batch_size(manager.device)
    with tempfile.TemporaryDirectory() as folder, harness.Timers() as spent:
        for name in ("add", "close"):  # the recording's own work, timed where it runs
            spent.wrap(rerun_recording.VideoRecording, name, "recording")
        work = Path(folder)
        found, frames = alternating(make_clip(work / "clip.mp4", args.frames, content="photo"), key, batch, work,
                                    {"without": ("pose", {"motion_3d": True}),
                                     "with": ("pose", {"motion_3d": True, "rerun": True})}, spent)
        jobs = {recorded: [s for s, _ in found[name]] for recorded, name in ((False, "without"), (True, "with"))}
        job_s, plain_s = statistics.mean(jobs[True]), statistics.mean(jobs[False])
        own_s = statistics.mean(own for _, own in found["with"])
        long_clip = make_clip(work / "long.mp4", 24 * args.size_seconds, size=(320, 180), content="photo")
        out = process_video(long_clip, "pose", key, work / "long", batch_size=batch, motion_3d=True, rerun=True)
        rrd = work / "long" / "recording.rrd"
        lines = [json.loads(line) for line in open(work / "long" / "pose_frames.jsonl")]
        person_minutes = sum(len(line["people"]) for line in lines) / 24.0 / 60.0
        extra_mb = (rrd.stat().st_size - long_clip.stat().st_size) / 2**20
        run.figures.update(frames=frames, job_s=round(job_s, 2), job_without_s=round(plain_s, 2),
                           recording_s=round(own_s, 3), recording_share_pct=round(100 * own_s / job_s, 1),
                           size_frames=out.frames, input_mb=round(long_clip.stat().st_size / 2**20, 3),
                           rrd_mb=round(rrd.stat().st_size / 2**20, 3), person_minutes=round(person_minutes, 4),
                           extra_mb_per_person_minute=round(extra_mb / max(person_minutes, 1e-9), 2))
    figures = run.figures
    print(f"runs with the recording: {', '.join(f'{s:.2f}' for s in jobs[True])} s, without: "
          f"{', '.join(f'{s:.2f}' for s in jobs[False])} s; targets: a share <= 10 %, <= 1 MB a person-minute")
    run.table("rerun", ["frames", "job (s)", "without (s)", "recording (s)", "share", "size clip (frames)",
                        "rrd (MB)", "input (MB)", "person-minutes", "MB beyond the video a person-minute"],
              [[figures["frames"], figures["job_s"], figures["job_without_s"], figures["recording_s"],
                f"{figures['recording_share_pct']} %", figures["size_frames"], figures["rrd_mb"], figures["input_mb"],
                figures["person_minutes"], figures["extra_mb_per_person_minute"]]],
              caption="pose + 3D motion: the time on a 720p clip (the recording's own work: its logging and its "
                      "close), the size on a 320x180 clip;")

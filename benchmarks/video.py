"""Video: our `/video` path against the machine's I/O floor and the model alone (`video`), the host's work a frame
(`host`'s video part). mocap.py's benchmarks use its clips."""

from __future__ import annotations

import json
import pickle
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path

import numpy as np

from benchmarks import harness

TASKS = ("pose", "seg", "normal", "pointmap", "matting")
# the app's encoder settings (media/video.py), written out: the floor is the same whatever the app's code
ENCODER_OPTIONS = {"crf": "20", "preset": "superfast", "x264-params": "mbtree=1:rc-lookahead=10"}
BYTES_CLIP_FRAMES = 24
OVERRIDES: dict = {}  # --set NAME=VALUE: the Video tab's options changed for ours (e.g. detect_every=1)
FPS_COLUMNS = {"ours_fps": "ours fps", "floor_fps": "floor fps", "ours_vs_floor": "ours / floor", "by_cpu": "by CPU",
               "model_fps": "model fps", "ours_vs_model": "ours / model", "calls": "GPU calls",
               "bytes_in_out_x_rgb": "bytes a frame (x RGB)"}  # the fps table's: figure key, column


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


# -- ours ------------------------------------------------------------------------------------------------------------
def crossing_bytes(sizes: list):
    """A patch (`with`) of gpu.infer adding to `sizes` the pickled bytes of each call's arguments and answer, as
    ZeroGPU sends them (CROSSES_PROCESSES: a local launch skips the float16 packing)."""
    from unittest import mock

    from sapiens2_demo import gpu

    infer = gpu.infer

    def sized(*args, **kwargs):
        result = infer(*args, **kwargs)
        sizes.append(len(pickle.dumps((args, kwargs))) + len(pickle.dumps(result)))
        return result

    return mock.patch.multiple(gpu, infer=sized, CROSSES_PROCESSES=True)


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
def model_only(clip: Path, task: str, manager, warm: bool = False) -> tuple[int, float]:
    """(frames, seconds) of the forwards our path makes, on frames pre-processed beforehand, batched as ours."""
    import torch

    from sapiens2_demo import tasks
    from sapiens2_demo.jobs.video import VideoLimits, default_batch_size
    from sapiens2_demo.media.video import read_frames
    from sapiens2_demo.models.inference import preprocess
    from sapiens2_demo.pipelines.pose import model_flip_pairs
    from sapiens2_demo.pose.boxes import xyxy_to_xywh
    from sapiens2_demo.pose.detector import find_people

    frames = [f.rgb for f in read_frames(clip, max_side=VideoLimits().max_side)]
    loaded, *seg = harness.task_models(manager, task)  # the body parts too where the task removes the background
    batches, batch_size = [], default_batch_size(manager.device)
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

    timers, writer = harness.Timers(), video_threads.Writer
    for owner, name, label in (
            (gpu, "infer", "main: gpu.infer (pre + forward + post)"), (dense, "preprocess", "main:   preprocess (dense)"),
            (dense, "forward", "main:   forward (dense)"), (pose, "forward", "main:   forward (pose)"),
            (pose, "crop_people", "main:   crops (pose)"), (pose, "detect_batch", "main:   detector (pose)"),
            (video.VideoJob, "_track", "main: tracking + smoothing (pose)"),
            (media.VideoSink, "write", "writer thread: encode + mux"),
            (writer, "put", "main: waiting for the writer (queue full)")):
        timers.wrap(owner, name, label)
    timers.wrap(media, "read_frames", "decode thread: decode + to RGB", generator=True)
    original_init = writer.__init__

    def init(self, *args, **kwargs):  # the writer's renderers and exports, timed once it holds them
        original_init(self, *args, **kwargs)
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
    """Ours between two runs of the floor (load drift evens out): frames, seconds and CPU seconds of ours and of the
    floor (their mean); the timers: GPU calls (a streamed chunk one each, as ZeroGPU's), with `breakdown` each stage."""
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
        with crossing_bytes(sizes):
            frames_warm, _ = measure_ours(warm, task, manager, work / f"warm_{task}")
        figures["bytes_in_out_x_rgb"] = round(sum(sizes) / frames_warm / (1280 * 720 * 3), 2)
    b = bracketed(clip, task, manager, work / f"ours_{task}", args.breakdown)
    figures.update(ours_fps=round(b["frames"] / b["seconds"], 2), floor_fps=round(b["floor_frames"] / b["floor_s"], 2),
                   ours_vs_floor=round(b["frames"] / b["seconds"] / (b["floor_frames"] / b["floor_s"]), 2),
                   by_cpu=round((b["floor_cpu"] / b["floor_frames"]) / max(b["cpu"] / b["frames"], 1e-9), 2),
                   calls=b["timers"].counts.get("GPU calls", 0))
    if args.breakdown:
        notes += [f"{task}:"] + report(b["timers"], b["seconds"], b["frames"])
    if not args.no_model_only:
        model_only(clip, task, manager, warm=True)
        done, taken = model_only(clip, task, manager)
        figures["model_fps"] = round(done / taken, 2)
        figures["ours_vs_model"] = round(figures["ours_fps"] / figures["model_fps"], 2)
    figures["load_end"] = harness.load()[0]
    return figures, notes


def video(argv: list[str], run: harness.Run) -> None:
    """Per task, frames a second of ours (the Video tab's defaults, models warm), of the I/O floor (decode + encode of
    the 720p clip, the app's x264 settings) and of the model alone; GPU calls and the bytes crossing a frame."""
    from benchmarks.checkpoints import ensure_fullsize

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
    for name, _, value in (item.partition("=") for item in args.set):  # a number or true/false, as JSON reads it
        OVERRIDES[name.strip()] = json.loads(value.strip().lower())
    import torch

    from sapiens2_demo.jobs.video import default_batch_size
    from sapiens2_demo.models.manager import resolve_device

    tasks = harness.names(args.tasks or ("seg" if args.fullsize else ",".join(TASKS)))
    if set(tasks) - set(TASKS):
        parser.error(f"unknown task(s) {sorted(set(tasks) - set(TASKS))}; choose from {', '.join(TASKS)}")
    frames = args.frames or (4 if args.fullsize else 96)
    device, dtype = resolve_device(args.device)
    run.device, tiny = str(device), harness.tiny_checkpoints()
    folder = ensure_fullsize(tasks) if args.fullsize else tiny
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
            rows.append([task] + [figures.get(key, "-") for key in FPS_COLUMNS])
            print(f"  {task}: {rows[-1][1:]} (load {figures['load_start']} -> {figures['load_end']})", flush=True)
        run.table("fps", ["task", *FPS_COLUMNS.values()], rows, caption=f"{frames} frames of 1280x720, shapes.")
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
    from tests.videos import decode_rgb

    b = bracketed(clip, name, manager, work, breakdown=True)
    timers, per, count = b["timers"], b["frames"], b["floor_frames"]
    rendered = next((work / "ours").rglob(f"*_{name}.mp4"), None)
    drawn = [measure_floor(clip, work / "drawn.mp4", decode_rgb(rendered)) for _ in range(2)] if rendered else []
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

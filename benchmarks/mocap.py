"""Motion capture on video: pose, depth and 3D motion frames a second and steady depth's flicker (`mocap`), the Rerun
recording's share of a job and its size (`rerun`), and the camera's own turning found from the background on
rendered frames (`camera`)."""

from __future__ import annotations

import argparse
import io
import json
import statistics
import tempfile
import time
import zipfile
from pathlib import Path

import cv2
import numpy as np

from benchmarks import harness
from benchmarks.video import make_clip
from sapiens2_demo.pose.camera_rotation import RotationTracker, rotation_degrees
from tests import camera_frames as frames


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
    """Frames a second of pose, depth and pose with 3D motion on one clip (A B C C B A); the exported depth's change a
    frame on a still clip with sensor noise, without and with `temporal_smoothing` (docs/video.md)."""
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
    """Pose with 3D motion on a 720p clip, with and without the recording (A B B A): the recording's own work against
    the job's time; then recording.rrd's size a person-minute on a 320x180 clip (docs/rerun.md)."""
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


def motions(count: int, fps: float, seed: int) -> dict[str, np.ndarray]:
    return {"pan 45 degrees": frames.pan(count, 45.0), "tilt 20 degrees down and back": frames.tilt(count, 20.0),
            "shake 2 degrees, 2 Hz": frames.shake(count, fps, 2.0, 2.0, seed),
            "shake 3 degrees, 3 Hz": frames.shake(count, fps, 3.0, 3.0, seed + 1),
            "pan 60 degrees with a 1 degree shake": np.einsum("tij,tjk->tik", frames.pan(count, 60.0),
                                                              frames.shake(count, fps, 1.0, 1.5, seed + 2)),
            "still": frames.still(count)}


def ms_per_frame(count: int, seed: int) -> tuple[float, float, float]:
    """Median ms a 720p frame (add, and the end's solve shared out) of three runs: wall with cv2's threads as they
    are, wall on one thread, and CPU (this process) on one thread: the machine is shared."""
    clip = list(frames.render_turning(frames.shake(count, 24.0, 2.0, 2.0, seed), 1280, 720, seed=seed))
    found, before = [], cv2.getNumThreads()
    for threads in (before, 1):
        cv2.setNumThreads(threads)
        runs = []
        for _ in range(3):
            start, cpu, tracker = time.perf_counter(), time.process_time(), RotationTracker()
            for frame, background in clip:
                tracker.add(frame, background)
            tracker.solve(frames.focal(1280))
            runs.append((1000 * (time.perf_counter() - start) / count, 1000 * (time.process_time() - cpu) / count))
        found.append([statistics.median(r[k] for r in runs) for k in (0, 1)])
    cv2.setNumThreads(before)
    return found[0][0], found[1][0], found[1][1]


def camera(argv: list[str], run: harness.Run) -> None:
    """The camera's rotation from the background (sapiens2_demo/pose/camera_rotation.py) on rendered frames
    (tests/camera_frames.py: a textured panorama seen through each frame's rotation, a person stand-in moving across
    it): each motion's worst error of a frame's turn and its drift over the clip, a still camera's estimated total,
    a camera carried along (refused or not), and the time a frame at 720p. Targets (docs/motion.md): <= 1 degree a
    frame, <= 2 degrees of drift over a minute, a still camera <= 0.2 degrees, <= 5 ms a frame at 720p."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks camera", description=camera.__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--fps", type=float, default=24.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--size", default="640x360", help="the rendered clips' WIDTHxHEIGHT")
    parser.add_argument("--timing-frames", type=int, default=96)
    args = parser.parse_args(argv)
    width, height = (int(v) for v in args.size.split("x"))
    count = max(2, round(args.seconds * args.fps))
    run.weights = "no model: rendered frames, the person a masked moving ellipse"
    rows, figures = [], {}
    for name, truth in motions(count, args.fps, args.seed).items():
        found = frames.estimate(frames.render_turning(truth, width, height, seed=args.seed))
        if found.to_first is None:
            figure = {"note": found.note}
        elif name == "still":
            figure = {"still_total_deg": float(rotation_degrees(found.to_first).max()), "note": found.note}
        else:
            figure = {**{f"{k}_deg": v for k, v in frames.errors(found.to_first, truth).items()}, "note": found.note}
        figures[name] = figure
        rows.append([name, *(f"{figure[key]:.3f}" if key in figure else "" for key in
                             ("per_frame_deg", "drift_deg", "still_total_deg")), figure["note"]])
        print(" | ".join(rows[-1]), flush=True)
    carried = frames.estimate(frames.render_walking(min(count, 120), args.fps, width=width, height=height))
    figures["carried along"] = {"refused": carried.to_first is None, "note": carried.note}
    rows.append([f"camera carried along at 1.1 m/s for {min(count, 120) / args.fps:g} s", "", "", "", carried.note])
    print(" | ".join(rows[-1]), flush=True)
    as_is, one, cpu = ms_per_frame(args.timing_frames, args.seed)
    figures.update(ms_per_frame_720p=as_is, ms_per_frame_720p_one_thread=one, cpu_ms_per_frame_720p=cpu,
                   load=harness.load())
    print(f"720p: {as_is:.2f} ms a frame ({cv2.getNumThreads()} cv2 threads), {one:.2f} on one ({cpu:.2f} CPU ms); "
          f"load {figures['load']}", flush=True)
    run.figures = figures
    run.table("camera", ["motion", "worst degrees a frame", f"drift over {args.seconds:g} s, degrees",
                         "still camera's total, degrees", "found"], rows,
              caption=f"{count} frames at {args.fps:g} frames/s rendered at {width}x{height}, seed {args.seed}; a "
                      f"720p frame {as_is:.2f} ms ({one:.2f} on one thread, {cpu:.2f} CPU ms; {args.timing_frames} "
                      f"frames);")

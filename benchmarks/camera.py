"""The camera's rotation from the background (sapiens2_demo/pose/camera_rotation.py) on rendered frames
(tests/camera_frames.py: a textured panorama seen through each frame's rotation, a person stand-in moving across
it): each motion's worst error of a frame's turn and its drift from the true rotation over the clip, a still
camera's estimated total, a camera carried along (refused or not), and the time a frame at 720p.

Targets (docs/motion.md): <= 1 degree a frame, <= 2 degrees of drift over a minute, a still camera <= 0.2 degrees
over the clip, <= 5 ms a frame at 720p on this machine's CPU.
"""

from __future__ import annotations

import argparse
import statistics
import time

import cv2
import numpy as np

from benchmarks import harness
from sapiens2_demo.pose.camera_rotation import RotationTracker, rotation_degrees
from tests import camera_frames as frames


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
    parser = argparse.ArgumentParser(prog="python -m benchmarks camera", description=__doc__.split("\n\n")[0])
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

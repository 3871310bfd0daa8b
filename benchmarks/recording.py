"""The Rerun recording's cost on a video job (export/rerun_recording.py)."""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.video import make_clip, make_manager


def rerun(argv: list[str], run: harness.Run) -> None:
    """Pose with 3D motion on a 720p clip, with and without the recording (order A B B A): the recording's own work
    (each frame's logging in the writer thread, then its close: the 3D skeleton, the angles and their files) against
    the job's time; then recording.rrd's size against the input video's plus 1 MB a person-minute, on a clip of
    --size-seconds at 320x180 (long enough that the fixed part, the contexts and the blueprint, is not what is read)."""
    from sapiens2_demo import gpu
    from sapiens2_demo.export import rerun_recording
    from sapiens2_demo.jobs.video import default_batch_size, process_video

    parser = argparse.ArgumentParser(prog="python -m benchmarks rerun", description=rerun.__doc__)
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--checkpoints", default="standins", help="standins, tiny, or a folder")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--size-seconds", type=int, default=60, help="the size clip's length (24 frames a second)")
    args = parser.parse_args(argv)
    folder_of = harness.checkpoints(args.checkpoints)
    run.weights = {"standins": "stand-ins", "tiny": "tiny random weights"}.get(args.checkpoints, args.checkpoints)
    manager = make_manager(folder_of, folder_of / "yolov8n-random.pt", args.device, "float32")
    key, batch = gpu.register(manager), default_batch_size(manager.device)
    spent = {"add": 0.0, "close": 0.0}
    for name in spent:  # the recording's own work, timed where it runs
        real = getattr(rerun_recording.VideoRecording, name)

        def timed(self, *a, _real=real, _name=name, **k):
            started = time.perf_counter()
            try:
                return _real(self, *a, **k)
            finally:
                spent[_name] += time.perf_counter() - started

        setattr(rerun_recording.VideoRecording, name, timed)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        clip = make_clip(work / "clip.mp4", args.frames, content="photo")
        process_video(clip, "pose", key, work / "warm", batch_size=batch, motion_3d=True, rerun=True)  # loads
        jobs, own = {False: [], True: []}, []
        for recorded in (False, True, True, False):
            spent.update(add=0.0, close=0.0)
            out_dir = work / f"run{len(own)}{recorded}"
            started = time.perf_counter()
            out = process_video(clip, "pose", key, out_dir, batch_size=batch, motion_3d=True, rerun=recorded)
            jobs[recorded].append(time.perf_counter() - started)
            if recorded:
                own.append(spent["add"] + spent["close"])
        job_s = sum(jobs[True]) / len(jobs[True])
        plain_s = sum(jobs[False]) / len(jobs[False])
        own_s = sum(own) / len(own)
        frames = out.frames
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
    print(f"pose + 3D motion, {figures['frames']} frames of 1280x720 ({run.weights}, {args.device}):")
    print(f"  job {figures['job_s']:.2f} s with the recording, {figures['job_without_s']:.2f} s without "
          f"({', '.join(f'{s:.2f}' for s in jobs[True])} / {', '.join(f'{s:.2f}' for s in jobs[False])} s)")
    print(f"  the recording's own work {figures['recording_s']:.3f} s = {figures['recording_share_pct']:.1f} % of the job"
          " (target <= 10 %)")
    print(f"  on {figures['size_frames']} frames of 320x180: recording.rrd {figures['rrd_mb']:.3f} MB for a "
          f"{figures['input_mb']:.3f} MB input and "
          f"{figures['person_minutes']:.4f} person-minutes: {figures['extra_mb_per_person_minute']:.2f} MB beyond the "
          "video a person-minute (target <= 1)")
    run.table("rerun", ["frames", "job (s)", "without (s)", "recording (s)", "share", "size clip (frames)",
                        "rrd (MB)", "input (MB)", "person-minutes", "MB beyond the video a person-minute"],
              [[figures["frames"], figures["job_s"], figures["job_without_s"], figures["recording_s"],
                f"{figures['recording_share_pct']} %", figures["size_frames"], figures["rrd_mb"], figures["input_mb"],
                figures["person_minutes"], figures["extra_mb_per_person_minute"]]],
              caption="pose + 3D motion: the time on a 720p clip (the recording's own work: its logging and its "
                      "close), the size on a 320x180 clip;")

"""Where a video chunk's device time goes, by kernel and by our code (torch.profiler; a script, not a test).

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 .venv/bin/python benchmarks/profile_video.py [--tasks normal,pose]
        [--device cuda] [--fullsize] [--frames 48] [--rows 20]

Per task: `process_video` (the Video tab's defaults) once to warm up, then once under torch.profiler, and prints
- the wall time per frame and, on CUDA, the device busy time per frame (the kernels' own time, summed: what the
  device did; wall minus busy is where it waited for the host);
- the top kernels / operators by their own device time (on a CPU: the CPU time of the operators the profiler
  sees, which are those of the thread queuing forwards, not the post-processing worker's).
Used on a lent GPU (see ../shared/reference/GPU.md and `benchmarks/gpu_session.sh`): on 2026-11-26 it showed the
pageable copies back of drawn frames (16.9 ms a batch) that `models/inference.copy_back` now makes pinned.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_video as bv  # noqa: E402 - the clip, the checkpoints and our path, as bench_video makes them


def device_busy_ms(events) -> float:
    """The kernels' own time (device events only: an operator's row repeats its kernels' time)."""
    from torch.autograd import DeviceType

    return sum(e.self_device_time_total for e in events if e.device_type == DeviceType.CUDA) / 1e3


def profile_task(task: str, clip: Path, manager, work: Path, args) -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    bv.load_models(manager, task)
    bv.measure_ours(clip, task, manager, work / f"warm_{task}")  # compiles and first calls out of the profile
    cuda = str(manager.device).startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    if cuda:
        torch.cuda.synchronize()
    with profile(activities=activities) as prof:
        frames, seconds = bv.measure_ours(clip, task, manager, work / f"ours_{task}")
    wall = 1000 * seconds / max(frames, 1)
    line = f"\n== {task}: {frames} frames, {wall:.1f} ms a frame (profiled: the profiler adds host time)"
    if cuda:
        busy = device_busy_ms(prof.events()) / max(frames, 1)
        line += f"; the device busy {busy:.1f} ms a frame ({busy / wall:.0%} of the wall time)"
    print(line)
    sort = "self_device_time_total" if cuda else "self_cpu_time_total"
    print(prof.key_averages().table(sort_by=sort, row_limit=args.rows, max_name_column_width=70))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="normal", help=f"comma-separated from {','.join(bv.TASKS)}")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--fullsize", action="store_true", help="full-size 0.4b random-weight checkpoints")
    parser.add_argument("--checkpoint-dir", type=Path, default=bv.DEFAULT_TINY)
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--rows", type=int, default=20)
    args = parser.parse_args()
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    resolve_device = bv.load("resolve_device", "sapiens2_demo.models.manager")
    device, _ = resolve_device(args.device)
    with tempfile.TemporaryDirectory(prefix="profile_video_") as tmp:
        work = Path(tmp)
        ckpts = bv.tiny_checkpoints(args.checkpoint_dir)
        if args.fullsize:
            ckpts = bv.fullsize_checkpoints(tasks, ckpts.detector)
        manager = bv.make_manager(ckpts, device)
        clip = bv.make_clip(work / "clip.mp4", args.frames)
        print(f"{ckpts.label} checkpoints on {device}; {args.frames} frames of 1280x720; load {bv.load_average()}")
        for task in tasks:
            profile_task(task, clip, manager, work, args)


if __name__ == "__main__":
    main()

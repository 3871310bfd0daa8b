"""Where a video's time goes, as a timeline: each stage's calls (decode, pre-processing, forwards, post-processing,
drawing, encoding) with their start and end, per thread, for one run of our `/video` path (a script, not a test).

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 .venv/bin/python benchmarks/video_timeline.py CHECKPOINT_DIR \
        [--task normal] [--frames 48] [--runs 2] [--events] [--root DIR]

CHECKPOINT_DIR holds tiny or stand-in checkpoints (bench_video.py's), with `yolo26n-random.pt` (bench_host.py writes
it) or `yolov8n-random.pt` for pose. Per stage: its first start and last end (ms from the job's start), its total and its count; with --events,
every call in order. What it found (docs/host.md, ninth session): a chunk waiting behind the next one's forwards,
and the pre-processing between two forwards on their thread. Say the CPU and the load with any figure.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_video as bv  # noqa: E402 - the clip, the manager, our video path and its stage clock

POST = ("postprocess_normals", "upsample_labels", "postprocess_pointmap", "postprocess_matting")
SUMMARY = ("decode", "main:   preprocess", "main:   crops", "main:   detector", "main:   forward",
           *(f"post: {name}" for name in POST), "main: waiting", "writer thread: render", "writer thread: encode")


class Timeline(bv.StageClock):
    """The stage clock, keeping each call: (label, thread, start, end)."""

    def __init__(self):
        super().__init__()
        self.events: list[tuple[str, str, float, float]] = []

    def _add(self, label: str, started: float) -> None:
        now = time.perf_counter()
        with self._lock:
            self.seconds[label] = self.seconds.get(label, 0.0) + now - started
            self.events.append((label, threading.current_thread().name, started, now))

    def install(self) -> Timeline:
        super().install()
        from sapiens2_demo.pipelines import dense

        for name in POST:  # the post-processing, in the worker beside the next batch's forwards
            self.wrap(dense, name, f"post: {name}")
        return self


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("checkpoints", type=Path)
    parser.add_argument("--task", default="normal", choices=bv.TASKS)
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--events", action="store_true", help="every call, in order")
    parser.add_argument("--root", type=Path, default=None, help="import sapiens2_demo from this checkout")
    args = parser.parse_args()
    if args.root:
        bv.use_root(args.root)
    bv.quiet_transformers()
    detector = next((args.checkpoints / n for n in ("yolo26n-random.pt", "yolov8n-random.pt")
                     if (args.checkpoints / n).exists()), args.checkpoints / "yolov8n-random.pt")
    work = Path(tempfile.mkdtemp(prefix="video_timeline_"))
    manager = bv.make_manager(bv.Checkpoints(args.checkpoints, detector, "checkpoints"), "cpu")
    clip = bv.make_clip(work / "clip.mp4", args.frames, content="photo")
    bv.load_models(manager, args.task)
    bv.measure_ours(bv.make_clip(work / "warm.mp4", 12, content="photo"), args.task, manager, work / "warm")
    for run in range(args.runs):
        timeline = Timeline().install()
        started = time.perf_counter()
        try:
            done, seconds = bv.measure_ours(clip, args.task, manager, work / f"run{run}")
        finally:
            timeline.remove()
        print(f"{args.task}: {done} frames in {1000 * seconds:.0f} ms, {1000 * seconds / max(done, 1):.1f} ms a frame "
              f"(load {bv.load_average()})")
        for prefix in SUMMARY:
            calls = [e for e in timeline.events if e[0].startswith(prefix)]
            if calls:
                first, last = min(e[2] for e in calls), max(e[3] for e in calls)
                total = sum(e[3] - e[2] for e in calls)
                print(f"  {prefix.strip():30} first start {1000 * (first - started):7.1f}  last end "
                      f"{1000 * (last - started):7.1f}  total {1000 * total:7.1f} ms  calls {len(calls)}")
        if args.events:
            for label, thread, start, end in sorted(timeline.events, key=lambda e: e[2]):
                print(f"    {1000 * (start - started):8.1f} {1000 * (end - started):8.1f}  {thread:16} {label}")


if __name__ == "__main__":
    main()

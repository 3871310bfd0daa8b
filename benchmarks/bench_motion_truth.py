"""Motion capture measured against ground truth: the harness's six synthetic clips (tests/motion_clips.py) through
the video job's after-model path, before and after the motion guards (a script, not a test; the tests run the
same clips with ceilings: tests/unit/test_motion_truth.py).

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 .venv/bin/python benchmarks/bench_motion_truth.py --json motion_truth.json \\
        [--clips walk turn arms sit cross leave_return] [--seed 0]

Writes {clip: {"before": M, "after": M}} with M = {mpjpe_mm, mpjpe_clean_mm, body_jumps_90, finger_jumps_90,
finger_steps, euler_flips, swap_error_mm, baseline_error_mm, height_error, id_switches, frames_lost}
(tests/motion_truth.py defines each) and prints a table, with the noise-only MPJPE and the clean input's finger
jumps beside them. "before" is the path without the guards (PersonTracker alone, no occlusion check after the
lift, MotionVideoExport(guards=False)).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KEYS = ("mpjpe_mm", "mpjpe_clean_mm", "body_jumps_90", "finger_jumps_90", "finger_steps", "euler_flips",
        "swap_error_mm", "baseline_error_mm", "height_error", "id_switches", "frames_lost")
COUNTS = {"body_jumps_90", "finger_jumps_90", "finger_steps", "euler_flips", "id_switches", "frames_lost"}
COLUMNS = ("mpjpe_mm", "mpjpe_noise_mm", "mpjpe_clean_mm", "finger_jumps_clean") + KEYS[2:]


def main(argv=None) -> None:
    from tests.motion_clips import CLIPS
    from tests.motion_truth import measure

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--clips", nargs="+", default=list(CLIPS), choices=CLIPS)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    results, table = {}, []
    for clip in args.clips:
        results[clip] = {}
        for label, guards in (("before", False), ("after", True)):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)
                figures = measure(clip, guards=guards, seed=args.seed)
            results[clip][label] = {k: _plain(k, figures[k]) for k in KEYS}
            table.append([clip, label] + [_text(figures[k]) for k in COLUMNS])
            print(" ".join(table[-1][:2]), "done", file=sys.stderr, flush=True)
    print("| clip | path | " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * (len(COLUMNS) + 2))
    for row in table:
        print("| " + " | ".join(row) + " |")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}")


def _plain(key: str, value):
    return int(value) if key in COUNTS else round(float(value), 4)


def _text(value) -> str:
    value = float(value)
    return f"{value:.0f}" if value.is_integer() else (f"{value:.3f}" if abs(value) < 1 else f"{value:.1f}")


if __name__ == "__main__":
    main()

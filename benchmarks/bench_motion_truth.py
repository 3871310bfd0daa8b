"""Motion capture measured against ground truth: the harness's clips (tests/motion_clips.py: six tuned-on clips
and four fast moves) through the video job's after-model path, read back from the BVH (a script, not a test; the
tests run a fast subset against the targets: tests/unit/test_motion_truth.py).

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 .venv/bin/python benchmarks/bench_motion_truth.py --json motion_truth.json \\
        [--clips walk run ...] [--fps 24 30 60] [--seed 0] [--before motion_before.json] [--oracle] [--seconds S]
    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 .venv/bin/python benchmarks/bench_motion_truth.py --seeds 0 1 2 3 4 \\
        --json motion_truth_seeds.json

Writes {clip: {"after": M, "after_30fps": M, "after_60fps": M, "camera H m, P down, R rolled": M (--cameras),
"before": M (from --before, a file this script wrote for an earlier version)}} with M = {mpjpe_mm (noise + faults), mpjpe_noise_mm, mpjpe_clean_mm, heavy_mm
(heavy-tailed 2D and drifting depth), body_jumps_90, finger_jumps_90, finger_steps, euler_flips, swap_error_mm,
baseline_error_mm, height_error, id_switches, frames_lost, bone_error_pct, foot_slide_mm, worst_joint_clean_mm (the
clean run's worst body joint, its mean over the frames), angle_error_clean_deg (the clean run's worst joint angle
against the truth's), fit_seconds, fit_ratio
(the whole close, fit and files, over the clip's length; the noise + faults run)}
and, where the files are in the world frame (a floor found: tests/motion_truth.world_figures), world_found (of the
four runs), gravity_error_deg_<run>, floor_error_mm_<run>, w_mpjpe_mm_<run>, below_floor_pct, world_foot_slide_mm
(tests/motion_truth.py defines each); prints a table with the targets each row misses, and the world's table.
With --oracle each M also holds "oracle": the same keys with every fit started from the truth (the same
observations, the same terms), printed as a "from truth" row under each: every figure read beside what the
observations allow. --seconds S measures each clip's first S seconds only (a quicker table).
`python -m benchmarks motion ARGS` runs it through the shared harness (benchmarks/results/motion-<machine>.json).
With --seeds, once per seed at the first --fps: a row per clip and seed, and the JSON is {clip: {seed: M}}; with
--seeds and --cameras, the world's figures per clip, seed and camera (table world-seeds).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import warnings
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

KEYS = ("mpjpe_mm", "mpjpe_noise_mm", "mpjpe_clean_mm", "heavy_mm", "body_jumps_90", "finger_jumps_90",
        "finger_steps", "euler_flips", "swap_error_mm", "baseline_error_mm", "height_error", "id_switches",
        "frames_lost", "bone_error_pct", "foot_slide_mm", "fit_seconds", "clip_seconds", "fit_ratio", "finger_jumps_clean",
        "body_jumps_clean", "euler_flips_clean", "worst_joint_clean_mm", "angle_error_clean_deg", "world_found", "below_floor_pct", "world_foot_slide_mm", "camera_step_deg", "camera_drift_deg") + tuple(
    f"{key}_{cond}" for key in ("gravity_error_deg", "floor_error_mm", "w_mpjpe_mm")
    for cond in ("clean", "noise", "faults", "heavy"))
COUNTS = {"world_found", "body_jumps_90", "finger_jumps_90", "finger_steps", "euler_flips", "id_switches", "frames_lost",
          "finger_jumps_clean", "body_jumps_clean", "euler_flips_clean"}
COLUMNS = ("mpjpe_clean_mm", "mpjpe_noise_mm", "mpjpe_mm", "heavy_mm", "bone_error_pct", "foot_slide_mm",
           "body_jumps_90", "euler_flips", "swap_error_mm", "baseline_error_mm", "height_error", "id_switches",
           "worst_joint_clean_mm", "angle_error_clean_deg", "fit_ratio")
TARGETS = ("clean <= 2 mm (every joint <= 10, every angle <= 5 degrees), noise <= 10, noise + faults <= 12, heavy <= 15, bones <= 5 %, foot slide <= 10 mm, "
           "no body jump / Euler or finger flip on clean input, swap <= 2x baseline, no id switch, height <= 2 %")


# each condition's camera-frame MPJPE key, in the tables' order
MPJPE_OF = {"clean": "mpjpe_clean_mm", "noise": "mpjpe_noise_mm", "faults": "mpjpe_mm", "heavy": "heavy_mm"}


def _across(m: dict, key: str) -> str:
    """`key`'s figure on each of the four runs (clean / noise / faults / heavy), "-" where a run has none."""
    return " / ".join(_text(m[f"{key}_{c}"]) if f"{key}_{c}" in m else "-" for c in MPJPE_OF)


def missed(clip: str, m: dict) -> list[str]:
    """The issue's targets (docs/motion.md) that one clip's figures miss."""
    checks = {"clean": m["mpjpe_clean_mm"] <= 2, "worst joint": not m.get("worst_joint_clean_mm", 0) > 10,
              "angles": not m.get("angle_error_clean_deg", 0) > 5,
              "noise": m["mpjpe_noise_mm"] <= 10, "faults": m["mpjpe_mm"] <= 12,
              "heavy": m.get("heavy_mm", 0) <= 15, "bones": m.get("bone_error_pct", 0) <= 5,
              "foot slide": m.get("foot_slide_mm", 0) <= 10,
              "swap": m["swap_error_mm"] <= 2 * m["baseline_error_mm"],
              "body jumps": m.get("body_jumps_clean", 0) == 0 and (m["body_jumps_90"] == 0
                                                                    or clip in ("cross", "leave_return")),
              "finger jumps": m["finger_jumps_clean"] == 0,
              "Euler flips": m.get("euler_flips_clean", 0) == 0, "id switches": m["id_switches"] == 0,
              "height": m["height_error"] <= 0.02}
    return [name for name, ok in checks.items() if not ok]


def missed_world(m: dict) -> list[str]:
    """The world frame's targets (docs/motion.md) one clip and camera's figures miss (where a floor was found)."""
    if not m.get("world_found"):
        return ["no floor"]
    turning = "camera_step_deg" in m  # a turning camera's: its rotation's targets, W-MPJPE's wider margin
    margin = 30 if turning else 15
    checks = {"gravity clean": m.get("gravity_error_deg_clean", 0) <= 0.5,
              "gravity": all(m.get(f"gravity_error_deg_{c}", 0) <= 2 for c in ("noise", "faults", "heavy")),
              "floor": all(m.get(f"floor_error_mm_{c}", 0) <= 30 for c in MPJPE_OF),
              "W-MPJPE": all(m.get(f"w_mpjpe_mm_{c}", 0) <= m.get(k, 0) + margin for c, k in MPJPE_OF.items()),
              "below floor": m.get("below_floor_pct", 0) <= 1, "world slide": m.get("world_foot_slide_mm", 0) <= 10,
              "camera": not turning or (m["camera_step_deg"] <= 1 and m["camera_drift_deg"] <= 2)}
    return [name for name, ok in checks.items() if not ok]


def _camera(text: str) -> tuple:
    """"H,PITCH,ROLL" or "H,PITCH,ROLL,KIND" (a turning camera: tests/motion_clips.TURNING)."""
    from tests.motion_clips import TURNING

    fields = text.split(",")
    if len(fields) not in (3, 4) or (len(fields) == 4 and fields[3] not in TURNING):
        raise argparse.ArgumentTypeError(f"{text!r}: H,PITCH,ROLL[,{'|'.join(TURNING)}]")
    return tuple(float(v) for v in fields[:3]) + tuple(fields[3:])


def _figures(clip: str, seed: int, fps: float, camera: tuple | None = None, seconds: float | None = None,
             oracle: bool = False, floor_pixels: bool = True) -> dict:
    from tests.motion_clips import LEVEL
    from tests.motion_truth import measure

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        figures = measure(clip, seed=seed, fps=fps, camera=camera or LEVEL, seconds=seconds, oracle=oracle,
                          floor_pixels=floor_pixels)
    out = {k: _plain(k, figures[k]) for k in KEYS if k in figures}
    if oracle:
        out["oracle"] = {k: _plain(k, figures["oracle"][k]) for k in KEYS if k in figures["oracle"]}
    return out


def main(argv=None, run=None) -> dict | None:
    """`run` (the harness's, `python -m benchmarks motion`) takes the tables: "world" from a run with --cameras,
    "clips" (the camera frame's figures) from one without, so the world's run and the fast clips' keep apart."""
    from tests.motion_clips import CLIPS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--clips", nargs="+", default=list(CLIPS), choices=CLIPS)
    parser.add_argument("--fps", type=float, nargs="+", default=[24.0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--seeds", type=int, nargs="+", help="once per seed, against the targets")
    parser.add_argument("--before", type=Path, help="a JSON this script wrote before: its 'after' rows as 'before'")
    parser.add_argument("--cameras", nargs="+", type=_camera, default=[], metavar="H,PITCH,ROLL[,KIND]",
                        help="also from these cameras (metres up, degrees down, degrees rolled; a turning camera's "
                             "kind: pan, tilt, shake): the world table")
    parser.add_argument("--oracle", action="store_true",
                        help="also each fit started from the truth (what the observations allow), a row under each")
    parser.add_argument("--seconds", type=float, help="each clip's first SECONDS only")
    parser.add_argument("--no-floor-pixels", action="store_true",
                        help="the floor from the feet alone (without the pointmap's floor pixels beside them)")
    parser.add_argument("--table", help="the results file's table key (default: world with --cameras, else clips)")
    parser.add_argument("--fit-time", type=float, metavar="SECONDS",
                        help="only time the fit of one person dancing this long at 30 frames/s (noise), three runs")
    args = parser.parse_args(argv)
    print(f"CPU: {platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}",
          file=sys.stderr)
    if args.fit_time:
        return _fit_time(args.fit_time)
    if args.seeds and args.cameras:
        return _world_across_seeds(args, run)
    if args.seeds:
        return _across_seeds(args)
    before = json.loads(args.before.read_text()) if args.before else {}
    results, rows = {}, []
    for clip in args.clips:
        results[clip] = {}
        if clip in before and "after" in before[clip]:
            results[clip]["before"] = before[clip]["after"]
            rows.append((clip, "before", before[clip]["after"]))
        for fps in args.fps:
            label = "after" if fps == 24 else f"after_{fps:g}fps"
            results[clip][label] = _figures(clip, args.seed, fps, seconds=args.seconds, oracle=args.oracle,
                                            floor_pixels=not args.no_floor_pixels)
            rows += _with_oracle(clip, label, results[clip][label])
            print(clip, label, "done", file=sys.stderr, flush=True)
        for camera in args.cameras:
            label = _camera_label(camera)
            results[clip][label] = _figures(clip, args.seed, args.fps[0], camera, args.seconds, args.oracle,
                                            not args.no_floor_pixels)
            print(clip, label, "done", file=sys.stderr, flush=True)
    print("| clip | path | " + " | ".join(COLUMNS) + " | targets missed |")
    print("|" + "---|" * (len(COLUMNS) + 3))
    for clip, label, m in rows:
        cells = [_text(m[k]) if k in m else "-" for k in COLUMNS]
        print(f"| {clip} | {label} | " + " | ".join(cells) + f" | {', '.join(missed(clip, m)) or 'none'} |")
    world = _world_table(results)
    if run is not None:
        run.figures, run.weights = results, "no model weights (synthetic clips)"
        caption = (f"Seed {args.seed}, {args.fps[0]:g} frames/s"
                   f"{f', each first {args.seconds:g} s' if args.seconds else ''}.")
        if args.cameras and world:
            run.table(args.table or "world", *world, caption=caption)
        elif not args.cameras:
            run.table(args.table or "clips", *_clips_table(rows), caption=caption)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}")
    return results


def _with_oracle(clip: str, label: str, m: dict) -> list[tuple]:
    """The table's rows for one run: its own, and beneath it the fit started from the truth where measured."""
    return [(clip, label, m)] + ([(clip, f"{label} from truth", m["oracle"])] if "oracle" in m else [])


def _camera_label(camera: tuple) -> str:
    return f"camera {camera[0]:g} m, {camera[1]:g} down, {camera[2]:g} rolled" + "".join(f", {k}" for k in camera[3:])


def _clips_table(rows: list[tuple]) -> tuple[list[str], list[list[str]]]:
    """The camera frame's figures as the docs show them: a row per clip and run."""
    columns = ["clip", "run", "MPJPE mm: clean / noise / noise + faults / heavy", "worst joint, clean, mm",
               "worst angle, clean, deg", "bones %", "foot slide mm", "body > 90 deg (faults; clean)",
               "Euler flips (faults; clean)", "swap / baseline mm", "fit ratio", "targets missed"]

    def pair(m: dict, *keys: str, sep: str) -> str:
        return sep.join(_text(m[k]) if k in m else "-" for k in keys)

    return columns, [[clip, label, pair(m, "mpjpe_clean_mm", "mpjpe_noise_mm", "mpjpe_mm", "heavy_mm", sep=" / "),
                      pair(m, "worst_joint_clean_mm", sep=""), pair(m, "angle_error_clean_deg", sep=""),
                      pair(m, "bone_error_pct", sep=""), pair(m, "foot_slide_mm", sep=""),
                      pair(m, "body_jumps_90", "body_jumps_clean", sep="; "),
                      pair(m, "euler_flips", "euler_flips_clean", sep="; "),
                      pair(m, "swap_error_mm", "baseline_error_mm", sep=" / "), pair(m, "fit_ratio", sep=""),
                      ", ".join(missed(clip, m)) or "none"] for clip, label, m in rows]


def _world_table(results: dict) -> tuple[list[str], list[list[str]]] | None:
    """Every clip and camera's world figures (rows where the files hold a world frame on some run), printed and
    returned as (columns, rows)."""
    rows = [row for clip, runs in results.items() for label, m in runs.items() if label != "before"
            for row in _with_oracle(clip, label, m) if "world_found" in row[2]]
    if not any(m["world_found"] for _, _, m in rows):
        return None
    columns = ["clip", "camera", "floor found (of 4 runs)", "gravity deg: clean / noise / faults / heavy", "floor mm",
               "W-MPJPE mm (camera-frame MPJPE)", "below floor %", "world slide mm",
               "camera's turn deg: worst a frame / drift", "targets missed"]
    print("\n| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))
    table = []
    for clip, label, m in rows:
        w = " / ".join(f"{_text(m[f'w_mpjpe_mm_{c}'])} ({_text(m[k])})" if f"w_mpjpe_mm_{c}" in m else "-"
                       for c, k in MPJPE_OF.items())
        camera = "level, 1 m" + label[5:].replace("after", "") if label.startswith("after") else label[7:]
        table.append([clip, camera, str(m["world_found"]), _across(m, "gravity_error_deg"),
                      _across(m, "floor_error_mm"), w,
                      _text(m.get("below_floor_pct", float("nan"))), _text(m.get("world_foot_slide_mm", float("nan"))),
                      f"{_text(m['camera_step_deg'])} / {_text(m['camera_drift_deg'])}" if "camera_step_deg" in m
                      else "still", ", ".join(missed_world(m)) or "none"])
        print("| " + " | ".join(table[-1]) + " |")
    return columns, table


def _fit_time(seconds: float, fps: float = 30.0) -> None:
    """The fit alone (pose/clip_fit.py) on a long noisy dance: its wall time against the clip's length."""
    import time

    import numpy as np

    from sapiens2_demo.pose.clip_fit import fit_clip
    from tests.motion_clips import CAMERA_HEIGHT, TO_CAMERA, _standing, back_project, body, project
    from tests.motion_moves import dance

    t = np.arange(int(seconds * fps)) / fps
    truth = ((body(dance(t, _standing), len(t)) - [0, CAMERA_HEIGHT, 0]) @ TO_CAMERA.T)[:, :70]
    rng = np.random.default_rng(0)
    pixels = project(truth) + rng.normal(0, 2.0, truth.shape[:2] + (2,))
    points = back_project(pixels, truth[..., 2] + rng.normal(0, 0.02, truth.shape[:2]))
    available = np.isfinite(points).all(-1)
    for run in range(3):
        start, cpu = time.perf_counter(), _cpu_seconds()
        fitted, _ = fit_clip(points, available, np.full_like(points, np.nan), np.where(available, 0.9, 0.0), 500.0, fps)
        took, cpu = time.perf_counter() - start, _cpu_seconds() - cpu
        error = np.nanmean(np.linalg.norm(fitted - truth, axis=-1)) * 1000
        print(f"fit of {len(t)} frames ({seconds:g} s at {fps:g} frames/s): {took:.1f} s wall = {took / seconds:.2f}x the "
              f"clip's length (budget 0.5x), {cpu:.1f} s of CPU (the fit's worker on one thread and this process; "
              f"the wall time waits on the machine's load), mean keypoint error {error:.1f} mm, "
              f"load {os.getloadavg()[0]:.1f}", flush=True)


def _cpu_seconds() -> float:
    """CPU seconds of this process and its finished children (the fit runs in a worker process of its own)."""
    import resource

    return sum(resource.getrusage(who).ru_utime + resource.getrusage(who).ru_stime
               for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))


def _across_seeds(args) -> None:
    results = {}
    print(f"| clip | seed | MPJPE mm (clean / noise / noise + faults / heavy) | bones % | body > 90 deg (faults; clean) "
          f"| Euler flips (faults; clean) | targets missed ({TARGETS}) |")
    print("|---|---|---|---|---|---|---|")
    for clip in args.clips:
        results[clip] = {}
        for seed in args.seeds:
            m = results[clip][seed] = _figures(clip, seed, args.fps[0])
            mpjpe = " / ".join(f"{m[k]:.1f}" for k in ("mpjpe_clean_mm", "mpjpe_noise_mm", "mpjpe_mm", "heavy_mm"))
            print(f"| {clip} | {seed} | {mpjpe} | {m['bone_error_pct']:.1f} | {m['body_jumps_90']}; {m['body_jumps_clean']} "
                  f"| {m['euler_flips']}; {m['euler_flips_clean']} | {', '.join(missed(clip, m)) or 'none'} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")
        print(f"wrote {args.json}")


def _world_across_seeds(args, run) -> dict:
    """Per clip, seed and camera, the world's figures of the four runs: a row each, into the results file's table
    (--table, default "world-seeds")."""
    results, rows = {}, []
    columns = ["clip", "seed", "camera", "gravity deg: clean / noise / faults / heavy", "floor mm", "W-MPJPE - MPJPE mm",
               "targets missed"]
    for clip in args.clips:
        for seed in args.seeds:
            for camera in args.cameras:
                m = _figures(clip, seed, args.fps[0], camera, args.seconds, floor_pixels=not args.no_floor_pixels)
                results.setdefault(clip, {}).setdefault(str(seed), {})[_camera_label(camera)] = m
                rows.append([clip, str(seed), _camera_label(camera)[7:], _across(m, "gravity_error_deg"),
                             _across(m, "floor_error_mm"),
                             " / ".join(_text(m[f"w_mpjpe_mm_{c}"] - m[k]) if f"w_mpjpe_mm_{c}" in m else "-"
                                        for c, k in MPJPE_OF.items()),
                             ", ".join(missed_world(m)) or "none"])
                print(" | ".join(rows[-1]), flush=True)
    if run is not None:
        run.figures, run.weights = results, "no model weights (synthetic clips)"
        floor = "the feet alone" if args.no_floor_pixels else "the feet and the floor pixels beside them"
        run.table(args.table or "world-seeds", columns, rows, caption=f"{args.fps[0]:g} frames/s; the floor from {floor}.")
    return results


def _plain(key: str, value):
    return int(value) if key in COUNTS else round(float(value), 4)


def _text(value) -> str:
    value = float(value)
    return f"{value:.0f}" if value.is_integer() else (f"{value:.3f}" if abs(value) < 1 else f"{value:.1f}")


if __name__ == "__main__":
    main()

"""The motion-capture ground-truth harness: a synthetic clip (tests/motion_clips.py) fed, frame by frame, to the
functions the video job runs after the models (tracking, the lift's occlusion check, the 2D smoother,
`MotionVideoExport`), the motion read back from the written BVH files (and motion.glb, checked against them),
and measured against the truth.

`measure(name, seed=0, fps=24)` -> {metric: value} with the keys of `benchmarks/bench_motion_truth.py --json`,
plus `glb_vs_bvh_mm`; `measure_run(name, noise, faults, seed, fps, heavy, seconds)` one condition's
(`seconds`: the clip's first ones only).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

import numpy as np

from sapiens2_demo.pose.skeleton3d import BODY_KEYPOINTS, CAMERA_TO_SKELETON
from sapiens2_demo.results import PoseResult
from tests.motion_clips import LEVEL, PLANTED_M_S, SIZE, Clip, floor_height, make_clip, to_world
from tests.unit.test_mocap_export import expected_markers, forward_kinematics, read_bvh

BODY = ["Hips", "Spine", "Neck", "Head"] + [f"{side}{part}" for side in ("Left", "Right") for part in
                                            ("Arm", "ForeArm", "Hand", "UpLeg", "Leg", "Foot", "ToeBase")]
LIMBS = [f"{side}{part}" for side in ("Left", "Right") for part in ("ForeArm", "Hand", "Leg", "Foot")]
FINGER_NAMES = ("Thumb", "Index", "Middle", "Ring", "Pinky")


def _rot(axis: str, degrees: np.ndarray) -> np.ndarray:
    from tests.motion_clips import rot

    return rot(axis, np.radians(degrees))


def local_rotations(bvh: dict) -> tuple[np.ndarray, list[list[tuple[int, str]]]]:
    """(T, J, 3, 3) each joint's rotation from its channels, and per joint its rotation channels (column, axis)."""
    frames = bvh["frames"]
    rotations = np.broadcast_to(np.eye(3), (len(frames), len(bvh["names"]), 3, 3)).copy()
    columns, column = [], 0
    for j, channels in enumerate(bvh["channels"]):
        mine = []
        for channel in channels:
            if channel.endswith("rotation"):
                rotations[:, j] = rotations[:, j] @ _rot(channel[0].lower(), frames[:, column])
                mine.append((column, channel[0]))
            column += 1
        columns.append(mine)
    return rotations, columns


def _angle(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Degrees between rotation matrices a and b (..., 3, 3)."""
    trace = np.einsum("...ji,...ji->...", a, b)
    return np.degrees(np.arccos(np.clip((trace - 1) / 2, -1, 1)))


def glb_positions(path: Path, track_id: int) -> dict:
    """{joint name: (T, 3) position} of `track_<id>` in motion.glb, by the glTF node animation (a reader of our own)."""
    import pygltflib

    gltf = pygltflib.GLTF2().load(str(path))
    blob = gltf.binary_blob()

    def data(index):
        accessor = gltf.accessors[index]
        view = gltf.bufferViews[accessor.bufferView]
        width = {"SCALAR": 1, "VEC3": 3, "VEC4": 4}[accessor.type]
        return np.frombuffer(blob, np.float32, accessor.count * width, view.byteOffset).reshape(accessor.count, -1)

    animation = next(a for a in gltf.animations if a.name == f"track_{track_id}")
    rotation, translation = {}, {}
    for channel in animation.channels:
        values = data(animation.samplers[channel.sampler].output).astype(np.float64)
        (rotation if channel.target.path == "rotation" else translation)[channel.target.node] = values
    root = next(n for n in translation)
    order, parent = [root], {root: None}
    for node in order:
        for child in gltf.nodes[node].children or []:
            parent[child] = node
            order.append(child)
    position, glob = {}, {}
    for node in order:
        x, y, z, w = rotation[node].T
        matrix = np.stack([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                           [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                           [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])
        matrix = np.moveaxis(matrix, [0, 1], [-2, -1])
        if parent[node] is None:
            position[node], glob[node] = translation[node], matrix
        else:
            offset = np.asarray(gltf.nodes[node].translation, float)
            position[node] = position[parent[node]] + np.einsum("tij,j->ti", glob[parent[node]], offset)
            glob[node] = glob[parent[node]] @ matrix
    return {gltf.nodes[n].name.rsplit("_", 1)[0]: position[n] for n in order}




def run(clip: Clip, folder: Path, oracle: bool = False, floor_pixels: bool = True,
        **options) -> tuple[list, list[Path], object]:
    """Feeds the clip to the video job's after-model path; returns per person their track id per frame (None =
    not detected), the files written and the export (`options` go to MotionVideoExport). `oracle`: each person's
    fit starts from their true keypoints (the same observations and terms): what the observations allow.
    `floor_pixels`: each frame's floor pixels (pose/floor_pixels.py) read from the floor's pointmap
    (motion_clips.floor_map) about the feet, outside the people's boxes (the segmentation's stand-in)."""
    from sapiens2_demo.export.mocap_video import MotionVideoExport
    from sapiens2_demo.pose.floor_pixels import floor_pixels as pixels_about_feet
    from sapiens2_demo.pose.lift import Pose3DResult, drop_in_front, focal_length
    from sapiens2_demo.pose.smoothing import KeypointSmoother
    from tests.motion_clips import floor_map

    fps = clip.fps
    from sapiens2_demo.pose.tracking import KeypointTracker

    tracker, smoother = KeypointTracker(frame_rate=fps), KeypointSmoother()
    ids = [[None] * clip.frames for _ in clip.truth]

    def truth_start(track_id, first, last):  # whoever the track followed most: their truth over its frames, in
        # each frame's camera (as the observations are)
        followed = [who for who in range(len(clip.truth)) if _main_id(ids[who]) == track_id]
        if not followed:
            return None
        truth = clip.truth[followed[0]][first:last, :BODY_KEYPOINTS]
        return truth if clip.turns is None else np.einsum("tji,tkj->tki", clip.turns[first:last], truth)

    export = MotionVideoExport(folder, fps=fps, fit_start=truth_start if oracle else None, **options)
    pictures = None
    if clip.turns is not None:  # a turning camera's frames: a textured panorama seen through its turn
        from tests.camera_frames import render_turning
        from tests.motion_clips import FOCAL

        pictures = render_turning(clip.turns, SIZE[1], SIZE[0], person=False, focal_px=FOCAL)
    for f in range(clip.frames):
        people = [who for who in range(len(clip.truth)) if clip.boxes[who][f] is not None]
        count = len(clip.keypoints[0][f])
        boxes = np.array([clip.boxes[w][f] for w in people], np.float32).reshape(-1, 4)
        keypoints = np.array([clip.keypoints[w][f] for w in people], np.float32).reshape(len(people), count, 2)
        scores = np.array([clip.scores[w][f] for w in people], np.float32).reshape(len(people), count)
        pose = PoseResult(image_size=SIZE, boxes=boxes, box_scores=np.full(len(people), 0.9, np.float32),
                          keypoints=keypoints, keypoint_scores=scores)
        points = np.array([clip.lifted[w][f] for w in people], np.float32).reshape(len(people), count, 3)
        lifted = Pose3DResult(points=points, scores=scores, available=np.isfinite(points).all(-1))
        lifted.focal = focal_length(keypoints, points, lifted.available, SIZE)  # as the lift reads it
        # the check lift_keypoints makes on what it lifted (this harness stands in for the pointmap)
        read = lifted.points.copy()
        dropped = drop_in_front(lifted.points, lifted.available, keypoints=keypoints, boxes=boxes)
        lifted.covered = np.where(dropped[..., None], read, np.nan)
        pose.track_ids = tracker.update(boxes, pose.box_scores, SIZE, lifted=lifted, time=f / fps)
        lifted.track_ids = pose.track_ids
        pose.lifted = lifted
        if floor_pixels and len(people):
            foreground = np.zeros(SIZE, bool)
            for x1, y1, x2, y2 in np.round(boxes).astype(int):
                foreground[max(y1, 0):max(y2, 0), max(x1, 0):max(x2, 0)] = True
            lifted.floor = pixels_about_feet(floor_map(clip, f), foreground, pose)
        if len(people):
            pose.keypoints = smoother.smooth(pose.track_ids, pose.keypoints, f / fps, pose.keypoint_scores)
        export.add(f, f / fps, None if pictures is None else next(pictures)[0], pose)
        for row, who in enumerate(people):
            ids[who][f] = int(pose.track_ids[row])
    start = time.perf_counter()
    files = export.close()
    export.close_seconds = time.perf_counter() - start
    return ids, files, export


def _main_id(ids: list) -> int | None:
    tracked = [i for i in ids if i is not None and i >= 0]
    return max(set(tracked), key=tracked.count) if tracked else None


def evaluate(clip: Clip, ids: list, folder: Path) -> dict:
    """The metrics of one run (see the module docstring); per-person figures are summed (counts) or worst."""
    out = {"mpjpe_mm": 0.0, "body_jumps_90": 0, "finger_jumps_90": 0, "finger_steps": 0, "euler_flips": 0,
           "swap_error_mm": 0.0, "baseline_error_mm": 0.0, "height_error": 0.0, "id_switches": 0,
           "frames_lost": 0, "glb_vs_bvh_mm": 0.0, "bone_error_pct": 0.0, "foot_slide_mm": 0.0, "world_found": 0}
    errors = []
    for who, truth in enumerate(clip.truth):
        track = _main_id(ids[who])
        present = np.array([i is not None for i in ids[who]])
        tracked = [i for i in ids[who] if i is not None and i >= 0]
        out["id_switches"] += sum(a != b for a, b in zip(tracked, tracked[1:]))
        out["frames_lost"] += sum(i is not None and i != track for i in ids[who])
        path = folder / f"motion_{track}.bvh"
        if track is None or not path.exists():
            out["frames_lost"] += int(present.sum())
            continue
        bvh = read_bvh(path.read_text())
        names = bvh["names"]
        positions, _ = forward_kinematics(bvh)
        glb = glb_positions(folder / "motion.glb", track)
        gap = max(float(np.abs(glb[n] - positions[:, j]).max()) for j, n in enumerate(names))
        out["glb_vs_bvh_mm"] = max(out["glb_vs_bvh_mm"], 1000 * gap)
        camera = camera_pose(folder)
        if camera is not None:  # the files are in the world frame: the world metrics, then back to the camera's
            out.update(world_figures(clip, truth, positions, names, camera, present, 1 / bvh["frame_time"]))
            if clip.turns is not None:
                out.update(camera_figures(clip, folder))
            rotation, centre = camera
            positions = ((positions - centre) @ rotation) @ CAMERA_TO_SKELETON.T
        expected = expected_markers(truth)
        got = {n: positions[:, names.index(n)] - positions[:, 0] for n in BODY}
        want = {n: expected[n] - expected["Hips"] for n in BODY}
        error = np.stack([np.linalg.norm(got[n] - want[n], axis=1) for n in BODY], 1)[present]  # (F, 18)
        errors.append(error)
        out["worst_joint_mm"] = max(out.get("worst_joint_mm", 0.0), 1000 * float(error.mean(0).max()))
        limb = np.stack([np.linalg.norm(got[n] - want[n], axis=1) for n in LIMBS], 1).max(1)  # (T,)
        sound = [f for f in np.flatnonzero(present) if f not in clip.faulty[who]]
        out["baseline_error_mm"] = max(out["baseline_error_mm"], 1000 * float(np.median(limb[sound])))
        if clip.swaps[who]:
            out["swap_error_mm"] = max(out["swap_error_mm"], 1000 * float(limb[clip.swaps[who]].max()))
        rotations, columns = local_rotations(bvh)
        moved = _angle(rotations[1:], rotations[:-1])  # (T-1, J)
        fingers = [j for j, n in enumerate(names) if "Hand" in n and any(f in n for f in FINGER_NAMES)]
        body = [j for j, n in enumerate(names) if j not in fingers]
        out["body_jumps_90"] += int((moved[:, body] > 90).sum())
        out["finger_jumps_90"] += int((moved[:, fingers] > 90).sum())
        out["finger_steps"] += int(moved[:, fingers].size)
        for j, mine in enumerate(columns):
            for column, _ in mine:
                step = np.abs(np.diff(bvh["frames"][:, column]))
                out["euler_flips"] += int(((step > 90) & (moved[:, j] < 90)).sum())
        offsets = {n: np.linalg.norm(bvh["offsets"][names.index(n)]) for n in ("LeftLeg", "LeftFoot", "Spine", "Neck",
                                                                              "Head")}
        height = sum(offsets.values())
        true_height = sum(float(np.linalg.norm(expected[a][0] - expected[b][0])) for a, b in (
            ("LeftUpLeg", "LeftLeg"), ("LeftLeg", "LeftFoot"), ("Hips", "Spine"), ("Spine", "Neck"), ("Neck", "Head")))
        out["height_error"] = max(out["height_error"], abs(height - true_height) / true_height)
        out["bone_error_pct"] = max(out["bone_error_pct"], bone_error_pct(bvh, expected))
        out["foot_slide_mm"] = max(out["foot_slide_mm"], foot_slide_mm(positions, names, expected, present,
                                                                       1 / bvh["frame_time"]))
    out["mpjpe_mm"] = 1000 * float(np.concatenate(errors).mean()) if errors else float("nan")
    return out


def camera_pose(folder: Path) -> tuple[np.ndarray, np.ndarray] | None:
    """(rotation camera -> world, position) from pose_3d.jsonl's first line, or None (no floor: the camera's frame)."""
    import json

    with open(folder / "pose_3d.jsonl") as lines:
        camera = json.loads(next(lines)).get("camera")
    return None if camera is None else (np.array(camera["rotation"]), np.array(camera["position"]))


def camera_figures(clip: Clip, folder: Path) -> dict:
    """A turning camera's rotation as pose_3d.jsonl holds it against the truth (degrees): the worst error of a
    frame's turn from the one before (`camera_step_deg`) and of a frame's rotation from the first (`camera_drift_deg`)."""
    import json

    from tests.camera_frames import errors

    lines = (folder / "pose_3d.jsonl").read_text().splitlines()
    rotations = np.array([json.loads(line)["camera"]["rotation"] for line in lines])
    rotations /= np.linalg.norm(rotations, axis=1, keepdims=True)  # (the file's rounding)
    found = np.einsum("ji,tjk->tik", rotations[0], rotations)  # frame t's camera -> the first's
    figures = errors(found, clip.turns[: len(found)])
    return {"camera_step_deg": figures["per_frame"], "camera_drift_deg": figures["drift"]}


BELOW_FLOOR_M = 0.02


def world_figures(clip: Clip, truth: np.ndarray, positions: np.ndarray, names: list, camera, present: np.ndarray,
                  fps: float) -> dict:
    """The world frame's figures: gravity's error (degrees), the floor's (the camera's height above it against
    the true one's above the true planted feet, mm), W-MPJPE (every body joint after a turn about the vertical and
    a shift along the floor, over the whole clip, mm), the frames a toe is more than 2 cm below the true floor (%),
    and a planted foot's slide along the floor (mm)."""
    from tests.motion_clips import camera_rotation

    rotation, centre = camera
    up = camera_rotation(clip.camera) @ [0.0, 1.0, 0.0]  # the true up in the camera's frame
    found = rotation[1] / np.linalg.norm(rotation[1])  # (the file's rounding leaves it a hair off unit length)
    gravity = float(np.degrees(np.arctan2(np.linalg.norm(np.cross(found, up)), found @ up)))
    world = to_world(truth, clip.camera)
    floor = floor_height(world, fps, present)
    expected = expected_markers(world @ CAMERA_TO_SKELETON)  # (the markers' function reads the camera's frame)
    got = np.stack([positions[:, names.index(n)] for n in BODY], 1)[present]  # (F, 18, 3) the files' world
    want = np.stack([expected[n] for n in BODY], 1)[present]
    # the gauge a still camera leaves: a turn about Y and a shift in X, Z (least squares, Kabsch in the plane)
    a, b = got[..., [0, 2]].reshape(-1, 2), want[..., [0, 2]].reshape(-1, 2)
    u, _, vt = np.linalg.svd((a - a.mean(0)).T @ (b - b.mean(0)))
    turn = u @ np.diag([1.0, np.sign(np.linalg.det(u @ vt))]) @ vt
    aligned = got.copy()
    aligned[..., [0, 2]] = (got[..., [0, 2]] - a.mean(0)) @ turn + b.mean(0)
    aligned[..., 1] += floor  # the files' floor at Y = 0, the true one at `floor`
    toes = aligned[:, [BODY.index("LeftToeBase"), BODY.index("RightToeBase")], 1]
    whole = np.zeros((len(positions), len(BODY), 3))
    whole[present] = aligned
    slide = foot_slide_mm(whole, BODY, {n: expected[n] for n in BODY}, present, fps)
    return {"world_found": 1, "gravity_error_deg": gravity,
            "floor_error_mm": 1000 * abs(float(centre[1]) - (clip.camera[0] - floor)),
            "w_mpjpe_mm": 1000 * float(np.linalg.norm(aligned - want, axis=-1).mean()),
            "below_floor_pct": 100 * float((toes < floor - BELOW_FLOOR_M).any(1).mean()),
            "world_foot_slide_mm": slide}


def bone_error_pct(bvh: dict, expected: dict) -> float:
    """The worst body bone's length error against the truth, in % (the BVH OFFSET against the distance between
    the true markers of the joint and its parent; zero-offset branch joints skipped)."""
    names, worst = bvh["names"], 0.0
    for n in BODY[1:]:
        j = names.index(n)
        truth = float(np.linalg.norm(expected[n][0] - expected[names[bvh["parents"][j]]][0]))
        worst = max(worst, abs(float(np.linalg.norm(bvh["offsets"][j])) - truth) / truth)
    return 100 * worst




def foot_slide_mm(positions: np.ndarray, names: list, expected: dict, present: np.ndarray, fps: float) -> float:
    """The most a solved foot (ankle or toes) slides across the floor while the true one is planted, beyond the
    true one's own small motion: over each run of 3+ planted frames, the horizontal drift from the run's start."""
    worst = 0.0
    for side in ("Left", "Right"):
        got = np.concatenate([positions[:, names.index(f"{side}{n}")] for n in ("Foot", "ToeBase")], 1)
        want = np.concatenate([expected[f"{side}{n}"] for n in ("Foot", "ToeBase")], 1)
        speed = np.linalg.norm(np.diff(want, axis=0), axis=1) * fps / np.sqrt(2)
        planted = np.concatenate([[False], speed < PLANTED_M_S]) & present
        edges = np.flatnonzero(np.diff(np.concatenate([[0], planted.astype(int), [0]])))
        for start, end in zip(edges[::2], edges[1::2]):
            if end - start >= 3:
                drift = (got[start:end] - got[start]) - (want[start:end] - want[start])
                drift = drift.reshape(end - start, 2, 3)[..., [0, 2]]
                worst = max(worst, 1000 * float(np.linalg.norm(drift, axis=-1).max()))
    return worst


def measure_run(name: str, noise: bool = True, faults: bool = True, seed: int = 0, fps: float = 24.0,
                heavy: bool = False, seconds: float | None = None, camera: tuple = LEVEL, oracle: bool = False,
                floor_pixels: bool = True) -> dict:
    clip = make_clip(name, noise=noise, faults=faults, seed=seed, fps=fps, heavy=heavy, seconds=seconds,
                     camera=camera)
    with tempfile.TemporaryDirectory() as folder:
        ids, _, export = run(clip, Path(folder), oracle=oracle, floor_pixels=floor_pixels)
        return {**evaluate(clip, ids, Path(folder)), "fit_seconds": export.close_seconds,
                "clip_seconds": clip.frames / clip.fps, "angle_error_deg": angle_error_deg(clip, export.fitted)}


def angle_error_deg(clip: Clip, fitted: list) -> float:
    """The worst joint angle (pose/joint_angles.py: knees, hips, elbows, shoulders, trunk lean) of the fitted
    motion against the truth's, degrees, over the frames where the limbs' joints were all lifted (where one was
    hidden or out of view the angle is the motion prior's guess); each fit paired with the person whose truth it
    lies nearest."""
    from sapiens2_demo.pose.joint_angles import angle_names, joint_angles
    from sapiens2_demo.pose.meta import name_index
    from tests.motion_clips import camera_rotation

    index = name_index()
    limbs = [index[f"{side}_{joint}"] for side in ("left", "right")
             for joint in ("hip", "knee", "ankle", "shoulder", "elbow", "wrist")] + [index["neck"]]

    up = camera_rotation(clip.camera) @ [0.0, 1.0, 0.0]  # the true up in the camera's frame
    times = np.arange(clip.frames) / clip.fps
    worst = 0.0
    for track in fitted:
        present = np.asarray(track.present[: clip.frames], bool)
        seen = present & np.asarray(track.measured[: clip.frames], bool)[:, limbs].all(1)
        points = np.asarray(track.points[: clip.frames])
        truth = min(clip.truth, key=lambda t: float(np.nanmean(np.linalg.norm(
            points[present][:, :17] - t[: clip.frames][present][:, :17], axis=-1))))[: clip.frames, : points.shape[1]]
        got, want = joint_angles(points, times, up=up), joint_angles(truth, times, up=up)
        for series in angle_names()[:-1]:  # the last is the root's speed, not an angle
            error = np.abs(np.asarray(got[series]) - np.asarray(want[series]))[seen]
            if np.isfinite(error).any():
                worst = max(worst, float(np.nanmax(error)))
    return worst


CONDITIONS = ("faults", "clean", "noise", "heavy")


def measure(name: str, seed: int = 0, fps: float = 24.0, camera: tuple = LEVEL, seconds: float | None = None,
            oracle: bool = False, floor_pixels: bool = True) -> dict:
    """The clip's metrics: everything under noise and faults, plus the clean, noise-only and heavy error model's
    MPJPE (`mpjpe_clean_mm`, `mpjpe_noise_mm`, `heavy_mm`); `bone_error_pct` and `foot_slide_mm` are the worst of
    the four runs, `fit_seconds` the noise + faults run's (the export's close: the fit, the skeleton, the files),
    `fit_ratio` it over the clip's length. `seconds`: the clip's first ones only. `oracle`: also "oracle", the same
    metrics with each fit started from the truth (the same observations and terms: what they allow).
    `floor_pixels`: the pointmap's floor beside the feet (run's)."""
    runs = {cond: measure_run(name, noise=cond != "clean", faults=cond == "faults", seed=seed, fps=fps,
                              heavy=cond == "heavy", camera=camera, seconds=seconds, floor_pixels=floor_pixels)
            for cond in CONDITIONS}
    result = _summary(runs)
    if oracle:
        result["oracle"] = _summary({cond: measure_run(name, noise=cond != "clean", faults=cond == "faults",
                                                       seed=seed, fps=fps, heavy=cond == "heavy", camera=camera,
                                                       seconds=seconds, oracle=True, floor_pixels=floor_pixels)
                                     for cond in CONDITIONS})
    return result


def _summary(runs: dict) -> dict:
    """One clip's figures from its four runs (see `measure`)."""
    result = dict(runs["faults"])
    result["fit_ratio"] = result["fit_seconds"] / result["clip_seconds"]
    result.update(mpjpe_clean_mm=runs["clean"]["mpjpe_mm"], finger_jumps_clean=runs["clean"]["finger_jumps_90"],
                  body_jumps_clean=runs["clean"]["body_jumps_90"], euler_flips_clean=runs["clean"]["euler_flips"],
                  worst_joint_clean_mm=runs["clean"].get("worst_joint_mm", float("nan")),
                  angle_error_clean_deg=runs["clean"].get("angle_error_deg", float("nan")),
                  mpjpe_noise_mm=runs["noise"]["mpjpe_mm"], heavy_mm=runs["heavy"]["mpjpe_mm"],
                  bone_error_pct=max(r["bone_error_pct"] for r in runs.values()),
                  foot_slide_mm=max(r["foot_slide_mm"] for r in runs.values()))
    for key in ("gravity_error_deg", "floor_error_mm", "w_mpjpe_mm"):  # the world's, per condition
        for cond, figures in runs.items():
            if key in figures:
                result[f"{key}_{cond}"] = figures[key]
    worlds = [r for r in runs.values() if r.get("world_found")]
    result["world_found"] = len(worlds)  # of the four runs
    for key in ("below_floor_pct", "world_foot_slide_mm"):
        if worlds:
            result[key] = max(r[key] for r in worlds)
    return result

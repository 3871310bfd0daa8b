"""A mocap skeleton solved from 3D keypoints: bone lengths from the person's median, rotations per frame.

Frame: Y up, metres, the person facing +Z with their left at +X (BVH and glTF's convention; Blender's BVH
importer reads it as is). Camera-frame points (x right, y down, z forward) map to it as (x, -y, -z): a rotation
of 180 degrees about x, so a person facing the camera faces +Z.

Every joint sits at a marker (a keypoint, or the mean of a few: the pelvis is the mid-hip point) and aims its
one child with a non-zero offset, so forward kinematics puts each joint exactly on its marker whenever the
person's bone lengths hold (a rigid body). Where a joint would need several such children (the pelvis: spine and
both hips; the neck: head and both shoulders; the hand: five fingers), the extra ones hang from zero-offset
branch joints (as CMU's BVH files do: LeftHipJoint, LeftShoulder), each with its own rotation. Joints with a
sideways pair of markers (hips, shoulders, ears, knuckles) take their twist from it; the others take the
smallest rotation from their parent (swing only). A marker never seen for the person keeps its joint in the
rest pose relative to its parent, with a default length.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from .meta import name_index

UP, DOWN, FORWARD = (0.0, 1.0, 0.0), (0.0, -1.0, 0.0), (0.0, 0.0, 1.0)
SIDES = (("Left", "left", (1.0, 0.0, 0.0)), ("Right", "right", (-1.0, 0.0, 0.0)))
FINGERS = (("Thumb", "thumb"), ("Index", "forefinger"), ("Middle", "middle_finger"), ("Ring", "ring_finger"),
           ("Pinky", "pinky_finger"))
BODY_KEYPOINTS = 70  # keypoints 0-69: body, feet, hands, neck (the face is not part of the skeleton)
MIN_LENGTH = 0.001  # metres: a shorter median bone is not a measurement, its default is used
CAMERA_TO_SKELETON = np.diag([1.0, -1.0, -1.0])  # camera frame (x right, y down, z forward) -> Y up, facing +Z

# Markers that are not keypoints: weights over keypoint names.
DERIVED = {"pelvis": {"left_hip": 0.5, "right_hip": 0.5},
           "spine": {"left_hip": 0.25, "right_hip": 0.25, "neck": 0.5},
           "head": {"left_ear": 0.5, "right_ear": 0.5},
           "left_toes": {"left_big_toe": 0.5, "left_small_toe": 0.5},
           "right_toes": {"right_big_toe": 0.5, "right_small_toe": 0.5}}

# Lengths (metres) for a bone whose markers are never seen together, an adult's roughly, keyed by the joint the
# bone ends at (its offset from its parent): "Arm" is the collarbone, "Leg" the thigh, "Foot" the shin.
DEFAULT_LENGTHS = {"Spine": 0.25, "Neck": 0.25, "Head": 0.15, "Arm": 0.18, "ForeArm": 0.28,
                   "Hand": 0.26, "UpLeg": 0.1, "Leg": 0.42, "Foot": 0.42, "ToeBase": 0.14, "finger": 0.03,
                   "nose": 0.1, "hand_end": 0.08, "toe_end": 0.04}


@dataclass(frozen=True)
class JointSpec:
    name: str
    parent: str | None
    at: str  # the marker it sits on
    rest: tuple | None  # rest direction of its offset from the parent; None: zero offset (a branch joint)
    aim: tuple | None = None  # (marker, rest direction): what its rotation points at
    twist: tuple | None = None  # (marker a, marker b, rest direction of b -> a): the sideways axis
    end: tuple | None = None  # End Site: (marker or None, rest direction, default length)
    hand: str | None = None  # "left" / "right": only when that hand's keypoints are sure
    default: str = ""  # key in DEFAULT_LENGTHS for its offset


def skeleton_specs() -> list[JointSpec]:
    """Every joint, parents first (hands included; `solve` drops a hand that is not sure)."""
    joints = [JointSpec("Hips", None, "pelvis", None, aim=("spine", UP), twist=("left_hip", "right_hip", SIDES[0][2])),
              JointSpec("Spine", "Hips", "spine", UP, aim=("neck", UP),
                        twist=("left_shoulder", "right_shoulder", SIDES[0][2]), default="Spine"),
              JointSpec("Neck", "Spine", "neck", UP, aim=("head", UP), twist=("left_ear", "right_ear", SIDES[0][2]),
                        default="Neck"),
              JointSpec("Head", "Neck", "head", UP, aim=("nose", FORWARD), twist=("left_ear", "right_ear", SIDES[0][2]),
                        end=("nose", FORWARD, DEFAULT_LENGTHS["nose"]), default="Head")]
    for side, s, out in SIDES:
        knuckles = (f"{s}_forefinger_third_joint", f"{s}_pinky_finger_third_joint", FORWARD)
        joints += [JointSpec(f"{side}Shoulder", "Neck", "neck", None, aim=(f"{s}_shoulder", out)),
                   JointSpec(f"{side}Arm", f"{side}Shoulder", f"{s}_shoulder", out, aim=(f"{s}_elbow", out),
                             default="Arm"),
                   JointSpec(f"{side}ForeArm", f"{side}Arm", f"{s}_elbow", out, aim=(f"{s}_wrist", out),
                             default="ForeArm"),
                   JointSpec(f"{side}Hand", f"{side}ForeArm", f"{s}_wrist", out,
                             aim=(f"{s}_middle_finger_third_joint", out), twist=knuckles,
                             end=(None, out, DEFAULT_LENGTHS["hand_end"]), default="Hand")]
        for bvh, finger in FINGERS:
            points = [f"{s}_{finger}_third_joint", f"{s}_{finger}2", f"{s}_{finger}3", f"{s}_{finger}4"]
            joints.append(JointSpec(f"{side}Hand{bvh}0", f"{side}Hand", f"{s}_wrist", None, aim=(points[0], out),
                                    hand=s))
            for i in range(3):
                joints.append(JointSpec(f"{side}Hand{bvh}{i + 1}", f"{side}Hand{bvh}{i}", points[i], out,
                                        aim=(points[i + 1], out), hand=s, default="finger",
                                        end=(points[3], out, DEFAULT_LENGTHS["finger"]) if i == 2 else None))
        joints += [JointSpec(f"{side}HipJoint", "Hips", "pelvis", None, aim=(f"{s}_hip", out)),
                   JointSpec(f"{side}UpLeg", f"{side}HipJoint", f"{s}_hip", out, aim=(f"{s}_knee", DOWN),
                             default="UpLeg"),
                   JointSpec(f"{side}Leg", f"{side}UpLeg", f"{s}_knee", DOWN, aim=(f"{s}_ankle", DOWN), default="Leg"),
                   JointSpec(f"{side}Foot", f"{side}Leg", f"{s}_ankle", DOWN, aim=(f"{s}_toes", FORWARD),
                             default="Foot"),
                   JointSpec(f"{side}ToeBase", f"{side}Foot", f"{s}_toes", FORWARD,
                             end=(None, FORWARD, DEFAULT_LENGTHS["toe_end"]), default="ToeBase")]
    return joints


def hand_keypoints(side: str) -> list[int]:
    """The wrist and 20 finger keypoints of "left" or "right"."""
    index = name_index()
    return [i for name, i in index.items() if name.startswith(f"{side}_") and i < BODY_KEYPOINTS
            and any(f in name for _, f in FINGERS)] + [index[f"{side}_wrist"]]


def markers(points: np.ndarray) -> dict[str, np.ndarray]:
    """(T, 70, 3) keypoints (NaN = unknown) -> every marker (keypoint names and DERIVED) as (T, 3)."""
    index = name_index()
    named = {name: points[:, i] for name, i in index.items() if i < BODY_KEYPOINTS}
    for name, weights in DERIVED.items():
        named[name] = sum(w * points[:, index[k]] for k, w in weights.items())
    return named


@dataclass
class SolvedMotion:
    """One person's skeleton over the video, in the Y-up frame (see the module docstring)."""

    names: list[str]
    parents: list[int]  # -1 for the root
    offsets: np.ndarray  # (J, 3) metres: each joint's rest offset from its parent (the BVH OFFSETs)
    ends: list[np.ndarray | None]  # End Site offset per joint (leaves only)
    local: np.ndarray  # (T, J, 3, 3): each joint's rotation relative to its parent, per frame
    root: np.ndarray  # (T, 3): the root's position per frame
    positions: np.ndarray  # (T, J, 3): each joint's position (forward kinematics)
    seen: list[bool]  # per joint: its bone was measured (False: default length, rest pose)


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.maximum(np.linalg.norm(v, axis=-1, keepdims=True), 1e-12)


def swing(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(T, 3, 3): the smallest rotation taking unit vectors a to b (T, 3) (Rodrigues); 180 degrees about a
    perpendicular axis where they are opposite."""
    a, b = _unit(a), _unit(b)
    v, c = np.cross(a, b), np.einsum("ti,ti->t", a, b)
    k = np.zeros(a.shape[:1] + (3, 3))
    k[:, 0, 1], k[:, 0, 2], k[:, 1, 2] = -v[:, 2], v[:, 1], -v[:, 0]
    k -= k.transpose(0, 2, 1)
    rotation = np.eye(3) + k + k @ k / np.maximum(1.0 + c, 1e-12)[:, None, None]
    opposite = c < -1 + 1e-9
    if opposite.any():
        helper = np.where(np.abs(a[opposite, :1]) < 0.9, [[1.0, 0.0, 0.0]], [[0.0, 1.0, 0.0]])
        axis = _unit(np.cross(a[opposite], helper))
        rotation[opposite] = 2 * axis[:, :, None] * axis[:, None, :] - np.eye(3)
    return rotation


def frame_rotation(rest_aim, rest_side, aim: np.ndarray, side: np.ndarray) -> np.ndarray | None:
    """(T, 3, 3) rotation taking rest_aim to `aim` and rest_side (perpendicular to it) into the plane of aim and
    `side`; None where `side` is unusable (unknown or along the aim) on any frame."""
    aim = _unit(aim)
    side = side - np.einsum("ti,ti->t", side, aim)[:, None] * aim
    if not np.isfinite(side).all() or (np.linalg.norm(side, axis=1) < 1e-6).any():
        return None
    side = _unit(side)
    current = np.stack([aim, side, np.cross(aim, side)], axis=2)
    r_aim, r_side = np.asarray(rest_aim, float), np.asarray(rest_side, float)
    rest = np.stack([r_aim, r_side, np.cross(r_aim, r_side)], axis=1)
    return current @ rest.T


def _median_length(a: np.ndarray, b: np.ndarray, measured: np.ndarray | None) -> float | None:
    distance = np.linalg.norm(a - b, axis=1)
    if measured is not None:
        distance = distance[measured]
    distance = distance[np.isfinite(distance)]
    if not distance.size or np.median(distance) < MIN_LENGTH:
        return None
    return float(np.median(distance))


def solve(points: np.ndarray, measured: np.ndarray | None = None, hands: tuple[str, ...] = ("left", "right"),
          rest_hands: tuple[str, ...] = ()) -> SolvedMotion:
    """The skeleton for (T, 70, 3) keypoints in the Y-up frame, every frame filled (NaN: a keypoint never seen);
    `measured` (T, 70) marks the samples that were lifted rather than filled (bone lengths use those).
    `hands`: the sides whose finger joints to include; `rest_hands` those of them left in the rest pose.
    Finger joints aim from their own marker at the next (not from where forward kinematics put them, which
    carries the whole chain's length error: a flip once that error nears a phalanx; for the clip's fit, whose
    bones hold their lengths, the two agree) and End Site lengths are measured from the marker too.
    Raises ValueError when the pelvis or neck is unknown."""
    points = np.asarray(points, dtype=np.float64)
    named = markers(points)
    known = {name: np.isfinite(value).all() for name, value in named.items()}
    if not (known["pelvis"] and known["neck"]):
        raise ValueError("the hips and neck were never placed in 3D")
    sure = None if measured is None else markers(np.where(np.asarray(measured, bool)[..., None], 0.0, np.nan))

    specs = []
    for j in skeleton_specs():
        if j.hand is not None and j.hand not in hands:
            continue
        if j.name.endswith("Hand"):  # with fingers it aims its middle knuckle; without, it ends in an End Site
            j = replace(j, end=None) if j.name[:-4].lower() in hands else replace(j, aim=None, twist=None)
        specs.append(j)
    order = {j.name: i for i, j in enumerate(specs)}
    frames = points.shape[0]
    parents = [order[j.parent] if j.parent else -1 for j in specs]
    offsets, ends, seen = np.zeros((len(specs), 3)), [], []
    glob = np.zeros((frames, len(specs), 3, 3))
    positions = np.zeros((frames, len(specs), 3))
    for i, j in enumerate(specs):
        parent = parents[i]
        length = None
        if j.rest is not None:
            pair = (named[specs[parent].at], named[j.at])
            both = None if sure is None else np.isfinite(sure[specs[parent].at]).all(1) & np.isfinite(sure[j.at]).all(1)
            length = _median_length(*pair, both) if known[j.at] and known[specs[parent].at] else None
            offsets[i] = np.asarray(j.rest) * (length if length is not None else DEFAULT_LENGTHS[j.default])
        seen.append(j.rest is None or length is not None)
        if parent < 0:
            positions[:, i] = named[j.at]
            parent_rotation = np.broadcast_to(np.eye(3), (frames, 3, 3))
        else:
            positions[:, i] = positions[:, parent] + glob[:, parent] @ offsets[i]
            parent_rotation = glob[:, parent]
        glob[:, i] = parent_rotation
        if j.hand in rest_hands:
            pass  # too noisy to give a direction: the rest pose relative to the hand
        elif j.aim is not None and known[j.aim[0]]:
            start = named[j.at] if j.hand is not None and known[j.at] else positions[:, i]
            aim = named[j.aim[0]] - start
            turned = None
            if j.twist is not None and known[j.twist[0]] and known[j.twist[1]]:
                turned = frame_rotation(j.aim[1], j.twist[2], aim, named[j.twist[0]] - named[j.twist[1]])
            if turned is None:
                turned = swing(parent_rotation @ np.asarray(j.aim[1]), aim) @ parent_rotation
            glob[:, i] = turned
        ends.append(_end_offset(j, named, known, named[j.at] if known[j.at] else positions[:, i]))
    local = glob.copy()
    has_parent = np.asarray(parents) >= 0
    local[:, has_parent] = np.swapaxes(glob[:, np.asarray(parents)[has_parent]], -1, -2) @ glob[:, has_parent]
    motion = SolvedMotion(names=[j.name for j in specs], parents=parents, offsets=offsets, ends=ends, local=local,
                          root=positions[:, 0].copy(), positions=positions, seen=seen)
    return motion


def _end_offset(j: JointSpec, named, known, position) -> np.ndarray | None:
    if j.end is None:
        return None
    marker, rest, default = j.end
    length = None
    if marker is not None and known[marker]:
        length = _median_length(named[marker], position, None)
    return np.asarray(rest) * (length if length is not None else default)


def end_positions(motion: SolvedMotion) -> dict[str, np.ndarray]:
    """(T, 3) position of each End Site, by its joint's name (forward kinematics)."""
    glob = _global_rotations(motion)
    return {name: motion.positions[:, i] + glob[:, i] @ end
            for i, (name, end) in enumerate(zip(motion.names, motion.ends)) if end is not None}


def forward_kinematics(motion: SolvedMotion) -> SolvedMotion:
    """`motion` with `positions` recomputed from its root, offsets and local rotations."""
    glob = _global_rotations(motion)
    motion.positions[:, 0] = motion.root
    for i, parent in enumerate(motion.parents):
        if parent >= 0:
            motion.positions[:, i] = motion.positions[:, parent] + glob[:, parent] @ motion.offsets[i]
    return motion


def _global_rotations(motion: SolvedMotion) -> np.ndarray:
    glob = motion.local.copy()
    for i, parent in enumerate(motion.parents):
        if parent >= 0:
            glob[:, i] = glob[:, parent] @ motion.local[:, i]
    return glob

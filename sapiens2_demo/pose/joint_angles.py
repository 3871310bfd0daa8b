"""Joint angles over time from a person's 3D keypoints, in degrees, named as a physiotherapist would.

Input: (T, K >= 70, 3) keypoints (the 308 set's body part, metres; NaN = unknown) in a frame whose up axis is
given: the skeleton's Y-up frame (the camera's up until the motion has a floor), or the camera frame with up -y.
- knee / elbow flexion: 180 minus the angle at the joint (0 = straight);
- hip flexion: the thigh's angle from the trunk's downward line in the body's sagittal plane, positive forward
  (extension negative); the body's left-right axis is the hips' line;
- shoulder elevation: the upper arm's angle from the trunk's downward line in any plane (0 = arm at the side,
  90 = horizontal, 180 = overhead);
- trunk lean: the trunk's (mid-hip to neck) angle from the up axis;
- root speed (m/s): the mid-hip point's speed, central differences over the frames' times.
A value is NaN on a frame where one of its keypoints is unknown.
"""

from __future__ import annotations

import numpy as np

from .meta import name_index

SIDES = ("left", "right")
GROUPS = {"knee": "Knee flexion", "hip": "Hip flexion", "elbow": "Elbow flexion",
          "shoulder": "Shoulder elevation", "trunk": "Trunk lean"}  # a plot panel each; speed has its own
Y_UP = (0.0, 1.0, 0.0)
CAMERA_UP = (0.0, -1.0, 0.0)  # the camera frame: x right, y down, z forward


def angle_names() -> list[str]:
    """The series' names, in column order: <side>_<joint>_deg, trunk_lean_deg, root_speed_mps."""
    return ([f"{side}_{joint}_deg" for joint in ("knee", "hip", "elbow", "shoulder") for side in SIDES]
            + ["trunk_lean_deg", "root_speed_mps"])


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _between(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Degrees between vectors (..., 3), NaN where either is unknown or zero."""
    with np.errstate(invalid="ignore", divide="ignore"):
        cos = np.sum(_unit(a) * _unit(b), axis=-1)
    return np.degrees(np.arccos(np.clip(cos, -1.0, 1.0)))


def joint_angles(points: np.ndarray, times: np.ndarray, up=Y_UP) -> dict[str, np.ndarray]:
    """{name: (T,) values} in `angle_names()` order (see the module docstring)."""
    points = np.asarray(points, np.float64)
    index = name_index()

    def at(name: str) -> np.ndarray:
        return points[:, index[name]]

    pelvis = 0.5 * (at("left_hip") + at("right_hip"))
    neck = at("neck")
    down = pelvis - neck  # the trunk's downward line
    left = at("left_hip") - at("right_hip")
    with np.errstate(invalid="ignore"):
        forward = _unit(np.cross(left, -down))  # left x up = forward in a right-handed frame
    out = {}
    for joint, (top, middle, bottom) in {"knee": ("hip", "knee", "ankle"),
                                         "elbow": ("shoulder", "elbow", "wrist")}.items():
        for side in SIDES:
            a, b, c = (at(f"{side}_{name}") for name in (top, middle, bottom))
            out[f"{side}_{joint}_deg"] = 180.0 - _between(a - b, c - b)
    for side in SIDES:
        thigh = at(f"{side}_knee") - at(f"{side}_hip")
        axis = _unit(left)
        sagittal = thigh - np.sum(thigh * axis, axis=-1, keepdims=True) * axis  # the thigh seen from the side
        sign = np.sign(np.sum(sagittal * forward, axis=-1))
        out[f"{side}_hip_deg"] = np.where(sign < 0, -1.0, 1.0) * _between(sagittal, down)
        out[f"{side}_shoulder_deg"] = _between(at(f"{side}_elbow") - at(f"{side}_shoulder"), down)
    out["trunk_lean_deg"] = _between(-down, np.broadcast_to(np.asarray(up, np.float64), down.shape))
    times = np.asarray(times, np.float64)
    speed = np.full(len(times), np.nan)
    if len(times) >= 2:
        speed = np.linalg.norm(np.gradient(pelvis, times, axis=0), axis=-1)
    out["root_speed_mps"] = speed
    return {name: out[name] for name in angle_names()}

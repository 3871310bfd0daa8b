"""The harness's `curve` clip: a walk whose feet stand still on the floor while planted (tests/motion_clips.py's
walks swing their legs about a root moving at an even speed, so their feet slide). The upper body comes from
tests/motion_clips.body; the legs are placed by two-bone inverse kinematics onto footholds along a quarter circle
(radius 2.5 m, 4-6 m from the camera), each foot planted flat (heel and toes at Y = 0) for 60 % of its step and
swung to its next foothold, 6 cm up, for the rest. Y-up frame, metres, as body() gives. With `step` the walk steps
up onto a platform that many metres high two thirds of the way along: the footholds from there on stand on it, the
hips rising over the step (the harness's `step` clip: two levels of contacts, the floor the one most agree on)."""

from __future__ import annotations

import numpy as np

from sapiens2_demo.pose.meta import name_index

THIGH, SHIN = 0.43, 0.42  # as tests/motion_clips.body's
STEP_S, STANCE = 0.55, 0.6  # a step's duration (s) and the share of it a foot stands still
ANKLE_UP = 0.08  # the ankle above the floor with the foot flat


def _foot(yaw: np.ndarray, side: int) -> dict:
    """Heel and toes about the ankle for a flat foot turned to `yaw` (T,): offsets (T, 3) each."""
    forward = np.stack([np.sin(yaw), 0 * yaw, np.cos(yaw)], 1)
    left = np.stack([np.cos(yaw), 0 * yaw, -np.sin(yaw)], 1)
    down = np.array([0.0, -ANKLE_UP, 0.0])
    return {"heel": down - 0.05 * forward, "big_toe": down + 0.15 * forward + side * 0.02 * left,
            "small_toe": down + 0.12 * forward + side * 0.06 * left}


def _knee(hip: np.ndarray, ankle: np.ndarray, forward: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(knee, ankle) for hip -> ankle targets (T, 3), the knee bending towards `forward`; an ankle out of reach is
    brought in along its line (the legs stay rigid)."""
    reach = ankle - hip
    distance = np.linalg.norm(reach, axis=1, keepdims=True)
    distance_ok = np.minimum(distance, (THIGH + SHIN) * 0.999)
    along = reach / distance
    ankle = hip + along * distance_ok
    # the knee: THIGH from the hip, SHIN from the ankle, off the hip-ankle line towards forward
    a = (THIGH ** 2 - SHIN ** 2 + distance_ok ** 2) / (2 * distance_ok)
    off = np.sqrt(np.maximum(THIGH ** 2 - a ** 2, 0))
    bend = forward - (forward * along).sum(1, keepdims=True) * along
    bend /= np.linalg.norm(bend, axis=1, keepdims=True)
    return hip + along * a + bend * off, ankle


def curve_walk(t: np.ndarray, body, standing, step: float = 0.0) -> np.ndarray:
    """(T, 308, 3) Y-up keypoints of the walk (see the module docstring); `body` and `standing` are
    tests/motion_clips'."""
    radius, centre = 2.5, np.array([-1.5, 0.0, -6.5])
    duration = t[-1] + 1 / 24 if len(t) else 1.0
    angle = np.pi / 2 * np.clip(t / duration, 0, 1)  # the path's angle about the centre
    path = centre + radius * np.stack([np.sin(angle), 0 * angle, np.cos(angle) * 0.6], 1)
    # the hips rise over a step once the last foot on the floor has left it (before, that leg could not reach)
    rise = np.clip((t - (2 / 3 * duration + STANCE * STEP_S)) / STEP_S, 0, 1)
    path[:, 1] = step * rise * rise * (3 - 2 * rise)

    def ground(time):  # the level a foothold placed at `time` stands on
        return np.where(time >= 2 / 3 * duration, step, 0.0)
    heading = np.gradient(path, axis=0)
    yaw = np.arctan2(heading[:, 0], heading[:, 2])
    p = standing(t, [0, 0, 0])
    p["root"] = path + [0, 0.83, 0] + np.stack([0 * t, 0.02 * np.cos(4 * np.pi * t / STEP_S), 0 * t], 1)
    p["yaw"] = yaw
    phase = 2 * np.pi * t / (2 * STEP_S)
    for sign, s in ((1, "left"), (-1, "right")):
        p[f"{s}_flex"] = -0.3 * sign * np.sin(phase)
    out = body(p, len(t))
    index = name_index()
    forward = np.stack([np.sin(yaw), 0 * yaw, np.cos(yaw)], 1)
    left_of = np.stack([np.cos(yaw), 0 * yaw, -np.sin(yaw)], 1)
    for sign, s in ((1, "left"), (-1, "right")):
        # footholds: where the path is at the middle of each stance, beside it by the hips' half width
        cycle = (t / (2 * STEP_S) + (0.0 if sign > 0 else 0.5)) % 1.0
        start = t - cycle * 2 * STEP_S  # this cycle's start time
        def foothold(time):
            k = np.clip(np.searchsorted(t, time), 0, len(t) - 1)
            return path[k] * [1, 0, 1] + [0, 1, 0] * ground(time)[:, None] + sign * 0.1 * left_of[k], yaw[k]
        here, here_yaw = foothold(start + STANCE * STEP_S)
        there, there_yaw = foothold(start + 2 * STEP_S + STANCE * STEP_S)
        swing = np.clip((cycle - STANCE) / (1 - STANCE), 0, 1)
        swing = swing * swing * (3 - 2 * swing)
        ankle = here + (there - here) * swing[:, None] + [0, ANKLE_UP, 0]
        ankle[:, 1] += 0.06 * np.sin(np.pi * swing)
        foot_yaw = here_yaw + (there_yaw - here_yaw) * swing
        hip = out[:, index[f"{s}_hip"]]
        knee, ankle = _knee(hip, ankle, forward)
        out[:, index[f"{s}_knee"]], out[:, index[f"{s}_ankle"]] = knee, ankle
        for name, offset in _foot(foot_yaw, sign).items():
            out[:, index[f"{s}_{name}"]] = ankle + offset
    return out

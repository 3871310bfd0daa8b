"""BVH (Biovision hierarchy) motion files from a solved skeleton (pose/skeleton3d.py).

HIERARCHY: the root (Hips) with Xposition Yposition Zposition Zrotation Xrotation Yrotation, every other joint
with Zrotation Xrotation Yrotation, OFFSETs in metres (Y up, facing +Z: what Blender's importer reads with its
default settings, forward -Z / up Y, at scale 1). MOTION: one line per frame, angles in degrees; a joint's
rotation is Rz(z) @ Rx(x) @ Ry(y) in the listed order, applied to its offset-child vectors (the usual BVH
convention), and a joint's position is its parent's plus the parent's accumulated rotation times its OFFSET.

With `guards` (the default) each joint gets its own rotation order: Zrotation Xrotation Yrotation unless the joint
comes near that order's gimbal lock (the middle angle near +-90 degrees, where the outer two channels swing
wildly for a small turn: a hand along the arm's axis, a raised arm, a flip) or steps a channel past 90 degrees
between frames, then the order whose largest step between frames is the smallest over the clip; and the angles
are chosen per frame among the two Euler solutions and the 360 degree turns as the ones nearest the previous
frame's, so every channel moves as little as the rotation does.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..pose.skeleton3d import SolvedMotion
from ..util import atomic_write, target

ROTATION_CHANNELS = "Zrotation Xrotation Yrotation"


def euler_zxy(rotations: np.ndarray) -> np.ndarray:
    """(..., 3, 3) rotation matrices -> (..., 3) angles (z, x, y) in radians with R = Rz(z) Rx(x) Ry(y).
    At x = +-90 degrees (gimbal lock) y is set to 0 and z takes the whole turn."""
    r = np.asarray(rotations, dtype=np.float64)
    x = np.arcsin(np.clip(r[..., 2, 1], -1.0, 1.0))
    locked = np.abs(r[..., 2, 1]) > 1 - 1e-9
    z = np.where(locked, np.arctan2(r[..., 1, 0], r[..., 0, 0]), np.arctan2(-r[..., 0, 1], r[..., 1, 1]))
    y = np.where(locked, 0.0, np.arctan2(-r[..., 2, 0], r[..., 2, 2]))
    return np.stack([z, x, y], axis=-1)


ORDERS = ("ZXY", "XYZ", "YZX", "XZY", "ZYX", "YXZ")
SAFE_MIDDLE = np.radians(60)  # ZXY is kept while its middle angle stays within this


def euler(rotations: np.ndarray, order: str) -> np.ndarray:
    """(..., 3, 3) -> (..., 3) angles in radians (a, b, c) with R = R_order[0](a) R_order[1](b) R_order[2](c)."""
    r = np.asarray(rotations, dtype=np.float64)
    i, j, k = ("XYZ".index(axis) for axis in order)
    sign = 1.0 if (i, j, k) in ((0, 1, 2), (1, 2, 0), (2, 0, 1)) else -1.0
    b = np.arcsin(np.clip(sign * r[..., i, k], -1.0, 1.0))
    a = np.arctan2(-sign * r[..., j, k], r[..., k, k])
    c = np.arctan2(-sign * r[..., i, j], r[..., i, i])
    locked = np.abs(r[..., i, k]) > 1 - 1e-9  # a and c turn about one axis: c = 0, a takes it all
    if locked.any():
        a = np.where(locked, np.arctan2(sign * r[..., k, j], r[..., j, j]), a)
        c = np.where(locked, 0.0, c)
    return np.stack([a, b, c], axis=-1)


def continuous_euler(rotations: np.ndarray, order: str) -> np.ndarray:
    """(T, ..., 3, 3) -> (T, ..., 3) angles: per frame the Euler solution (of the two, each angle give or take 360
    degrees) nearest the previous frame's."""
    first = euler(rotations, order)
    second = first + np.array([np.pi, 0.0, np.pi])
    second[..., 1] = np.pi - first[..., 1]
    out = first.copy()
    for t in range(1, len(first)):
        options = []
        for candidate in (first[t], second[t]):
            unwrapped = candidate + 2 * np.pi * np.round((out[t - 1] - candidate) / (2 * np.pi))
            options.append(unwrapped)
        use_second = np.abs(options[1] - out[t - 1]).sum(-1) < np.abs(options[0] - out[t - 1]).sum(-1)
        out[t] = np.where(use_second[..., None], options[1], options[0])
    return out


MAX_STEP = np.radians(90)  # a channel never steps further between two frames (an Euler flip past it)


def rotation_orders(local: np.ndarray) -> tuple[list[str], np.ndarray]:
    """(T, J, 3, 3) each joint's rotations -> per joint its channel order, and (T, J, 3) its continuous angles
    (radians). ZXY while its middle angle keeps within SAFE_MIDDLE of 0 and no channel steps past MAX_STEP;
    else the order whose largest step between frames is the smallest over the clip: a flip, or a turn near one
    order's gimbal lock, swings the outer two channels of that order by up to 180 degrees in a frame."""
    local = np.asarray(local, np.float64)
    angles = {order: continuous_euler(local, order) for order in ORDERS}  # each (T, J, 3)
    steps = {order: (np.abs(np.diff(a, axis=0)).max(axis=(0, 2)) if len(a) > 1 else np.zeros(a.shape[1]))
             for order, a in angles.items()}
    usual = (np.abs(angles["ZXY"][..., 1]).max(axis=0) <= SAFE_MIDDLE) & (steps["ZXY"] <= MAX_STEP)
    orders = [("ZXY" if usual[j] else min(ORDERS, key=lambda o: steps[o][j])) for j in range(local.shape[1])]
    chosen = np.stack([angles[order][:, j] for j, order in enumerate(orders)], axis=1)
    return orders, chosen


def _children(motion: SolvedMotion) -> list[list[int]]:
    children = [[] for _ in motion.names]
    for i, parent in enumerate(motion.parents):
        if parent >= 0:
            children[parent].append(i)
    return children


def _number(value: float) -> str:
    text = f"{value:.6f}".rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def _vector(values) -> str:
    return " ".join(_number(float(v)) for v in values)


def bvh_text(motion: SolvedMotion, frame_time: float, guards: bool = True) -> str:
    """The whole file as text (see the module docstring)."""
    if not (math.isfinite(frame_time) and frame_time > 0):
        raise ValueError(f"frame time must be a positive number of seconds, got {frame_time}")
    children = _children(motion)
    if guards:
        orders, continuous = rotation_orders(motion.local)
    else:
        orders = ["ZXY"] * len(motion.names)
    lines = ["HIERARCHY"]

    def joint(i: int, depth: int) -> None:
        pad = "  " * depth
        lines.append(f"{pad}{'ROOT' if motion.parents[i] < 0 else 'JOINT'} {motion.names[i]}")
        lines.append(pad + "{")
        lines.append(f"{pad}  OFFSET {_vector(motion.offsets[i])}")
        rotation = " ".join(f"{axis}rotation" for axis in orders[i])
        channels = f"6 Xposition Yposition Zposition {rotation}" if motion.parents[i] < 0 else f"3 {rotation}"
        lines.append(f"{pad}  CHANNELS {channels}")
        for child in children[i]:
            joint(child, depth + 1)
        end = motion.ends[i]
        if end is None and not children[i]:
            end = np.zeros(3)  # every leaf needs an End Site
        if end is not None:
            lines.extend([f"{pad}  End Site", f"{pad}  {{", f"{pad}    OFFSET {_vector(end)}", f"{pad}  }}"])
        lines.append(pad + "}")

    joint(0, 0)
    # Channels in the hierarchy's depth-first order; angles unwrapped over time (adding 360 degrees to one of
    # the three angles gives the same rotation) so players interpolating between frames never spin around.
    order = []

    def walk(i: int) -> None:
        order.append(i)
        for child in children[i]:
            walk(child)

    walk(0)
    if guards:
        angles = np.degrees(continuous[:, order])
    else:
        angles = np.degrees(np.unwrap(euler_zxy(motion.local[:, order]), axis=0))  # (T, J, 3)
    values = np.concatenate([motion.root, angles.reshape(len(angles), -1)], axis=1)
    lines += ["MOTION", f"Frames: {len(values)}", f"Frame Time: {frame_time:.8f}"]
    lines += [" ".join(_number(v) for v in row) for row in values.tolist()]
    return "\n".join(lines) + "\n"


def write_bvh(motion: SolvedMotion, folder, name: str, frame_time: float, guards: bool = True) -> Path:
    text, path = bvh_text(motion, frame_time, guards), target(folder, name)
    with atomic_write(path) as partial:  # a reader never sees a half-written file
        partial.write_text(text)
    return path

"""The floor beside the people's feet, read from the pointmap: what settles the floor where the feet alone leave it
loose (a person standing on the spot; the few foot samples a heavy depth error moves), and the only floor one photo
has.

`floor_pixels(points, foreground, pose)`: up to MAX_PIXELS of the pointmap's points where the body-part segmentation
saw nobody, in a band about each person's feet (from a little above their lowest foot keypoint to BAND_BELOW of
their box's height under it, BAND_SIDE of its width either side): never a body pixel. A video's frames each keep
theirs (a few kB) for the clip's floor (world.find_world). `photo_floor(samples, feet)`: one photo's floor, the
plane most of the samples lie on (world's RANSAC, PIXEL_INLIER), within world.MAX_TILT of the image's up, kept when
the lowest foot stands within NEAR_FEET of it.
"""

from __future__ import annotations

import numpy as np

from .meta import name_index

MAX_PIXELS = 300  # a frame's samples, spread evenly over its bands
MIN_PIXELS = 50  # fewer, and there is no floor to read
PIXEL_INLIER = 0.03  # m: a pointmap's floor is noisier than a fitted foot
MIN_SHARE = 0.3  # of the samples on the plane: fewer, and the band saw something else (a wall, furniture)
BAND_ABOVE, BAND_BELOW, BAND_SIDE = 0.05, 0.25, 0.5  # shares of a person's box height (above, below), width
NEAR_FEET = 0.15  # m: one photo's lowest foot this near the plane stands on it
MIN_SCORE = 0.3
FEET = [f"{side}_{part}" for side in ("left", "right") for part in ("ankle", "heel", "big_toe", "small_toe")]


def floor_pixels(points: np.ndarray | None, foreground: np.ndarray | None, pose) -> np.ndarray | None:
    """(M, 3) float32 pointmap points on the background about the people's feet (see the module docstring); None
    without a pointmap, a segmentation or a foot keypoint."""
    if points is None or foreground is None or not pose.num_people:
        return None
    points, foreground = np.asarray(points), np.asarray(foreground, bool)
    height, width = points.shape[:2]
    if foreground.shape != (height, width):
        return None
    index = name_index()
    columns = [index[k] for k in FEET if index[k] < pose.keypoints.shape[1]]
    band = np.zeros((height, width), bool)
    for person in range(pose.num_people):
        feet = np.asarray(pose.keypoints[person][columns], np.float64)
        sure = (np.asarray(pose.keypoint_scores[person][columns]) >= MIN_SCORE) & np.isfinite(feet).all(1)
        if not sure.any():
            continue
        feet = feet[sure]
        x1, y1, x2, y2 = np.asarray(pose.boxes[person], np.float64)
        box_w, box_h = max(x2 - x1, 1.0), max(y2 - y1, 1.0)
        top, bottom = feet[:, 1].max() - BAND_ABOVE * box_h, feet[:, 1].max() + BAND_BELOW * box_h
        left, right = feet[:, 0].min() - BAND_SIDE * box_w, feet[:, 0].max() + BAND_SIDE * box_w
        rows = slice(int(np.clip(top, 0, height)), int(np.clip(np.ceil(bottom), 0, height)))
        cols = slice(int(np.clip(left, 0, width)), int(np.clip(np.ceil(right), 0, width)))
        band[rows, cols] = True
    ys, xs = np.nonzero(band & ~foreground)
    if not len(ys):
        return None
    picked = np.linspace(0, len(ys) - 1, min(MAX_PIXELS, len(ys))).round().astype(np.int64)
    samples = np.asarray(points[ys[picked], xs[picked]], np.float32)
    samples = samples[np.isfinite(samples).all(1) & (samples[:, 2] > 0)]
    return samples if len(samples) else None


def floor_plane(samples: np.ndarray | None, image_up: np.ndarray) -> tuple[np.ndarray, float, np.ndarray] | None:
    """(normal, offset, inliers) of the plane most floor pixels lie on, or None (too few, or too few agree)."""
    from .world import plane

    if samples is None or len(samples) < MIN_PIXELS:
        return None
    found = plane(np.asarray(samples, np.float64), np.random.default_rng(0), image_up, PIXEL_INLIER)
    return found if found is not None and found[2].mean() >= MIN_SHARE else None


def photo_floor(samples: np.ndarray | None, feet: np.ndarray) -> tuple[np.ndarray, float] | None:
    """One photo's floor (up (3,) in the camera frame, offset: up . x + offset = 0), or None: no plane, or the
    lowest of `feet` ((N, 3) the lifted foot keypoints) not within NEAR_FEET of it."""
    found = floor_plane(samples, np.array([0.0, -1.0, 0.0]))
    feet = np.asarray(feet, np.float64).reshape(-1, 3)
    feet = feet[np.isfinite(feet).all(1)]
    if found is None or not len(feet):
        return None
    up, offset, _ = found
    lowest = float((feet @ up + offset).min())
    return (up, offset) if abs(lowest) <= NEAR_FEET else None

"""The floor beside the people's feet, read from the pointmap: what settles the floor where the feet alone leave it
loose (a person standing on the spot; the few foot samples a heavy depth error moves), and the only floor one photo
has.

`floor_pixels(points, foreground, pose)`: the pointmap's points on a GRID_ROWS x GRID_COLS grid over a band about
each person's feet (from a little above their lowest foot keypoint to BAND_BELOW of their box's height under it,
BAND_SIDE of its width either side), kept where the body-part segmentation saw nobody (never a body pixel), up to
MAX_PIXELS a frame. `floor_on_device` is the same grid where the device road's pointmaps and masks are, riding in
the keypoints' copy back (160 points, 1.9 kB, a person a frame), so both roads give the same samples. A video's
frames each keep theirs for the clip's floor (world.find_world). `photo_floor(samples, feet)`: one photo's floor,
the plane most of the samples lie on (world's RANSAC, PIXEL_INLIER), within world.MAX_TILT of the image's up, kept
when the lowest foot stands within NEAR_FEET of it.
"""

from __future__ import annotations

import numpy as np

from .. import ledger
from .meta import name_index

MAX_PIXELS = 300  # a frame's samples, spread evenly over its people's
MIN_PIXELS = 50  # fewer, and there is no floor to read
PIXEL_INLIER = 0.03  # m: a pointmap's floor is noisier than a fitted foot
MIN_SHARE = 0.3  # of the samples on the plane: fewer, and the band saw something else (a wall, furniture)
BAND_ABOVE, BAND_BELOW, BAND_SIDE = 0.05, 0.25, 0.5  # shares of a person's box height (above, below), width
GRID_ROWS, GRID_COLS = 8, 20  # a person's band sampled at these cells' centres
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
    sizes = np.tile([height, width], (pose.num_people, 1))
    x, y = band_grid(np.asarray(pose.keypoints), np.asarray(pose.keypoint_scores), np.asarray(pose.boxes), sizes)
    inside = x >= 0
    samples = np.full((len(x), 3), np.nan, np.float32)
    samples[inside] = points[y[inside], x[inside]]
    samples[inside & foreground[y.clip(0), x.clip(0)]] = np.nan
    return kept(samples)


def band_grid(keypoints: np.ndarray, scores: np.ndarray, boxes: np.ndarray, sizes: np.ndarray
              ) -> tuple[np.ndarray, np.ndarray]:
    """(x, y) int64 pixels (P * GRID_ROWS * GRID_COLS,) of each of P people's band, -1 off their image (`sizes`:
    (P, 2) its height and width) or where they have no sure foot keypoint; the float64 steps `floor_on_device`
    takes, so both give the same pixels."""
    columns = [name_index()[k] for k in FEET if name_index()[k] < keypoints.shape[1]]
    feet = keypoints[:, columns].astype(np.float64)
    sure = (scores[:, columns] >= MIN_SCORE) & np.isfinite(feet).all(-1)
    lowest = np.where(sure, feet[..., 1], -np.inf).max(1)
    left = np.where(sure, feet[..., 0], np.inf).min(1)
    right = np.where(sure, feet[..., 0], -np.inf).max(1)
    boxes = np.asarray(boxes, np.float64).reshape(-1, 4)
    box_w, box_h = np.maximum(boxes[:, 2] - boxes[:, 0], 1.0), np.maximum(boxes[:, 3] - boxes[:, 1], 1.0)
    top, bottom = lowest - BAND_ABOVE * box_h, lowest + BAND_BELOW * box_h
    left, right = left - BAND_SIDE * box_w, right + BAND_SIDE * box_w
    rows, cols = (np.arange(GRID_ROWS) + 0.5) / GRID_ROWS, (np.arange(GRID_COLS) + 0.5) / GRID_COLS
    with np.errstate(invalid="ignore"):  # nobody's feet: inf - inf
        y = np.floor(top[:, None] + (bottom - top)[:, None] * rows[None])[:, :, None].repeat(GRID_COLS, 2)
        x = np.floor(left[:, None] + (right - left)[:, None] * cols[None])[:, None, :].repeat(GRID_ROWS, 1)
        inside = (sure.any(1)[:, None, None] & (x >= 0) & (x < sizes[:, 1, None, None]) & (y >= 0)
                  & (y < sizes[:, 0, None, None]))
    return (np.where(inside, x, -1).astype(np.int64).reshape(-1), np.where(inside, y, -1).astype(np.int64).reshape(-1))


def kept(samples: np.ndarray) -> np.ndarray | None:
    """A frame's grid samples ((N, 3), NaN where not floor), the usable ones, at most MAX_PIXELS spread evenly."""
    samples = np.asarray(samples, np.float32).reshape(-1, 3)
    samples = samples[np.isfinite(samples).all(1) & (samples[:, 2] > 0)]
    if len(samples) > MAX_PIXELS:
        samples = samples[np.linspace(0, len(samples) - 1, MAX_PIXELS).round().astype(np.int64)]
    return samples if len(samples) else None


def floor_on_device(keypoints, scores, counts: list[int], boxes: np.ndarray, pointmaps: list, masks: list):
    """`floor_pixels`' grid for every frame's people where the (C, K, 2) image keypoints and (C, K) scores are
    (`counts` people a frame, `boxes` (C, 4) theirs on the host), in each frame's (H, W, 3) pointmap and (H, W)
    person mask there -> a (C * GRID_ROWS * GRID_COLS, 3) float32 tensor there, NaN off the floor's band or on a
    person (`floor_from_device` reads it). The grid for all at once; per frame its two gathers."""
    import torch

    device = keypoints.device
    frames = [i for i, n in enumerate(counts) for _ in range(n)]
    sizes = np.array([pointmaps[i].shape[:2] for i in frames], np.float64).reshape(-1, 2)
    known = ledger.to_device(np.concatenate([np.asarray(boxes, np.float64).reshape(-1, 4), sizes], 1), device,
                             non_blocking=True)  # pinned: a copy from pageable memory would wait for all queued
    boxes_d, sizes_d = known[:, :4], known[:, 4:]
    columns = [name_index()[k] for k in FEET if name_index()[k] < keypoints.shape[1]]
    feet = keypoints[:, columns].double()
    sure = (scores[:, columns] >= MIN_SCORE) & torch.isfinite(feet).all(-1)
    lowest = torch.where(sure, feet[..., 1], -np.inf).amax(1)
    left = torch.where(sure, feet[..., 0], np.inf).amin(1)
    right = torch.where(sure, feet[..., 0], -np.inf).amax(1)
    box_w = (boxes_d[:, 2] - boxes_d[:, 0]).clamp_min(1.0)
    box_h = (boxes_d[:, 3] - boxes_d[:, 1]).clamp_min(1.0)
    top, bottom = lowest - BAND_ABOVE * box_h, lowest + BAND_BELOW * box_h
    left, right = left - BAND_SIDE * box_w, right + BAND_SIDE * box_w
    rows = (torch.arange(GRID_ROWS, device=device, dtype=torch.float64) + 0.5) / GRID_ROWS
    cols = (torch.arange(GRID_COLS, device=device, dtype=torch.float64) + 0.5) / GRID_COLS
    y = torch.floor(top[:, None] + (bottom - top)[:, None] * rows[None])[:, :, None].expand(-1, -1, GRID_COLS)
    x = torch.floor(left[:, None] + (right - left)[:, None] * cols[None])[:, None, :].expand(-1, GRID_ROWS, -1)
    inside = (sure.any(1)[:, None, None] & (x >= 0) & (x < sizes_d[:, 1, None, None]) & (y >= 0)
              & (y < sizes_d[:, 0, None, None]))
    x = torch.where(inside, x, 0.0).long().reshape(len(frames), -1)
    y = torch.where(inside, y, 0.0).long().reshape(len(frames), -1)
    inside = inside.reshape(len(frames), -1)
    parts, first = [], 0
    for i, n in enumerate(counts):
        if n:
            take = slice(first, first + n)
            points = pointmaps[i][y[take], x[take]]  # (n, G, 3)
            floor = inside[take] & ~masks[i][y[take], x[take]]
            parts.append(torch.where(floor[..., None], points.float(), float("nan")).reshape(-1, 3))
            first += n
    if not parts:
        return torch.zeros((0, 3), dtype=torch.float32, device=device)
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def floor_from_device(poses: list, sampled: np.ndarray) -> list[np.ndarray | None]:
    """`floor_on_device`'s answer, copied back: each pose's floor pixels, as `floor_pixels` gives them."""
    out, first, size = [], 0, GRID_ROWS * GRID_COLS
    for pose in poses:
        n = pose.num_people * size
        out.append(kept(sampled[first:first + n]) if n else None)
        first += n
    return out


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

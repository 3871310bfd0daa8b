"""3D keypoints: each 2D keypoint looked up in the pointmap of the same image.

A keypoint's 3D position is the per-axis median of the valid pointmap samples in a (2w+1)^2 window around
its rounded pixel (clipped to the image); valid = finite, z > 0 and inside the mask. The median shrugs off
a few stray samples; a window that straddles a depth jump (hand in front of the torso, the silhouette edge)
is refused instead, since no single depth there is right. A keypoint is not available when:
  - its score is below `min_score`, or its coordinates are not finite;
  - its own pixel is outside the image or the mask;
  - fewer than 25 % of the window's in-image pixels are valid;
  - the valid samples' depth spread (interquartile range of z) exceeds `max_spread` metres;
  - it lies more than `max_depth_gap` metres in front of the person's depth (the 75th percentile of their lifted
    keypoints' depths): a keypoint hidden behind someone else reads the depth of whoever covers it, and no pose
    puts a joint that far before the rest of the body; or it lies in the box of someone nearer and at their depth
    (None: neither check; see `drop_in_front`).
Lifted points are in the camera frame of the input image (x right, y down, z forward, metres), NaN where
not available.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .. import ledger
from ..results import PointmapResult, PoseResult, resolve_mask
from .meta import NUM_KEYPOINTS

MIN_VALID_FRACTION = 0.25
MAX_DEPTH_GAP = 0.8  # metres: an outstretched arm reaches ~0.7 m in front of the torso
BODY_QUANTILE = 0.75  # the person's depth: whoever covers part of them is in front, so a far quantile is theirs
OCCLUDER_GAP = 0.4  # metres: someone this much nearer can hide a person; a keypoint this near their depth is theirs


@dataclass
class Pose3DResult:
    points: np.ndarray  # (N, K, 3) float32 metres, camera frame (x right, y down, z forward); NaN = not available
    scores: np.ndarray  # (N, K) float32, the 2D keypoint scores
    available: np.ndarray  # (N, K) bool
    track_ids: np.ndarray | None = None  # (N,) int64, copied from the PoseResult (video); -1 = not tracked
    # (N, K, 3) where a keypoint was dropped as covered by someone in front: the point read there, which lies on
    # the keypoint's ray (its depth is the cover's); NaN elsewhere. The mocap path places it along that ray.
    covered: np.ndarray | None = None
    # (h, w) bool where the body-part segmentation saw nobody, at most camera_rotation.WORK_WIDTH across (the host
    # road sets it; the device road keeps the labels there): the mocap export reads the camera's turn there
    background: np.ndarray | None = None
    # (M, 3) the pointmap's points on the background about the people's feet (floor_pixels.py; the host road sets
    # it): the clip's floor (world.py) and one photo's (export/pose3d.py) read them
    floor: np.ndarray | None = None
    # the pointmap's focal length in the image's pixels, read off the lifted points and the 2D keypoints they were
    # lifted at (before the video's smoother moves those: its lag made a pan's turn 1 % short), or None
    focal: float | None = None

    @property
    def num_people(self) -> int:
        return int(self.points.shape[0])


def _quantile(sorted_rows: np.ndarray, counts: np.ndarray, q: float) -> np.ndarray:
    """Per row, the q-quantile (linear interpolation, as np.percentile) of its first `counts` values, which
    are sorted. Several times faster than np.nanpercentile on many short rows."""
    position = q * (counts - 1)
    below = np.floor(position).astype(np.int64)
    above = np.minimum(below + 1, counts - 1)
    rows = np.arange(len(counts))
    low, high = sorted_rows[rows, below], sorted_rows[rows, above]
    return low + (high - low) * (position - below)


def lift_keypoints(pose: PoseResult, pointmap: PointmapResult, mask: np.ndarray | None = None, *,
                   window: int = 5, min_score: float = 0.3, max_spread: float = 0.1,
                   max_depth_gap: float | None = MAX_DEPTH_GAP) -> Pose3DResult:
    """Pose3DResult for every person and keypoint of `pose`; `mask` defaults to `pointmap.mask`."""
    points = np.asarray(pointmap.points, dtype=np.float32)
    height, width = points.shape[:2]
    mask = resolve_mask(pointmap, mask, (height, width))
    keypoints, scores, cx, cy = _centres(pose, (height, width), min_score)

    valid_map = np.isfinite(points).all(axis=2)
    valid_map[valid_map] = points[valid_map][:, 2] > 0
    if mask is not None:
        valid_map &= mask
    inside = cx >= 0
    available = inside.copy()
    available[inside] &= valid_map[cy[inside], cx[inside]]

    # Gather every window at once: (M, S) pixel coordinates, S = (2w + 1)^2 offsets.
    offset_y, offset_x = np.mgrid[-window:window + 1, -window:window + 1].reshape(2, -1)
    sample_x, sample_y = cx[:, None] + offset_x[None], cy[:, None] + offset_y[None]
    in_image = (sample_x >= 0) & (sample_x < width) & (sample_y >= 0) & (sample_y < height)
    sx, sy = sample_x.clip(0, width - 1), sample_y.clip(0, height - 1)
    sample_ok = in_image & valid_map[sy, sx]
    enough = sample_ok.sum(axis=1) >= MIN_VALID_FRACTION * np.maximum(in_image.sum(axis=1), 1)
    available &= enough

    lifted = np.full((len(cx), 3), np.nan, dtype=np.float32)
    candidates = np.flatnonzero(available)
    if candidates.size:
        samples = points[sy[candidates], sx[candidates]].astype(np.float64)  # (R, S, 3)
        samples[~sample_ok[candidates]] = np.inf  # sorts after every valid sample
        samples.sort(axis=1)
        valid_count = sample_ok[candidates].sum(axis=1)
        spread = _quantile(samples[..., 2], valid_count, 0.75) - _quantile(samples[..., 2], valid_count, 0.25)
        steady = spread <= max_spread  # a wider spread means the window straddles a depth jump
        available[candidates[~steady]] = False
        median = np.stack([_quantile(samples[..., axis], valid_count, 0.5) for axis in range(3)], axis=1)
        lifted[candidates[steady]] = median[steady]
    return _lifted(pose, keypoints, scores, lifted, available, max_depth_gap)


def _centres(pose: PoseResult, image_hw: tuple[int, int], min_score: float):
    """(N, K, 2) float64 keypoints, (N, K) float32 scores, and each keypoint's rounded pixel (cx, cy), flat: -1 for
    a keypoint that cannot be available whatever the pointmap says (not finite, outside the image, too unsure)."""
    height, width = image_hw
    if tuple(pose.image_size) != (height, width):
        raise ValueError(f"pose image {tuple(pose.image_size)} and pointmap {(height, width)} differ in size")
    people = pose.num_people
    keypoints = np.asarray(pose.keypoints, dtype=np.float64)
    # No people may come as (0, 0, 2): still answer with the usual keypoint count.
    count = keypoints.shape[1] if keypoints.ndim == 3 and (people or keypoints.shape[1]) else NUM_KEYPOINTS
    keypoints = keypoints.reshape(people, count, 2)
    scores = np.asarray(pose.keypoint_scores, dtype=np.float32).reshape(people, count)
    flat_xy = keypoints.reshape(-1, 2)
    finite = np.isfinite(flat_xy).all(axis=1)
    # clipped so far-off (or huge) coordinates stay outside the image without overflowing the int cast
    centre = np.rint(np.where(finite[:, None], flat_xy, -1)).clip(-1, max(height, width)).astype(np.int64)
    cx, cy = centre[:, 0], centre[:, 1]
    usable = finite & (cx >= 0) & (cx < width) & (cy >= 0) & (cy < height) & (scores.reshape(-1) >= min_score)
    return keypoints, scores, np.where(usable, cx, -1), np.where(usable, cy, -1)


def _lifted(pose, keypoints, scores, lifted, available, max_depth_gap) -> Pose3DResult:
    """The flat (M, 3) lifted points and (M,) availability as a Pose3DResult, keypoints hidden by others dropped."""
    people, count = scores.shape
    lifted, available = lifted.reshape(people, count, 3), available.reshape(people, count)
    covered = None
    if max_depth_gap is not None:
        read = lifted.copy()
        dropped = drop_in_front(lifted, available, max_depth_gap, keypoints=keypoints, boxes=pose.boxes)
        covered = np.where(dropped[..., None], read, np.nan).astype(np.float32)
    track_ids = None if pose.track_ids is None else np.asarray(pose.track_ids, dtype=np.int64).copy()
    return Pose3DResult(points=lifted, scores=scores.copy(), available=available, track_ids=track_ids,
                        covered=covered, focal=focal_length(keypoints, lifted, available, pose.image_size))


def focal_length(pixels: np.ndarray, points: np.ndarray, available: np.ndarray, image_size) -> float | None:
    """The pointmap's focal length (pixels) from lifted points (N, K, 3) and the pixels (N, K, 2) they were read at,
    the principal point at the image's centre: the median over keypoints off the centre of (u - c) . (x, y) / z over
    |(x, y) / z|^2; None with under 5 keypoints 3 degrees off the centre."""
    points, pixels = np.asarray(points, np.float64), np.asarray(pixels, np.float64)[..., :2]
    ok = np.asarray(available, bool) & np.isfinite(points).all(-1) & np.isfinite(pixels).all(-1)
    ok[ok] = points[ok][:, 2] > 0.1
    slope = points[ok][:, :2] / points[ok][:, 2:]
    off = pixels[ok] - (np.array(image_size[::-1], np.float64) - 1) / 2
    spread = (slope ** 2).sum(1)
    far = spread > 0.05 ** 2  # a keypoint this far off the centre gives the focal
    if far.sum() < 5:
        return None
    return float(np.median((off * slope).sum(1)[far] / spread[far]))


# -- the same where the pointmap is (the device road: video with motion_3d) ------------------------------------
# The keypoints' pixels cross up (8 bytes a keypoint, without waiting), the windows are read there, and only each
# keypoint's point and availability cross back (16 bytes): not the 25 MB pointmap of a 1080p frame.

def _sample_frames(pointmaps: list, masks: list, rows: list[int], cx, cy, *, window: int = 5,
                   max_spread: float = 0.1):
    """`lift_keypoints`' sampling where the frames' (H, W, 3) float32 pointmap tensors are (`masks`: (H, W) bool tensors
    there, or None), for frames of one size in one pass: the (M,) long pixel tensors `cx`, `cy` there (`_centres`':
    -1 = not available) hold rows[f] keypoints of frame f, in order. -> an (M, 4) float32 tensor there, per keypoint
    its median point (NaN where not available) and 1.0 where available. The same float64 steps as the host's (a sort,
    then the quantiles' interpolation), so its answer is the host's to the bit. Only what reads a frame's own maps
    runs per frame (its valid map, three gathers); the sort and the quantiles run once for all (on CUDA each
    operation is a kernel launch: ~90 a frame became ~10)."""
    import torch

    height, width = int(pointmaps[0].shape[0]), int(pointmaps[0].shape[1])
    device = pointmaps[0].device
    offsets = torch.arange(-window, window + 1, device=device)
    offset_y, offset_x = (grid.reshape(-1) for grid in torch.meshgrid(offsets, offsets, indexing="ij"))  # np.mgrid's
    sample_x, sample_y = cx[:, None] + offset_x[None], cy[:, None] + offset_y[None]
    in_image = (sample_x >= 0) & (sample_x < width) & (sample_y >= 0) & (sample_y < height)
    sx, sy = sample_x.clamp(0, width - 1), sample_y.clamp(0, height - 1)
    px, py = cx.clamp(0, width - 1), cy.clamp(0, height - 1)
    own, ok, picked, first = [], [], [], 0
    for points, mask, n in zip(pointmaps, masks, rows):
        valid_map = torch.isfinite(points).all(dim=2) & (points[..., 2] > 0)
        if mask is not None:
            valid_map = valid_map & mask
        take = slice(first, first + n)
        own.append(valid_map[py[take], px[take]])
        ok.append(valid_map[sy[take], sx[take]])
        picked.append(points[sy[take], sx[take]])
        first += n
    available = (cx >= 0) & _joined(own)
    sample_ok = in_image & _joined(ok)
    valid_count = sample_ok.sum(dim=1)
    available &= valid_count >= MIN_VALID_FRACTION * in_image.sum(dim=1).clamp_min(1)

    samples = _joined(picked).double().masked_fill_(~sample_ok[..., None], float("inf")).sort(dim=1).values
    quartiles = _quartiles_on_device(samples, valid_count)  # (M, 3 quantiles, 3 axes)
    spread = quartiles[:, 2, 2] - quartiles[:, 0, 2]
    available &= spread <= max_spread  # a wider spread means the window straddles a depth jump
    lifted = torch.where(available[:, None], quartiles[:, 1].float(), float("nan"))
    return torch.cat([lifted, available[:, None].float()], dim=1)


def _joined(parts: list):
    import torch

    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _quartiles_on_device(sorted_rows, counts):
    """`_quantile` in torch, float64, at 0.25, 0.5 and 0.75 of each axis of (M, S, 3) rows sorted per axis -> (M, 3, 3):
    the same float64 steps per value as the host's, for every quantile and axis in one gather; rows with no valid
    value give an arbitrary number (they are not available)."""
    import torch

    last = counts - 1
    steps = last.double()
    position = torch.stack([steps * 0.25, steps * 0.5, steps * 0.75], dim=1)  # (M, 3)
    below = position.floor().long().clamp_min(0)
    above = torch.minimum(below + 1, last.clamp_min(0)[:, None])
    axes = sorted_rows.shape[2]
    low = sorted_rows.gather(1, below[:, :, None].expand(-1, -1, axes))
    high = sorted_rows.gather(1, above[:, :, None].expand(-1, -1, axes))
    return low + (high - low) * (position - below)[:, :, None]


def nobody_lifted() -> Pose3DResult:
    """A frame with nobody in it, lifted."""
    return Pose3DResult(points=np.zeros((0, NUM_KEYPOINTS, 3), np.float32),
                        scores=np.zeros((0, NUM_KEYPOINTS), np.float32), available=np.zeros((0, NUM_KEYPOINTS), bool))


def lift_on_device(poses: list[PoseResult], pointmaps: list, masks: list, *, min_score: float = 0.3
                   ) -> list[Pose3DResult]:
    """`lift_keypoints` of each pose in its frame's (H, W, 3) pointmap and (H, W) bool mask tensors, where they are:
    every frame's keypoints' pixels up in one copy (pinned, without waiting), sampled there (`_sample_frames`), the
    answers back in one copy (`nobody_lifted` for a frame with nobody)."""
    import torch

    lifted = [nobody_lifted() for _ in poses]
    busy = [i for i, pose in enumerate(poses) if pose.num_people]
    if not busy:
        return lifted
    pixels = [np.stack(_centres(poses[i], tuple(pointmaps[i].shape[:2]), min_score)[2:]) for i in busy]
    up = torch.from_numpy(np.concatenate(pixels, axis=1).astype(np.int32))
    if pointmaps[busy[0]].device.type == "cuda":  # a copy from pageable memory would wait for everything queued
        up = up.pin_memory()
    centres = ledger.to_device(up, pointmaps[busy[0]].device, non_blocking=True).long()
    counts = [p.shape[1] for p in pixels]
    ends = np.cumsum(counts)
    starts = ends - counts
    sampled = [_sample_frames([pointmaps[i] for i in run], [masks[i] for i in run], [counts[k] for k in ks],
                              *centres[:, starts[ks[0]]:ends[ks[-1]]])  # the run's keypoints, one after another
               for run, ks in _runs_of_one_size(busy, pointmaps)]
    host = _joined(sampled).cpu().numpy()  # the one copy back
    for i, p, end in zip(busy, pixels, ends):
        lifted[i] = lifted_from(poses[i], host[end - p.shape[1]:end])
    return lifted


def sample_people_on_device(keypoints, scores, counts: list[int], pointmaps: list, masks: list, *,
                            min_score: float = 0.3):
    """`lift_on_device`'s sampling from the keypoints where they are, before they cross: the (C, K, 2) float32 image
    keypoints and (C, K) scores of every frame's people in order (`counts` a frame) in each frame's (H, W, 3) pointmap
    and (H, W) mask -> an (M, 4) tensor there, `_sample_frames`' answer for every keypoint of every frame with
    people, in order (`lifted_from_sampled` reads it). Frames of one size (a video's) in one pass."""
    import torch

    busy = [i for i, n in enumerate(counts) if n]
    if not busy:
        return torch.zeros((0, 4), dtype=torch.float32, device=keypoints.device)
    keypoints_per_person = int(keypoints.shape[1])
    firsts = np.cumsum([0, *counts])
    parts = []
    for run, _ in _runs_of_one_size(busy, pointmaps):
        height, width = pointmaps[run[0]].shape[:2]
        take = slice(int(firsts[run[0]]), int(firsts[run[-1] + 1]))  # its frames' people (any frame between has nobody)
        xy, sure = keypoints[take].reshape(-1, 2), scores[take].reshape(-1)
        finite = torch.isfinite(xy).all(dim=1)  # then _centres' steps: rounded (half to even), clipped, cast
        centre = torch.where(finite[:, None], xy.double(), -1.0).round().clamp(-1, max(height, width)).long()
        cx, cy = centre[:, 0], centre[:, 1]
        usable = finite & (cx >= 0) & (cx < width) & (cy >= 0) & (cy < height) & (sure >= min_score)
        parts.append(_sample_frames([pointmaps[i] for i in run], [masks[i] for i in run],
                                    [counts[i] * keypoints_per_person for i in run],
                                    torch.where(usable, cx, -1), torch.where(usable, cy, -1)))
    return _joined(parts)


def _runs_of_one_size(frames: list[int], pointmaps: list):
    """`frames` (indices into pointmaps, in order) in runs of neighbours in that list with maps of one size: (the run's
    frame indices, their positions in `frames`). A video's frames make one run."""
    run: list[int] = []
    for k, i in enumerate(frames):
        if run and tuple(pointmaps[i].shape[:2]) != tuple(pointmaps[frames[run[-1]]].shape[:2]):
            yield [frames[j] for j in run], run
            run = []
        run.append(k)
    if run:
        yield [frames[j] for j in run], run


def lifted_from_sampled(poses: list[PoseResult], sampled: np.ndarray) -> list[Pose3DResult]:
    """`sample_people_on_device`'s answer, copied back, as `lift_on_device` gives it."""
    lifted, first = [], 0
    for pose in poses:
        if not pose.num_people:
            lifted.append(nobody_lifted())
            continue
        size = int(np.prod(np.shape(pose.keypoints)[:2]))
        lifted.append(lifted_from(pose, sampled[first:first + size]))
        first += size
    return lifted


def lifted_from(pose: PoseResult, sampled: np.ndarray, *, max_depth_gap: float | None = MAX_DEPTH_GAP
                ) -> Pose3DResult:
    """`_sample_frames`' (M, 4) answer for `pose`, copied back, as `lift_keypoints` gives it."""
    keypoints, scores, _, _ = _centres(pose, tuple(pose.image_size), 0.0)
    sampled = np.asarray(sampled, np.float32).reshape(-1, 4)
    return _lifted(pose, keypoints, scores, sampled[:, :3].copy(), sampled[:, 3] > 0.5, max_depth_gap)


def drop_in_front(points: np.ndarray, available: np.ndarray, max_depth_gap: float = MAX_DEPTH_GAP,
                  keypoints: np.ndarray | None = None, boxes: np.ndarray | None = None) -> np.ndarray:
    """In place on (N, K, 3) lifted points and (N, K) availability: keypoints that took the depth of someone
    covering them become not available (returned: (N, K) bool, those dropped). A person's depth is the 75th
    percentile of their lifted keypoints' depths (right while up to three quarters of them are covered).
    Dropped: a keypoint more than `max_depth_gap` metres in front of its person's depth; and, given the (N, K, 2)
    image `keypoints` and (N, 4) `boxes`, one inside the box of someone at least OCCLUDER_GAP nearer whose depth
    it took (within OCCLUDER_GAP of theirs)."""
    rows = np.flatnonzero(available.any(axis=1))
    if not rows.size:
        return np.zeros(available.shape, bool)
    depths = np.where(available[rows], points[rows, :, 2], np.inf)  # unlifted keypoints sort last
    body_depth = np.full(len(points), -np.inf)
    body_depth[rows] = _quantile(np.sort(depths, axis=1), available[rows].sum(1), BODY_QUANTILE)
    dropped = available & (points[..., 2] < body_depth[:, None] - max_depth_gap)
    if keypoints is not None and boxes is not None:
        xy = np.asarray(keypoints, np.float64).reshape(len(points), -1, 2)
        for i in rows:
            for j in rows:
                if j == i or body_depth[j] > body_depth[i] - OCCLUDER_GAP:
                    continue
                x1, y1, x2, y2 = np.asarray(boxes[j], np.float64)
                inside = (xy[i, :, 0] >= x1) & (xy[i, :, 0] <= x2) & (xy[i, :, 1] >= y1) & (xy[i, :, 1] <= y2)
                dropped[i] |= available[i] & inside & (np.abs(points[i, :, 2] - body_depth[j]) < OCCLUDER_GAP)
    available &= ~dropped
    points[dropped] = np.nan
    return dropped

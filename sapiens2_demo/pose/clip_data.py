"""What the clip's fit (clip_fit.py) reads off the data before it solves: the noise's scale, a pose model's
left/right swaps, the start (single-frame faults replaced, gaps filled) and the runs of frames a foot stands on the
floor."""

from __future__ import annotations

import warnings

import numpy as np

from .meta import name_index

SWAP_GAIN = 0.5  # a frame is exchanged when that halves its keypoints' median distance from the frames around
INIT_OUTLIER_M = 0.25  # metres from every guess the frames around make: a sample the start does not take
JUNK_SHARE = 0.2  # a frame with more than this share of its samples taken as faults is a junk frame
STILL_SPEED = 0.1  # m/s: a foot keypoint slower than this over PLANT_WINDOW is planted (over a window: frame to
PLANT_WINDOW = 0.5  # s     frame, a noisy fit's still foot looks like it moves at 0.1-0.2 m/s)


def noise_scale(values: np.ndarray, floor: float) -> float:
    """A robust estimate of the white noise on (T, K, D) samples (NaN = none), from their third differences
    over time (a person's motion changes its acceleration little from frame to frame; noise does, by sqrt(20)
    times its sigma): the data's own noise sets how much the fit trusts them (clean input, none smoothed away)."""
    third = np.diff(values, n=3, axis=0)
    third = np.abs(third[np.isfinite(third)])
    return max(float(np.median(third)) / (0.6745 * np.sqrt(20)), floor) if third.size else floor * 10


def unswapped(points: np.ndarray, seen: np.ndarray, flip: np.ndarray) -> np.ndarray:
    """(T,) bool: the frames whose keypoints lie much nearer the frames around them (the median of two either side)
    with left and right exchanged: a pose model's left/right swap, exchanged back before the fit."""
    frames = len(points)
    raw = np.where(seen[..., None], points, np.nan)
    pad = np.full((2,) + raw.shape[1:], np.nan)
    padded = np.concatenate([pad, raw, pad])
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        around = np.nanmedian(np.stack([padded[i:i + frames] for i in (0, 1, 3, 4)]), axis=0)
        own = np.nanmedian(np.linalg.norm(raw - around, axis=-1), axis=1)
        exchanged = np.nanmedian(np.linalg.norm(raw[:, flip] - around, axis=-1), axis=1)
    return np.nan_to_num(exchanged) < SWAP_GAIN * np.nan_to_num(own)


def _miss(raw: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(median, beside, miss) for (T, K, 3) samples (NaN = none): each one's 5-frame median, the mean of the two
    beside it, and its distance from the nearest guess the frames around make of it (the median, that mean, each
    side's two carried on at their speed)."""
    frames = len(raw)
    padded = np.concatenate([np.full((2,) + raw.shape[1:], np.nan), raw, np.full((2,) + raw.shape[1:], np.nan)])
    windows = np.stack([padded[i:i + frames] for i in range(5)])  # frames f - 2 .. f + 2
    guesses = np.stack([(windows[1] + windows[3]) / 2, 2 * windows[1] - windows[0], 2 * windows[3] - windows[4]])
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        median = np.nanmedian(windows, axis=0)
        miss = np.nanmin(np.linalg.norm(np.concatenate([guesses, median[None]]) - raw, axis=-1), axis=0)
    return median, guesses[0], np.nan_to_num(miss)


def median_filled(points: np.ndarray, seen: np.ndarray, parents: list[tuple[int, int]] = ()) -> np.ndarray:
    """(T, K, 3) the seen samples, a single-frame fault replaced by the median over 5 frames, every keypoint
    interpolated through its gaps relative to the mid-hip point (held past its first and last frames). A fault is
    a sample far from every guess the frames around make of it (their median, the mean of the two beside it, each
    side's two carried on at their speed): far from the median alone is also a fast limb. `parents` ((child,
    parent) columns, parents first: the body's tree) also takes a sample whose place relative to its parent's is
    near those guesses of it, where the parent's was taken: at a flip's top the hands swing 50-65 cm a frame, the
    fingers about the wrist 14 cm, and clean fingers were taken for faults there. A junk frame (more than a fifth
    of its samples faults) takes the mean of the frames beside it instead, wholly."""
    frames = len(points)
    raw = np.where(seen[..., None], points, np.nan)
    median, beside, miss = _miss(raw)
    far = miss > INIT_OUTLIER_M  # a fault: the median instead
    if parents:
        child, parent = (np.asarray(c, np.int64) for c in zip(*parents))
        relative_miss = _miss(raw[:, child] - raw[:, parent])[2]
        for i, (c, p) in enumerate(parents):
            far[:, c] &= ~((relative_miss[:, i] <= INIT_OUTLIER_M) & ~far[:, p] & seen[:, p])
    # A junk frame starts wholly from the mean of the frames beside it: its faults' 5-frame median lies tens of
    # centimetres off a flip's curve, and junk that happens to land near a guess is kept (a palm or a leg started
    # there turned over). Elsewhere a fault takes the median, which a fast limb's neighbours' mean does not beat.
    junk = far.sum(1) > JUNK_SHARE * seen.sum(1)
    kept = np.where(far[..., None], median, raw)
    filtered = np.where(seen[..., None], np.where(junk[:, None, None] & np.isfinite(beside), beside, kept), np.nan)
    index, t = name_index(), np.arange(frames)

    def fill(values):  # (T, 3) with NaN -> interpolated, or None when never known
        have = np.flatnonzero(np.isfinite(values).all(1))
        return None if not have.size else np.stack([np.interp(t, have, values[have, a]) for a in range(3)], 1)

    out = np.full_like(points, np.nan)
    hips = [index["left_hip"], index["right_hip"]]
    # the mid-hip point where both hips are seen, interpolated between (one hip alone is half a hip width off it)
    pelvis = fill(filtered[:, hips].mean(axis=1))
    if pelvis is None:  # never both at once: one hip's place will do
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            pelvis = fill(np.nanmean(filtered[:, hips], axis=1))
    if pelvis is None:
        raise ValueError("the hips and neck were never placed in 3D")
    for k in range(points.shape[1]):
        relative = fill(filtered[:, k] - pelvis)
        if relative is not None:
            out[:, k] = pelvis + relative
    return out


def planted_runs(positions: np.ndarray, fps: float) -> list[tuple[int, int, int]]:
    """(column, first frame, end) per run of 3+ frames in which the (T, K, 3) positions (metres) stay within
    STILL_SPEED of where they were and will be PLANT_WINDOW around: a foot on the floor. A gap of a few frames in one
    run is closed: noise, not a step."""
    p = np.asarray(positions, np.float64)
    h = max(1, int(round(PLANT_WINDOW * fps / 2)))
    padded = np.concatenate([np.repeat(p[:1], h, 0), p, np.repeat(p[-1:], h, 0)])
    still = np.linalg.norm(padded[2 * h:] - padded[:-2 * h], axis=-1) * fps / (2 * h) < STILL_SPEED
    runs = []
    for k in range(p.shape[1]):
        edges = np.flatnonzero(np.diff(np.concatenate([[0], still[:, k].astype(int), [0]])))
        for a, b in zip(edges[1:-1:2], edges[2::2]):
            if b - a <= h:
                still[a:b, k] = True
        edges = np.flatnonzero(np.diff(np.concatenate([[0], still[:, k].astype(int), [0]])))
        runs += [(k, int(a), int(b)) for a, b in zip(edges[::2], edges[1::2]) if b - a >= 3]
    return runs


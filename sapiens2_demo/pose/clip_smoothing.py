"""Zero-lag smoothing of a person's 3D keypoints over a whole recorded clip, with the model's faults taken out.

A recorded video is smoothed after the fact, so nothing needs to lag: each frame's keypoint is a local cubic
fitted by weighted least squares to the samples within WINDOW_S around it (tricube weights, as LOESS). A cubic
follows a moving limb (no lag, no overshoot: a clean walk comes through within a millimetre) and averages the
noise of ~11 samples. Faults a pose model makes on single frames are found against that fit and taken out:
  - left/right swaps: a frame whose keypoints fit much better with left and right exchanged is exchanged back;
  - outliers (junk keypoints, a keypoint on another person, a depth off the body): samples further from the fit
    than OUTLIER_SIGMAS times the keypoint's robust noise (and at least MIN_OUTLIER_M) are dropped and refitted;
  - frames with few keypoints (low confidence: not lifted) simply have fewer samples; the fit fills them.
`noise_level` reports each keypoint's noise (the robust spread of its residuals), which the solver uses to leave
fingers at rest when their keypoints are too noisy to give a direction.
"""

from __future__ import annotations

import numpy as np

DEGREE = 3
WINDOW_S = 0.25  # half-width of the fitting window, seconds
MIN_SAMPLES = 5  # fewer in a window: a straight line instead of a cubic
OUTLIER_SIGMAS = 4.0
MIN_OUTLIER_M = 0.08  # metres: never call a sample closer than this to the fit an outlier
WIDER = (2,)  # the wider windows tried, in multiples of WINDOW_S
WIDE_AGREES = 0.6  # the wider window's fit counts as agreeing within this fraction of the keypoint's noise
SWAP_GAIN = 0.5  # a frame is exchanged when its exchanged cost is under this fraction of its own


def local_cubic(points: np.ndarray, weights: np.ndarray, half: int) -> np.ndarray:
    """(T, K, 3) -> (T, K, 3): per frame and keypoint the weighted local cubic over frames t-half..t+half,
    evaluated at t; NaN where the window has no weight. `weights` (T, K) >= 0 (0: no sample)."""
    frames = len(points)
    values = np.where(weights[..., None] > 0, points, 0.0)
    out = np.full(points.shape, np.nan)
    for t in range(frames):
        lo, hi = max(0, t - half), min(frames, t + half + 1)
        d = (np.arange(lo, hi) - t) / (half + 1.0)
        w = weights[lo:hi] * ((1 - np.abs(d) ** 3) ** 3)[:, None]  # (w, K)
        count = (weights[lo:hi] > 0).sum(0)  # (K,)
        basis = d[:, None] ** np.arange(DEGREE + 1)  # (w, DEGREE + 1)
        # fewer samples than the polynomial needs: a line (a tiny ridge keeps the solve defined either way)
        ridge = np.where(count[:, None] >= MIN_SAMPLES + DEGREE - 3, 1e-9, np.where(np.arange(DEGREE + 1) < 2, 1e-9, 1e3))
        normal = np.einsum("wk,wa,wb->kab", w, basis, basis) + ridge[:, :, None] * np.eye(DEGREE + 1)
        rhs = np.einsum("wk,wa,wkc->kac", w, basis, values[lo:hi])
        solved = np.linalg.solve(normal, rhs)[:, 0]  # the value at d = 0, (K, 3)
        out[t] = np.where((w.sum(0) > 0)[:, None], solved, np.nan)
    return out


def _residuals(points, fit):
    return np.linalg.norm(points - fit, axis=-1)


def _robust_sigma(residuals: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """(K,) the median residual per keypoint over the kept samples (NaN where none)."""
    masked = np.where(keep, residuals, np.nan)
    with np.errstate(all="ignore"):
        counts = keep.sum(0)
        sigma = np.where(counts > 0, np.nanmedian(np.where(counts > 0, masked, 0.0), axis=0), np.nan)
    return sigma


def smooth_clip(points: np.ndarray, measured: np.ndarray, fps: float, flip: np.ndarray | None = None
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(T, K, 3) raw keypoints (NaN where not measured), (T, K) measured -> (smoothed points at the measured frames,
    NaN elsewhere; the samples kept (T, K); each keypoint's noise (K,) metres). `flip` (K,) the left/right
    exchange of the keypoint order: swapped frames are exchanged back (in place in `points` and `measured`)."""
    half = max(2, int(round(WINDOW_S * fps)))
    keep = measured & np.isfinite(points).all(-1)
    fit = local_cubic(points, keep.astype(float), half)
    if flip is not None:
        fit = _unswap(points, keep, measured, fit, flip, half)
    for _ in range(2):
        residual = _residuals(points, fit)
        sigma = _robust_sigma(residual, keep)
        limit = np.maximum(OUTLIER_SIGMAS * 1.25 * np.nan_to_num(sigma, nan=0.0), MIN_OUTLIER_M)
        keep = measured & np.isfinite(points).all(-1) & ~(residual > limit)
        fit = local_cubic(points, keep.astype(float), half)
    noise = _robust_sigma(_residuals(points, fit), keep) * 1.25
    # where a window twice as wide agrees with this fit (slow parts: the torso, a still person) it averages more
    # noise away; where they part (a swinging limb) this fit stands, with a smooth blend between
    for widen in WIDER:
        wide = local_cubic(points, keep.astype(float), widen * half)
        parted = np.linalg.norm(wide - fit, axis=-1) / np.maximum(np.nan_to_num(noise, nan=0.0), 1e-3)
        narrow = np.clip((parted - WIDE_AGREES) / WIDE_AGREES, 0.0, 1.0)[..., None]
        fit = np.where(np.isfinite(wide), narrow * fit + (1 - narrow) * wide, fit)
    return np.where(keep[..., None], fit, np.nan), keep, noise


def _unswap(points, keep, measured, fit, flip, half):
    """Exchanges left and right on frames that fit the neighbours' fit much better exchanged; refits."""
    sided = np.flatnonzero(flip != np.arange(len(flip)))
    cap = 0.5  # metres: one wild keypoint must not decide a frame
    changed = False
    for t in range(len(points)):
        mine = keep[t, sided] & keep[t, flip[sided]] & np.isfinite(fit[t, sided]).all(-1)
        if mine.sum() < 4:
            continue
        k = sided[mine]
        own = np.minimum(_residuals(points[t, k], fit[t, k]), cap).sum()
        swapped = np.minimum(_residuals(points[t, flip[k]], fit[t, k]), cap).sum()
        if swapped < SWAP_GAIN * own:
            points[t], measured[t], keep[t] = points[t, flip], measured[t, flip], keep[t, flip]
            changed = True
    return local_cubic(points, keep.astype(float), half) if changed else fit

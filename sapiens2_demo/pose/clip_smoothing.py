"""Zero-lag smoothing of a person's 3D keypoints over a whole recorded clip, with the model's faults taken out.

A recorded video is smoothed after the fact, so nothing needs to lag: each frame's keypoint is a local cubic
fitted by weighted least squares to the samples within WINDOW_S around it (tricube weights, as LOESS): it follows a
moving limb (a clean walk comes through within 1.5 mm) and averages the noise of the samples around. Wider fits
(local quintics over 2x and 3x the window, cubics over 3x and 6x) are blended in, each by the share that minimises
the expected error: the noise its kernel lets through against its bias, read off its gap to the fit beyond what
noise explains (a still torso takes the widest; a swinging limb keeps the narrow one). The blend is made twice:
on the positions, then about the mid-hip point that gives, since walking moves the root (and bobs it with each
step) but hardly the body's shape about it. Faults a pose model makes on single frames are taken out:
  - left/right swaps: a frame whose keypoints fit their neighbours' fit (leave-one-out) much better with left and
    right exchanged is exchanged back;
  - outliers (junk keypoints, a keypoint on another person, a depth off the body): samples further from the fit
    than OUTLIER_SIGMAS times the keypoint's median residual (and at least MIN_OUTLIER_M) are dropped;
  - a frame whose whole body sits 0.4 m off the depth of the frames around it (keypoints read off someone in
    front, or landed on another person) is dropped;
  - a dropped or missing sample (a low-confidence frame is not lifted) is filled by the fit where kept samples lie
    close on both sides; longer holes are left to the solver, which turns the joints between the frames around
    them (`bridge`).
`smooth_clip` also reports each keypoint's noise about the fit, by which the solver leaves fingers at rest when
their keypoints are too noisy to give a direction.
"""

from __future__ import annotations

import numpy as np

WINDOW_S = 0.25  # half-width of the fitting window, seconds
MIN_SAMPLES = 5  # fewer in a window: a straight line instead of a cubic
OUTLIER_SIGMAS = 4.0
MIN_OUTLIER_M = 0.08  # metres: never call a sample closer than this to the fit an outlier
# the wider fits blended in (multiples of WINDOW_S, polynomial degree): quintics follow a stride over a wider window
WIDER = ((2, 5), (3, 5), (3, 3), (6, 3))
BIAS_TRUST = 1.5  # a wider fit's squared gap less this many times its expected noise variance: its bias squared
DISPLACED_M, DISPLACED_WINDOW_S = 0.4, 0.5  # a whole frame this far off the depth around it is not the person
PELVIS = (9, 10)  # left_hip, right_hip
CHUNK = 256  # frames fitted at once (bounds the memory of the windows)
SWAP_GAIN = 0.5  # a frame is exchanged when its exchanged cost is under this fraction of its own


def local_cubic(points: np.ndarray, weights: np.ndarray, half: int, leave_out: bool = False, degree: int = 3
                ) -> np.ndarray:
    """(T, K, 3) -> (T, K, 3): per frame and keypoint the weighted local cubic (or `degree`) over frames t-half..t+half,
    evaluated at t; NaN where the window has no weight. `weights` (T, K) >= 0 (0: no sample). `leave_out`:
    without frame t's own sample (what its neighbours say it should be: a fault cannot pull its own fit)."""
    from numpy.lib.stride_tricks import sliding_window_view

    frames, keypoints = weights.shape
    d = np.arange(-half, half + 1) / (half + 1.0)
    kernel = (1 - np.abs(d) ** 3) ** 3  # tricube
    if leave_out:
        kernel[half] = 0.0
    n = degree + 1
    basis = d[:, None] ** np.arange(n)  # (W, 4): 1, d, d^2, d^3
    pairs = (basis[:, :, None] * basis[:, None, :]).reshape(len(d), n * n)
    # frames beyond the clip weigh nothing: the window is cut at the clip's ends
    padded_w = np.pad(np.where(np.isfinite(points).all(-1), weights, 0.0), ((half, half), (0, 0)))
    padded_v = np.pad(np.nan_to_num(points), ((half, half), (0, 0), (0, 0)))
    out = np.full(points.shape, np.nan)
    for start in range(0, frames, CHUNK):
        stop = min(start + CHUNK, frames)
        w = sliding_window_view(padded_w[start:stop + 2 * half], len(d), axis=0) * kernel  # (t, K, W)
        v = sliding_window_view(padded_v[start:stop + 2 * half], len(d), axis=0)  # (t, K, 3, W)
        count = (w > 0).sum(-1)  # (t, K)
        normal = (w @ pairs).reshape(stop - start, keypoints, n, n)
        # fewer samples than a cubic needs: a line (a tiny ridge keeps the solve defined either way)
        ridge = np.where((count[..., None] >= MIN_SAMPLES + degree - 3), 1e-9, np.where(np.arange(n) < 2, 1e-9, 1e3))
        normal += ridge[..., None] * np.eye(n)
        rhs = np.swapaxes((w[:, :, None, :] * v) @ basis, -1, -2)  # (t, K, 4, 3)
        solved = np.linalg.solve(normal, rhs)[..., 0, :]  # the value at d = 0
        out[start:stop] = np.where((w.sum(-1) > 0)[..., None], solved, np.nan)
    return out


def _box_mean(values: np.ndarray, half: int) -> np.ndarray:
    """(T, K) -> the mean over frames t-half..t+half (clipped to the clip), per keypoint."""
    total = np.concatenate([np.zeros((1,) + values.shape[1:]), np.cumsum(values, 0)])
    frames = np.arange(len(values))
    lo, hi = np.maximum(frames - half, 0), np.minimum(frames + half + 1, len(values))
    return (total[hi] - total[lo]) / (hi - lo)[:, None]


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
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(T, K, 3) raw keypoints (NaN where not measured), (T, K) measured -> (smoothed points (T, K, 3); the
    samples kept (T, K); each keypoint's noise (K,) metres; where the smoothed points hold (T, K): a kept sample,
    or kept samples on both sides within half the window, so a dropped or missing sample is filled by the fit).
    `flip` (K,) the left/right exchange of the keypoint order: swapped frames are exchanged back (in place in
    `points` and `measured`)."""
    half = max(2, int(round(WINDOW_S * fps)))
    _drop_displaced_frames(points, measured, fps)
    keep = measured & np.isfinite(points).all(-1)
    if flip is not None:
        _unswap(points, keep, measured, local_cubic(points, keep.astype(float), half, leave_out=True), flip)
    fit = local_cubic(points, keep.astype(float), half)
    for _ in range(2):
        residual = _residuals(points, fit)
        sigma = _robust_sigma(residual, keep)
        limit = np.maximum(OUTLIER_SIGMAS * 1.25 * np.nan_to_num(sigma, nan=0.0), MIN_OUTLIER_M)
        keep = measured & np.isfinite(points).all(-1) & ~(residual > limit)
        fit = local_cubic(points, keep.astype(float), half)
    noise = _robust_sigma(_residuals(points, fit), keep) * 1.25
    # wider fits average more noise away where they follow the motion (the torso, a still person; a limb between
    # strides): first on the positions, then relative to the mid-hip point that gives, since walking moves the
    # root but hardly the body's shape about it (a root that bobs with each step parts a wide fit from the torso)
    root = _root_path(_widen(points, keep, fit, noise, half))[:, None]
    fit = _widen(points - root, keep, fit - root, noise, half) + root
    # a hole is filled by the fit where kept samples lie close on both sides (half the window: a short hole);
    # across a longer one a cubic through the far sides can swing anywhere
    reach = max(1, half // 2)
    count = np.concatenate([np.zeros((1, keep.shape[1]), int), np.cumsum(keep, 0)])  # kept samples before t
    frames = np.arange(len(keep))
    before = count[frames] - count[np.maximum(frames - reach, 0)]
    after = count[np.minimum(frames + reach + 1, len(keep))] - count[frames + 1]
    supported = (keep | ((before > 0) & (after > 0))) & np.isfinite(fit).all(-1)
    return fit, keep, noise, supported


def _kernel(half: int, degree: int = 3) -> np.ndarray:
    """(2 * half + 1,) the weights the local cubic gives each sample of a full window (its equivalent kernel)."""
    d = np.arange(-half, half + 1) / (half + 1.0)
    weight = (1 - np.abs(d) ** 3) ** 3
    basis = d[:, None] ** np.arange(degree + 1)
    return np.linalg.solve(basis.T @ (weight[:, None] * basis), basis.T * weight)[0]


def _widen(points, keep, fit, noise, half):
    """Blends the WIDER fits into `fit` (the local cubic over `half`), each by the share that minimises the
    expected error: the noise each fit lets through (its kernel's, from the keypoint's noise) against the wider
    one's bias, read off its gap to the fit so far beyond what their noise explains (judged over twice the window:
    a bias is slow)."""
    levels = [(1, 3)] + list(WIDER)
    halves = [int(round(w * half)) for w, _ in levels]
    width = max(halves)
    kernels = np.stack([np.pad(_kernel(h, g), width - h) for h, (_, g) in zip(halves, levels)])
    gram = kernels @ kernels.T
    own = kernels[0, width]
    # `noise` (1.25 x the median residual ~ 1.11 x its RMS for Gaussian noise) -> each sample's own variance
    sample = np.nan_to_num(noise, nan=0.0) / 1.11 / np.sqrt(max(1 - 2 * own + gram[0, 0], 1e-6))
    var = (sample ** 2)[None, :]  # (1, K)
    mix = np.zeros(fit.shape[:2] + (len(halves),))  # each fit's share in the blend so far
    mix[..., 0] = 1.0
    for m, h in enumerate(halves[1:], 1):
        wide = local_cubic(points, keep.astype(float), h, degree=levels[m][1])
        uu = np.einsum("tki,ij,tkj->tk", mix, gram, mix)
        um = mix @ gram[:, m]
        spread = uu - 2 * um + gram[m, m]  # the noise variance of (wide - fit), per unit sample variance
        gap = np.nan_to_num(np.linalg.norm(wide - fit, axis=-1), nan=1.0)
        gap2 = _box_mean(gap ** 2, 2 * half)
        bias2 = np.maximum(gap2 - BIAS_TRUST * var * spread, 0.0)
        share = np.clip(var * (uu - um) / np.maximum(var * spread + bias2, 1e-12), 0.0, 1.0)
        share = np.where(np.isfinite(wide).all(-1), share, 0.0)
        fit = np.where(np.isfinite(wide), (1 - share[..., None]) * fit + share[..., None] * np.nan_to_num(wide), fit)
        mix = mix * (1 - share[..., None])
        mix[..., m] += share
    return fit


def _root_path(fit: np.ndarray) -> np.ndarray:
    """(T, 3) the mid-hip point of the fit, interpolated over frames without it (zeros: no hips at all)."""
    root = fit[:, list(PELVIS)].mean(1)
    seen = np.flatnonzero(np.isfinite(root).all(-1))
    if not seen.size:
        return np.zeros_like(root)
    frames = np.arange(len(root))
    return np.stack([np.interp(frames, seen, root[seen, axis]) for axis in range(3)], -1)


def _drop_displaced_frames(points: np.ndarray, measured: np.ndarray, fps: float) -> None:
    """Drops (in `measured`, in place) whole frames whose body sits more than DISPLACED_M off the depth of the
    frames around it (the median over DISPLACED_WINDOW_S each side): keypoints read off someone in front of a
    mostly hidden person, or landed on another person, all at once, which no single keypoint stands out from."""
    depth = np.full(len(points), np.nan)
    seen = measured.any(1)
    if seen.sum() < 3:
        return
    depth[seen] = [np.median(points[t, measured[t], 2]) for t in np.flatnonzero(seen)]
    reach = max(1, int(round(DISPLACED_WINDOW_S * fps)))
    for t in np.flatnonzero(seen):
        around = depth[max(0, t - reach):t + reach + 1]
        around = around[np.isfinite(around)]
        if len(around) >= 3 and abs(depth[t] - np.median(around)) > DISPLACED_M:
            measured[t] = False


def _unswap(points, keep, measured, fit, flip) -> None:
    """Exchanges left and right (in place) on frames that fit their neighbours' fit much better exchanged."""
    sided = np.flatnonzero(flip != np.arange(len(flip)))
    cap = 0.5  # metres: one wild keypoint must not decide a frame
    for t in range(len(points)):
        mine = keep[t, sided] & keep[t, flip[sided]] & np.isfinite(fit[t, sided]).all(-1)
        if mine.sum() < 4:
            continue
        k = sided[mine]
        own = np.minimum(_residuals(points[t, k], fit[t, k]), cap).sum()
        swapped = np.minimum(_residuals(points[t, flip[k]], fit[t, k]), cap).sum()
        if swapped < SWAP_GAIN * own:
            points[t], measured[t], keep[t] = points[t, flip], measured[t, flip], keep[t, flip]


def _quaternions(r: np.ndarray) -> np.ndarray:
    """(..., 3, 3) rotations -> (..., 4) unit quaternions (w, x, y, z)."""
    w = np.sqrt(np.maximum(0.0, 1 + r[..., 0, 0] + r[..., 1, 1] + r[..., 2, 2])) / 2
    x = np.sqrt(np.maximum(0.0, 1 + r[..., 0, 0] - r[..., 1, 1] - r[..., 2, 2])) / 2
    y = np.sqrt(np.maximum(0.0, 1 - r[..., 0, 0] + r[..., 1, 1] - r[..., 2, 2])) / 2
    z = np.sqrt(np.maximum(0.0, 1 - r[..., 0, 0] - r[..., 1, 1] + r[..., 2, 2])) / 2
    x = np.copysign(x, r[..., 2, 1] - r[..., 1, 2])
    y = np.copysign(y, r[..., 0, 2] - r[..., 2, 0])
    z = np.copysign(z, r[..., 1, 0] - r[..., 0, 1])
    q = np.stack([w, x, y, z], -1)
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def _matrices(q: np.ndarray) -> np.ndarray:
    w, x, y, z = np.moveaxis(q, -1, 0)
    return np.moveaxis(np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                                 [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                                 [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]]), [0, 1], [-2, -1])


def _slerp(q0: np.ndarray, q1: np.ndarray, u: float) -> np.ndarray:
    q1 = np.where(((q0 * q1).sum(-1) < 0)[..., None], -q1, q1)  # the shorter way round
    angle = np.arccos(np.clip((q0 * q1).sum(-1), -1.0, 1.0))[..., None]
    with np.errstate(all="ignore"):
        a, b = np.sin((1 - u) * angle) / np.sin(angle), np.sin(u * angle) / np.sin(angle)
    a, b = np.where(angle < 1e-6, 1 - u, a), np.where(angle < 1e-6, u, b)
    q = a * q0 + b * q1
    return q / np.linalg.norm(q, axis=-1, keepdims=True)


def bridge(local: np.ndarray, known: np.ndarray) -> np.ndarray:
    """(T, J, 3, 3) joint rotations; `known` (T, J) where each was solved from measured keypoints. Elsewhere a
    joint turns from its last known rotation to its next (slerp), held before the first and after the last,
    rather than aiming at keypoints interpolated through the gap (a person who turned round while away would
    fold through themselves; a foot aiming at toes last seen half a stride ago flips)."""
    local = local.copy()
    for j in np.flatnonzero((~known).any(0) & known.any(0)):
        seen = np.flatnonzero(known[:, j])
        local[:seen[0], j], local[seen[-1] + 1:, j] = local[seen[0], j], local[seen[-1], j]
        for before, after in zip(seen[:-1], seen[1:]):
            if after - before < 2:
                continue
            q0, q1 = _quaternions(local[before, j]), _quaternions(local[after, j])
            for t in range(before + 1, after):
                local[t, j] = _matrices(_slerp(q0, q1, (t - before) / (after - before)))
    return local

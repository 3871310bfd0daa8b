"""Zero-lag smoothing of a person's 3D keypoints over a whole recorded clip, with the model's faults taken out.

A recorded video is smoothed after the fact, so nothing needs to lag: each frame's keypoint is a local cubic
fitted by weighted least squares to the samples within WINDOW_S around it (tricube weights, as LOESS): it follows a
moving limb (a clean walk comes through within 1.5 mm) and averages the noise of the samples around. Wider fits
(local quintics over 2x and 3x the window, cubics over 3x and 6x) are blended in, each by the share that minimises
the expected error: the noise its kernel lets through against its bias, read off its gap to the fit beyond what
noise explains (a still torso takes the widest; a swinging limb keeps the narrow one). The blend is made twice:
on the positions, then about the mid-hip point that gives, since walking moves the root (and bobs it with each
step) but hardly the body's shape about it. Where that shape repeats with a stride (walking, running: the lag
found from the fit), each frame is blended with itself a stride before and after the same way (`_stride_average`;
the fit's noise taken from its own window, larger where it is one-sided). Faults a pose model makes on single frames are taken out:
  - left/right swaps: a frame whose keypoints fit their neighbours' fit (leave-one-out) much better with left and
    right exchanged is exchanged back;
  - outliers (junk keypoints, a keypoint on another person, a depth off the body): samples further from the fit
    than OUTLIER_SIGMAS times the keypoint's median residual (and at least MIN_OUTLIER_M) are dropped;
  - a frame whose whole body sits 0.4 m off the depth of the frames around it (keypoints read off someone in
    front, or landed on another person) is dropped;
  - a dropped or missing sample (a low-confidence frame is not lifted) is filled by the fit where kept samples lie
    close on both sides; longer holes are left to the solver, which turns the joints through them (bridge.py).
`smooth_clip` also reports each keypoint's noise about the fit, by which the solver leaves fingers at rest when
their keypoints are too noisy to give a direction.
"""

from __future__ import annotations

import numpy as np

WINDOW_S = 0.25  # half-width of the fitting window, seconds
MIN_SAMPLES = 5  # fewer in a window: a straight line instead of a cubic
OUTLIER_SIGMAS = 4.0
MIN_OUTLIER_M = 0.08  # metres: never call a sample closer than this to the fit an outlier
# the wider fits blended in (multiples of WINDOW_S, polynomial degree): quintics follow a stride over a wider window;
# a line over the widest gives the torso's near-still points most at a run's edge, where a cubic extrapolates noise
WIDER = ((2, 5), (3, 5), (3, 3), (6, 3), (6, 1))
BIAS_TRUST = 1.5  # a wider fit's squared gap less this many times its expected noise variance: its bias squared
DISPLACED_M, DISPLACED_WINDOW_S = 0.4, 0.5  # a whole frame this far off the depth around it is not the person
PELVIS = (9, 10)  # left_hip, right_hip
CHUNK = 256  # frames fitted at once (bounds the memory of the windows)
SWAP_GAIN = 0.5  # a frame is exchanged when its exchanged cost is under this fraction of its own
PERIOD_S = (0.6, 1.6)  # a walking or running stride: the cycle a limb repeats
EDGE_SAMPLES = 2  # fewer kept samples than this within half the window on one side: a sample at a run's edge
EDGE_DEGREE = 2  # the fit an edge sample is judged by: a quadratic through the run's inner samples, extrapolated
FAULTY_SHARE = 0.25  # an edge sample is dropped only in a frame with this share of its samples off (a junk frame)
REPEATS = 0.1  # a motion repeats with the stride when one stride on it differs by under this share of its spread


def local_cubic(points: np.ndarray, weights: np.ndarray, half: int, leave_out: bool = False, degree: int = 3,
                energy: bool = False):
    """(T, K, 3) -> (T, K, 3): per frame and keypoint the weighted local cubic (or `degree`) over frames t-half..t+half,
    evaluated at t; NaN where the window has no weight. `weights` (T, K) >= 0 (0: no sample). `leave_out`:
    without frame t's own sample (what its neighbours say it should be: a fault cannot pull its own fit).
    `energy`: also (T, K) the sum of the squared weights the fit gives the samples (its noise variance per unit
    sample variance: larger at the clip's or a hole's edge, where the window is one-sided)."""
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
    power = np.full((frames, keypoints), np.nan)
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
        if energy:
            a = np.linalg.solve(normal, np.broadcast_to(np.eye(n)[:, :1], normal.shape[:-1] + (1,)))[..., 0]
            squared = ((w * w) @ pairs).reshape(normal.shape)
            power[start:stop] = np.einsum("tki,tkij,tkj->tk", a, squared, a)
    return (out, power) if energy else out


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
        _unswap(points, keep, measured, half, flip)
    keep = _drop_outliers(points, measured, keep, half)
    # at a run's edge (the first frame back after an absence) the fit leans on the sample itself: a junk frame
    # there is judged by the run's inner samples, and dropped before the fit is made again
    edge = _edge_outliers(points, measured, keep, half)
    with np.errstate(all="ignore"):
        share = ((measured & ~keep) | edge).sum(1) / measured.sum(1)
    keep = _drop_outliers(points, measured & ~(edge & (share >= FAULTY_SHARE)[:, None]), keep, half)
    fit, power = local_cubic(points, keep.astype(float), half, energy=True)
    noise = _robust_sigma(_residuals(points, fit), keep) * 1.25
    # wider fits average more noise away where they follow the motion (the torso, a still person; a limb between
    # strides): first on the positions, then relative to the mid-hip point that gives, since walking moves the
    # root but hardly the body's shape about it (a root that bobs with each step parts a wide fit from the torso)
    root = _root_path(_widen(points, keep, fit, noise, half)[0])[:, None]
    relative, spread = _widen(points - root, keep, fit - root, noise, half)
    # a hole is filled by the fit where kept samples lie close on both sides (half the window: a short hole);
    # across a longer one a cubic through the far sides can swing anywhere
    reach = max(1, half // 2)
    count = np.concatenate([np.zeros((1, keep.shape[1]), int), np.cumsum(keep, 0)])  # kept samples before t
    frames = np.arange(len(keep))
    before = count[frames] - count[np.maximum(frames - reach, 0)]
    after = count[np.minimum(frames + reach + 1, len(keep))] - count[frames + 1]
    supported = (keep | ((before > 0) & (after > 0))) & np.isfinite(relative).all(-1)
    # the blend's noise assumed full windows: one-sided ones (edges, holes) let more through
    spread = spread * np.maximum(power / float(_kernel(half) @ _kernel(half)), 1.0)
    fit = _stride_average(np.where(supported[..., None], relative, np.nan), spread, fps, half) + root
    fit = np.where(supported[..., None], fit, relative + root)
    return fit, keep, noise, supported


def _drop_outliers(points, measured, keep, half):
    """`keep` without the samples further from the fit of the kept ones than OUTLIER_SIGMAS times the keypoint's
    median residual (and MIN_OUTLIER_M), twice."""
    keep = keep & measured
    fit = local_cubic(points, keep.astype(float), half)
    for _ in range(2):
        residual = _residuals(points, fit)
        sigma = _robust_sigma(residual, keep)
        limit = np.maximum(OUTLIER_SIGMAS * 1.25 * np.nan_to_num(sigma, nan=0.0), MIN_OUTLIER_M)
        keep = measured & np.isfinite(points).all(-1) & ~(residual > limit)
        fit = local_cubic(points, keep.astype(float), half)
    return keep


def _edge_outliers(points, measured, keep, half):
    """(T, K) the samples at the edge of a run (a clip's or a hole's edge: too few samples on one side) that the
    run's inner samples put far off. At an edge the fit leans on the sample itself, so its own residual cannot
    show a fault (the first frame back after an absence, of junk keypoints), and a fault there pulls the fit
    of the frames beside it too: the edge samples are judged by a fit without them (a quadratic, extrapolated),
    their residual scaled by the noise that fit lets through."""
    reach = max(1, half // 2)
    count = np.concatenate([np.zeros((1, measured.shape[1]), int), np.cumsum(measured, 0)])
    frames = np.arange(len(measured))
    before = count[frames] - count[np.maximum(frames - reach, 0)]
    after = count[np.minimum(frames + reach + 1, len(measured))] - count[frames + 1]
    edge = measured & (np.minimum(before, after) < EDGE_SAMPLES)
    inner = keep & ~edge
    judge, power = local_cubic(points, inner.astype(float), half, degree=EDGE_DEGREE, energy=True)
    scaled = _residuals(points, judge) / np.sqrt(1 + np.maximum(np.nan_to_num(power, nan=0.0), 0.0))
    residual = _residuals(points, local_cubic(points, keep.astype(float), half))
    sigma = _robust_sigma(residual, inner)
    limit = np.maximum(OUTLIER_SIGMAS * 1.25 * np.nan_to_num(sigma, nan=0.0), MIN_OUTLIER_M)
    return edge & (scaled > limit)


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
    fits = [local_cubic(points, keep.astype(float), h, degree=g, energy=True) for h, (_, g) in zip(halves, levels)]
    # each fit's noise where its window is one-sided (a clip's or a hole's edge) is larger than a full window's:
    # the kernels' covariances scaled by it (their correlation kept)
    scale = np.stack([np.sqrt(np.maximum(np.nan_to_num(p, nan=gram[i, i]), gram[i, i]) / gram[i, i])
                      for i, (_, p) in enumerate(fits)], -1)
    grams = gram * scale[..., :, None] * scale[..., None, :]  # (T, K, L, L)
    for m, h in enumerate(halves[1:], 1):
        wide = fits[m][0]
        uu = np.einsum("tki,tkij,tkj->tk", mix, grams, mix)
        um = np.einsum("tki,tki->tk", mix, grams[..., m])
        spread = uu - 2 * um + grams[..., m, m]  # the noise variance of (wide - fit), per unit sample variance
        gap = np.nan_to_num(np.linalg.norm(wide - fit, axis=-1), nan=1.0)
        gap2 = _box_mean(gap ** 2, 2 * half)
        bias2 = np.maximum(gap2 - BIAS_TRUST * var * spread, 0.0)
        share = np.clip(var * (uu - um) / np.maximum(var * spread + bias2, 1e-12), 0.0, 1.0)
        share = np.where(np.isfinite(wide).all(-1), share, 0.0)
        fit = np.where(np.isfinite(wide), (1 - share[..., None]) * fit + share[..., None] * np.nan_to_num(wide), fit)
        mix = mix * (1 - share[..., None])
        mix[..., m] += share
    return fit, var * np.einsum("tki,tkij,tkj->tk", mix, grams, mix)


def _shifted(values: np.ndarray, lag: float) -> np.ndarray:
    """(T, ...) values at t + lag, sub-frame by a cubic through the four frames around (Catmull-Rom: a limb
    swinging through a stride curves, and a straight line between two frames cuts the curve; the line where the
    outer two are missing), NaN beyond."""
    frames = len(values)
    at = np.arange(frames) + lag
    low = np.floor(at).astype(int)
    u = (at - low).reshape((-1,) + (1,) * (values.ndim - 1))

    def taken(offset):
        index = low + offset
        inside = ((index >= 0) & (index < frames)).reshape(u.shape)
        return np.where(inside, values[np.clip(index, 0, frames - 1)], np.nan)

    before, a, b, after = (taken(offset) for offset in (-1, 0, 1, 2))
    line = (1 - u) * a + u * b
    curve = ((-u ** 3 + 2 * u ** 2 - u) * before + (3 * u ** 3 - 5 * u ** 2 + 2) * a
             + (-3 * u ** 3 + 4 * u ** 2 + u) * b + (u ** 3 - u ** 2) * after) / 2
    return np.where(np.isfinite(curve), curve, line)


def _stride(relative: np.ndarray, fps: float) -> float | None:
    """The lag (frames, sub-frame) over which the body's shape about the hips repeats (walking, running): the
    pooled squared difference one lag apart over the pairs' spread under REPEATS; None when it does not."""
    lags = np.arange(max(2, int(PERIOD_S[0] * fps)), int(PERIOD_S[1] * fps) + 2)
    ratio = np.full(len(lags), np.inf)
    for i, lag in enumerate(lags):
        if lag >= len(relative) - 8:
            break
        both = np.isfinite(relative[:-lag]).all(-1) & np.isfinite(relative[lag:]).all(-1)  # (T - lag, K)
        count = both.sum(0)
        used = count >= max(lag / 2, 8)
        if not used.any():
            continue
        early, late = (np.where(both[..., None], part, 0.0) for part in (relative[:-lag], relative[lag:]))
        difference = ((early - late) ** 2).sum((0, 2))[used].sum()
        spread = sum(((x ** 2).sum(0) - (x.sum(0) ** 2) / np.maximum(count, 1)[:, None]).sum(-1)[used].sum()
                     for x in (early, late))  # each keypoint's pairs' count x variance
        ratio[i] = difference / max(spread, 1e-12)
    best = int(np.argmin(ratio))
    if not ratio[best] < REPEATS or best in (0, len(lags) - 1) or not np.isfinite(ratio[best + 1]):
        return None
    a, b, c = ratio[best - 1:best + 2]
    curve = a - 2 * b + c
    shift = 0.5 * (a - c) / curve if curve > 0 else 0.0
    return float(lags[best] + np.clip(shift, -0.5, 0.5))


def _stride_average(relative: np.ndarray, spread: np.ndarray, fps: float, half: int) -> np.ndarray:
    """(T, K, 3) the body about the hips, averaged with itself a stride before and after where the motion repeats
    (a walk's limbs pass through the same poses each stride): each frame's fit (noise variance `spread` (T, K))
    blended with the mean of its strides by the share that minimises the expected error, the strides' bias read
    off their gap to the fit beyond what noise explains (judged over twice the window, as `_widen`)."""
    stride = _stride(relative, fps)
    if stride is None:
        return relative
    sides = [(_shifted(relative, lag), _shifted(spread, lag)) for lag in (-stride, stride)]
    have = np.stack([np.isfinite(v).all(-1) & np.isfinite(w) for v, w in sides])  # (2, T, K)
    count = have.sum(0)
    total = sum(np.where(h[..., None], np.nan_to_num(v), 0.0) for h, (v, _) in zip(have, sides))
    other = total / np.maximum(count, 1)[..., None]
    other_var = sum(np.where(h, np.nan_to_num(w), 0.0) for h, (_, w) in zip(have, sides)) / np.maximum(count, 1) ** 2
    own = np.nan_to_num(spread, nan=0.0)
    gap2 = np.where(count > 0, np.nan_to_num(((other - relative) ** 2).sum(-1), nan=0.0), 0.0)
    bias2 = np.maximum(_box_mean(gap2, 2 * half) - BIAS_TRUST * (own + other_var), 0.0)
    share = np.where(count > 0, own / np.maximum(own + other_var + bias2, 1e-12), 0.0)
    share = np.where(np.isfinite(relative).all(-1), share, 0.0)
    return np.where(share[..., None] > 0, (1 - share[..., None]) * relative + share[..., None] * other, relative)


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


def _unswap(points, keep, measured, half, flip) -> None:
    """Exchanges left and right (in place) on frames that fit their neighbours' fit (leave-one-out) much better
    exchanged. A swapped frame pulls its neighbours' fit too (most at a clip's or a hole's edge, where the fit is
    one-sided), so only the clearest frame of each window is exchanged per round, and the fit made again."""
    sided = np.flatnonzero(flip != np.arange(len(flip)))
    cap = 0.5  # metres: one wild keypoint must not decide a frame
    done = np.zeros(len(points), bool)  # exchanged once: never exchanged back
    while True:
        fit = local_cubic(points, keep.astype(float), half, leave_out=True)
        ratio = np.full(len(points), np.inf)
        for t in np.flatnonzero(~done):
            mine = keep[t, sided] & keep[t, flip[sided]] & np.isfinite(fit[t, sided]).all(-1)
            if mine.sum() < 4:
                continue
            k = sided[mine]
            own = np.minimum(_residuals(points[t, k], fit[t, k]), cap).sum()
            swapped = np.minimum(_residuals(points[t, flip[k]], fit[t, k]), cap).sum()
            ratio[t] = swapped / max(own, 1e-12)
        clearest = [t for t in np.flatnonzero(ratio < SWAP_GAIN)
                    if ratio[t] <= ratio[max(0, t - half):t + half + 1].min()]
        if not clearest:
            return
        for t in clearest:
            points[t], measured[t], keep[t] = points[t, flip], measured[t, flip], keep[t, flip]
            done[t] = True


def rigid_groups(points: np.ndarray, placed: np.ndarray, groups) -> np.ndarray:
    """(T, K, 3) points with each group of keypoints that move as one rigid body (a foot: ankle, heel and toes; the
    head: nose, eyes and ears) replaced, on the frames that place the whole group (`placed` (T, K)), by the
    group's shape (its mean over those frames, each frame turned onto it: Procrustes) turned and moved onto them
    (Kabsch): what noise bends out of shape is averaged over the group."""
    points = points.copy()
    for group in groups:
        group = list(group)
        frames = np.flatnonzero(placed[:, group].all(1) & np.isfinite(points[:, group]).all((1, 2)))
        if len(frames) < 3:
            continue
        shapes = points[frames][:, group]  # (F, G, 3)
        centre = shapes.mean(1, keepdims=True)
        shapes = shapes - centre
        template = shapes[len(shapes) // 2]
        for _ in range(3):
            template = (shapes @ _kabsch(shapes, template)).mean(0)  # every frame turned onto the shape
        points[frames[:, None], group] = template @ np.swapaxes(_kabsch(shapes, template), -1, -2) + centre
    return points


def _kabsch(shapes: np.ndarray, template: np.ndarray) -> np.ndarray:
    """(F, 3, 3) per frame the rotation R (applied as shape @ R) that turns the centred (F, G, 3) shapes onto the
    centred (G, 3) template best (least squares, no reflection)."""
    u, _, vt = np.linalg.svd(np.swapaxes(shapes, -1, -2) @ template)
    sign = np.sign(np.linalg.det(u @ vt))
    u[..., :, -1] *= sign[:, None]
    return u @ vt


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
PERIOD_S = (0.6, 1.6)  # a walking or running stride: the cycle a limb repeats
REPEATS = 0.1  # a motion repeats with the stride when one stride on it differs by under this share of its spread
PREDICTS = 0.5  # under this, a stride away predicts a joint better than its average does (a bridge fills from it
CYCLIC_GAP_S = 0.25  # across gaps this long: across shorter ones, the frames at their ends say more)


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
        _unswap(points, keep, measured, local_cubic(points, keep.astype(float), half, leave_out=True), flip)
    fit = local_cubic(points, keep.astype(float), half)
    for _ in range(2):
        residual = _residuals(points, fit)
        sigma = _robust_sigma(residual, keep)
        limit = np.maximum(OUTLIER_SIGMAS * 1.25 * np.nan_to_num(sigma, nan=0.0), MIN_OUTLIER_M)
        keep = measured & np.isfinite(points).all(-1) & ~(residual > limit)
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
    return fit, var * np.einsum("tki,ij,tkj->tk", mix, gram, mix)


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
        early, late = relative[:-lag], relative[lag:]
        both = np.isfinite(early).all(-1) & np.isfinite(late).all(-1)
        used = [k for k in range(both.shape[1]) if both[:, k].sum() >= max(lag / 2, 8)]
        if not used:
            continue
        difference = sum(((early[both[:, k], k] - late[both[:, k], k]) ** 2).sum() for k in used)
        spread = sum(both[:, k].sum() * (early[both[:, k], k].var(0).sum() + late[both[:, k], k].var(0).sum())
                     for k in used)
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


def _qmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    aw, ax, ay, az = np.moveaxis(a, -1, 0)
    bw, bx, by, bz = np.moveaxis(b, -1, 0)
    return np.stack([aw * bw - ax * bx - ay * by - az * bz, aw * bx + ax * bw + ay * bz - az * by,
                     aw * by - ax * bz + ay * bw + az * bx, aw * bz + ax * by - ay * bx + az * bw], -1)


def _qlog(q: np.ndarray) -> np.ndarray:
    """(..., 4) unit quaternions -> (..., 3) rotation vectors (the shorter way round)."""
    q = np.where(q[..., :1] < 0, -q, q)
    norm = np.linalg.norm(q[..., 1:], axis=-1, keepdims=True)
    angle = 2 * np.arctan2(norm, q[..., :1])
    return q[..., 1:] * np.where(norm > 1e-12, angle / np.maximum(norm, 1e-12), 2.0)


def _qexp(v: np.ndarray) -> np.ndarray:
    angle = np.linalg.norm(v, axis=-1, keepdims=True)
    half = angle / 2
    scale = np.where(angle > 1e-12, np.sin(half) / np.maximum(angle, 1e-12), 0.5)
    return np.concatenate([np.cos(half), v * scale], -1)


COAST_S = 0.1  # a hidden joint keeps turning at its last speed, fading over this long (a limb's swing turns back)


def _coast(q: np.ndarray, known: np.ndarray, edge: int, step: int, count: int, fade: float) -> np.ndarray:
    """(count, 4) joint rotation in the `count` frames past `edge` (a seen frame) in direction `step` (+1 forward,
    -1 backward): the rotation at `edge` turning on at its speed there (over the seen frames up to two behind it),
    the speed fading (exponentially, over `fade` frames) so the turn stays under speed x fade."""
    behind = [edge - step * k for k in (2, 1) if known[edge - step * k]] if 0 <= edge - 2 * step < len(q) else []
    behind = behind or ([edge - step] if 0 <= edge - step < len(q) and known[edge - step] else [])
    if not behind:
        return np.broadcast_to(q[edge], (count, 4)).copy()
    back = behind[0]
    speed = _qlog(_qmul(_qconj(q[back]), q[edge])) / abs(edge - back)  # per frame, in the joint's own frame
    frames = np.arange(1, count + 1)
    turned = fade * (1 - np.exp(-frames / fade)) if fade > 0 else np.zeros(count)
    return _qmul(np.broadcast_to(q[edge], (count, 4)), _qexp(turned[:, None] * speed))


def _qconj(q: np.ndarray) -> np.ndarray:
    return q * [1.0, -1.0, -1.0, -1.0]



def _repeat_ratio(flat: np.ndarray, known: np.ndarray, lag: int) -> float:
    """How far a joint's known rotations (T, 9) one `lag` apart differ: the pairs' mean squared difference over
    the sum of their variances (0: they repeat; ~1 or more: no relation); inf with under half a lag (or 8) of
    known pairs."""
    both = known[:-lag] & known[lag:]
    if both.sum() < max(lag / 2, 8):
        return np.inf
    early, late = flat[:-lag][both], flat[lag:][both]
    spread = early.var(0).sum() + late.var(0).sum()  # of the pairs compared: a turn between them is not a stride
    return float(((early - late) ** 2).sum(-1).mean() / spread) if spread > 1e-6 else np.inf


def _period(q: np.ndarray, known: np.ndarray, fps: float) -> float | None:
    """A joint's stride: the lag (frames, sub-frame) over which its known rotations (T, 4) repeat best, when they
    repeat within REPEATS (`_repeat_ratio`); else None."""
    flat = _matrices(q).reshape(len(q), 9)
    lags = np.arange(max(2, int(PERIOD_S[0] * fps)), min(int(PERIOD_S[1] * fps) + 2, len(q) - 1))
    if len(lags) < 3:
        return None
    ratio = np.array([_repeat_ratio(flat, known, lag) for lag in lags])
    best = int(np.argmin(ratio))
    if not ratio[best] < REPEATS or best in (0, len(lags) - 1):
        return None
    a, b, c = ratio[best - 1:best + 2]
    curve = a - 2 * b + c
    shift = 0.5 * (a - c) / curve if np.isfinite(curve) and curve > 0 else 0.0
    return float(lags[best] + np.clip(shift, -0.5, 0.5))


def _cyclic_fill(q: np.ndarray, known: np.ndarray, period: float, min_gap: float = 1) -> np.ndarray | None:
    """(T, 4) a repeating joint's rotations with each unknown frame taken from the nearest stride (whole periods
    away) that knows it, turned to meet the known frames at each end of the gap (the offsets blended across it,
    smoothstep); None when some unknown frame has no stride that knows it."""
    frames = len(q)
    out = q.copy()

    def stride(t):
        for k in sorted((k for k in range(-4, 5) if k), key=abs):
            at = t + k * period
            low = int(np.floor(at))
            if 0 <= low and low + 1 < frames and known[low] and known[low + 1]:
                return _slerp(q[low], q[low + 1], at - low)
            if 0 <= low < frames and at == low and known[low]:
                return q[low]
        return None

    seen = np.flatnonzero(known)
    gaps = [(b, a) for b, a in zip(seen[:-1], seen[1:]) if a - b > min_gap]
    gaps += [(None, seen[0])] if seen[0] >= min_gap else []
    gaps += [(seen[-1], None)] if frames - 1 - seen[-1] >= min_gap else []
    for before, after in gaps:
        inside = range(0 if before is None else before + 1, frames if after is None else after)
        guesses = [stride(t) for t in inside]
        if any(g is None for g in guesses):
            return None
        offsets = []
        for edge in (before, after):
            guess = None if edge is None else stride(edge)
            offsets.append(np.array([1.0, 0, 0, 0]) if guess is None else _qmul(q[edge], _qconj(guess)))
        span = (after if after is not None else frames) - (before if before is not None else -1)
        for i, (t, guess) in enumerate(zip(inside, guesses)):
            u = (i + 1) / span
            offset = _slerp(offsets[0], offsets[1], u * u * (3 - 2 * u))
            out[t] = _qmul(offset, guess)
    step = _turn(out[1:], out[:-1])
    both = known[1:] & known[:-1]
    if both.any() and step[~both].max(initial=0.0) > 2 * np.percentile(step[both], 95) + 0.05:
        return None  # strides that do not join up (the motion changed): no fill from them
    return out


def _turn(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Radians between unit quaternions a and b (..., 4)."""
    return 2 * np.arccos(np.clip(np.abs((a * b).sum(-1)), 0.0, 1.0))


def bridge(local: np.ndarray, known: np.ndarray, fps: float = 24.0) -> np.ndarray:
    """(T, J, 3, 3) joint rotations; `known` (T, J) where each was solved from measured keypoints. Elsewhere a
    joint that repeats with the stride (walking, running) takes its rotations from the nearest stride that saw
    them, met to the gap's ends (`_cyclic_fill`); any other carries on from each side of the gap at the speed it
    turned there, fading over COAST_S (what a limb leaving the frame or going behind someone does next), the two
    blended across the gap (smoothstep); before the first known frame and after the last it carries on the same
    way. Not aimed at keypoints interpolated through the gap: a person who turned round while away would fold
    through themselves; a foot aiming at toes last seen half a stride ago flips."""
    local = local.copy()
    fade = COAST_S * fps
    gapped = np.flatnonzero((~known).any(0) & known.any(0))
    rotations = {j: _quaternions(local[:, j]) for j in gapped}
    periods = {j: _period(rotations[j], known[:, j], fps) for j in gapped}
    found = [p for p in periods.values() if p is not None]
    stride = float(np.median(found)) if found else None  # the body's, from the joints that surely repeat
    for j in gapped:
        seen = np.flatnonzero(known[:, j])
        q = rotations[j]
        cyclic = None if periods[j] is None else _cyclic_fill(q, known[:, j], periods[j])
        if cyclic is None and stride is not None and _repeat_ratio(
                _matrices(q).reshape(len(q), 9), known[:, j], int(round(stride))) < PREDICTS:
            cyclic = _cyclic_fill(q, known[:, j], stride, min_gap=CYCLIC_GAP_S * fps)  # noisier: long gaps only
        if cyclic is not None:
            local[:, j] = _matrices(cyclic)
            continue
        if seen[0] > 0:
            local[:seen[0], j] = _matrices(_coast(q, known[:, j], seen[0], -1, seen[0], fade)[::-1])
        if seen[-1] < len(q) - 1:
            local[seen[-1] + 1:, j] = _matrices(_coast(q, known[:, j], seen[-1], 1, len(q) - 1 - seen[-1], fade))
        for before, after in zip(seen[:-1], seen[1:]):
            if after - before < 2:
                continue
            count = after - before - 1
            ahead = _coast(q, known[:, j], before, 1, count, fade)
            back = _coast(q, known[:, j], after, -1, count, fade)[::-1]
            u = np.arange(1, count + 1) / (after - before)
            blend = u * u * (3 - 2 * u)
            local[before + 1:after, j] = _matrices(np.stack([_slerp(a, b, w) for a, b, w in zip(ahead, back, blend)]))
    return local

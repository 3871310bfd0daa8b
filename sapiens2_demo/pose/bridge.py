"""Joint rotations through the frames their keypoints were not placed in (out of view, hidden, away): a joint
that repeats with the stride (walking, running) takes its rotations from the strides that saw them; any
other turns from its rotation at one end of the gap to the other's (`bridge`)."""

from __future__ import annotations

import numpy as np

from .clip_smoothing import PERIOD_S, REPEATS

PREDICTS = 0.5  # under this, a stride away predicts a joint better than its average does (a bridge fills from it
CYCLIC_GAP_S = 0.25  # across gaps this long: across shorter ones, the frames at their ends say more)


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
    """(T, 4) a repeating joint's rotations with each unknown frame taken from the strides that know it (whole
    periods away, up to four each side, averaged), turned to meet the known frames at each end of the gap (the
    offsets blended across it, smoothstep); None when some unknown frame has no stride that knows it."""
    frames = len(q)
    out = q.copy()

    def one(at):
        low = int(np.floor(at))
        if 0 <= low and low + 1 < frames and known[low] and known[low + 1]:
            return _slerp(q[low], q[low + 1], at - low)
        if 0 <= low < frames and at == low and known[low]:
            return q[low]
        return None

    def stride(t):
        # every stride that knows the frame, averaged: one stride's noise, and a jump where the nearest one that
        # knows it changes from one frame to the next, would pass into the fill
        found = [g for g in (one(t + k * period) for k in range(-4, 5) if k) if g is not None]
        if not found:
            return None
        found = np.array(found)
        found = np.where(((found * found[0]).sum(-1) < 0)[:, None], -found, found)
        mean = found.mean(0)
        return mean / np.linalg.norm(mean)

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
    joint that repeats with the stride (walking, running) takes its rotations from the strides that saw
    them, met to the gap's ends (`_cyclic_fill`); any other turns from its rotation at one end of the gap to the
    other's (slerp, eased in and out: smoothstep), held before the first known frame and after the last. Not
    aimed at keypoints interpolated through the gap: a person who turned round while away would fold through
    themselves; a foot aiming at toes last seen half a stride ago flips. (Carrying a joint on at the speed it had
    at the gap's ends was tried: on noisy input that speed is mostly noise, and it did worse.)"""
    local = local.copy()
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
            local[~known[:, j], j] = _matrices(cyclic[~known[:, j]])
            continue
        local[:seen[0], j], local[seen[-1] + 1:, j] = local[seen[0], j], local[seen[-1], j]
        for before, after in zip(seen[:-1], seen[1:]):
            if after - before < 2:
                continue
            u = np.arange(1, after - before) / (after - before)
            eased = u * u * (3 - 2 * u)
            local[before + 1:after, j] = _matrices(np.stack([_slerp(q[before], q[after], w) for w in eased]))
    return local

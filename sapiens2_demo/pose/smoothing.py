"""Temporal keypoint smoothing for video: the One Euro filter (Casiez, Roussel & Vogel, CHI 2012).

A low-pass filter whose cutoff rises with speed: still keypoints get heavy smoothing (no jitter), fast
ones light smoothing (little lag). One filter per tracked person; positions only (scores pass through, but
a keypoint with score 0, which the decoder gives one it could not place, is held rather than filtered).
"""

from __future__ import annotations

import math

import numpy as np

# Defaults for keypoints in image pixels at video frame rates, tuned on synthetic signals (uniform ±2 px
# jitter on 308 still keypoints; ramps and sines for movement) at 24, 30 and 60 fps:
# - BETA 0.05 per px/s: the cutoff grows with speed (cutoff ~ BETA * v), so the steady-state lag of a movement,
#   v / (2 pi cutoff), stays under 1 / (2 pi BETA) ~ 3 px however fast it is (measured 2.5 px at 300 px/s,
#   2.9 px at 1000 px/s; about 7 px for the first few frames after a standstill-to-300 px/s start).
# - MIN_CUTOFF 0.2 Hz: a still person's ±2 px jitter comes out 3.0x / 3.2x / 3.8x smaller (std) at
#   24 / 30 / 60 fps. The jitter's own apparent speed keeps the cutoff above MIN_CUTOFF, so the usual 1 Hz
#   only gives 2.4x-3.3x; a slow 10 px, 0.5 Hz sway still trails by at most 2 px.
# - D_CUTOFF 1 Hz: the paper's value for smoothing the speed estimate itself.
MIN_CUTOFF_HZ = 0.2
BETA = 0.05
D_CUTOFF_HZ = 1.0
MAX_AGE_S = 0.5  # a track unseen this long is forgotten; if it comes back its filter starts afresh


def smoothing_factor(cutoff_hz: np.ndarray | float, dt: float) -> np.ndarray | float:
    """Exponential-smoothing weight of the new sample for a first-order low-pass at `cutoff_hz`:
    alpha = 1 / (1 + tau / dt) with tau = 1 / (2 pi cutoff)."""
    tau = 1.0 / (2.0 * math.pi * np.asarray(cutoff_hz, dtype=np.float64))
    return 1.0 / (1.0 + tau / dt)


class OneEuroFilter:
    """One Euro filter over an array of any (fixed) shape, element-wise; time `t` in seconds.

    The first sample passes through unchanged. A repeated or earlier timestamp (dt <= 0) returns the
    last output: as dt -> 0 the smoothing factor goes to 0.

    `valid` (a bool mask broadcastable to x; default all) marks the elements to filter. An invalid or
    non-finite element (a keypoint the decoder could not place, score 0) neither moves nor feeds the filter:
    its output is its last filtered value, or, never seen valid, the input itself (0 where not finite).
    So the output is finite for every input, and finite valid input never gives NaN.
    """

    def __init__(self, min_cutoff: float = MIN_CUTOFF_HZ, beta: float = BETA, d_cutoff: float = D_CUTOFF_HZ):
        if not (min_cutoff > 0 and d_cutoff > 0 and beta >= 0):
            raise ValueError(f"One Euro filter needs min_cutoff > 0, d_cutoff > 0 and beta >= 0 "
                             f"(got {min_cutoff}, {d_cutoff}, {beta}).")
        self.min_cutoff = float(min_cutoff)
        self.beta = float(beta)
        self.d_cutoff = float(d_cutoff)
        self.x_prev: np.ndarray | None = None
        self.dx_prev: np.ndarray | None = None
        self.seen: np.ndarray | None = None  # elements that have had a valid sample (x_prev means something)
        self.t_prev: float | None = None

    def __call__(self, x: np.ndarray, t: float, valid: np.ndarray | None = None) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        ok = np.isfinite(x)
        if valid is not None:
            ok &= np.broadcast_to(np.asarray(valid, dtype=bool), x.shape)
        passthrough = np.where(np.isfinite(x), x, 0.0)
        if self.x_prev is None or self.x_prev.shape != x.shape:
            self.x_prev, self.dx_prev, self.seen = np.where(ok, x, 0.0), np.zeros_like(x), ok.copy()
            self.t_prev = float(t)
            return passthrough
        dt = float(t) - self.t_prev
        if dt <= 0:
            return np.where(self.seen, self.x_prev, passthrough)
        first = ok & ~self.seen  # valid for the first time: passes through and starts its filter
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            dx = (x - self.x_prev) / dt
            dx_hat = self.dx_prev + smoothing_factor(self.d_cutoff, dt) * (dx - self.dx_prev)
            cutoff = self.min_cutoff + self.beta * np.abs(dx_hat)
            x_hat = self.x_prev + smoothing_factor(cutoff, dt) * (x - self.x_prev)
        # Overflow (an absurd speed from a tiny dt) must not poison the state: fall back to the sample.
        x_hat = np.where(np.isfinite(x_hat), x_hat, x)
        dx_hat = np.where(np.isfinite(dx_hat), dx_hat, 0.0)
        update = ok & self.seen
        self.x_prev = np.where(update, x_hat, np.where(first, x, self.x_prev))
        self.dx_prev = np.where(update, dx_hat, np.where(first, 0.0, self.dx_prev))
        self.seen = self.seen | ok
        self.t_prev = float(t)
        return np.where(self.seen, self.x_prev, passthrough)


class KeypointSmoother:
    """One OneEuroFilter per track id, for a video's keypoints frame by frame.

    `smooth(track_ids (N,), keypoints (N, K, 2), t, scores (N, K) or None)` returns smoothed (N, K, 2)
    float32 positions in the input's order. Untracked people (id -1) pass through unchanged; a track unseen
    for more than `max_age` seconds is forgotten, so if it reappears its filter restarts from its new
    position. A keypoint with score <= 0 or a non-finite score or position (not visible: the decoder could
    not place it) is held at its last smoothed position and leaves its filter as it was.
    """

    def __init__(self, min_cutoff: float = MIN_CUTOFF_HZ, beta: float = BETA, d_cutoff: float = D_CUTOFF_HZ,
                 max_age: float = MAX_AGE_S):
        OneEuroFilter(min_cutoff, beta, d_cutoff)  # validates the parameters once, up front
        self.min_cutoff, self.beta, self.d_cutoff = min_cutoff, beta, d_cutoff
        self.max_age = float(max_age)
        self._filters: dict[int, OneEuroFilter] = {}
        self._last_seen: dict[int, float] = {}

    @property
    def track_ids(self) -> list[int]:
        """Ids of the tracks whose filters are currently kept."""
        return sorted(self._filters)

    def smooth(self, track_ids: np.ndarray, keypoints: np.ndarray, t: float,
               scores: np.ndarray | None = None) -> np.ndarray:
        track_ids = np.asarray(track_ids, dtype=np.int64).reshape(-1)
        keypoints = np.asarray(keypoints)
        if keypoints.ndim != 3 or keypoints.shape[0] != len(track_ids) or keypoints.shape[2] != 2:
            raise ValueError(f"Expected keypoints of shape (N, K, 2) for {len(track_ids)} track ids, "
                             f"got {keypoints.shape}.")
        if scores is not None:
            scores = np.asarray(scores, dtype=np.float64)
            if scores.shape != keypoints.shape[:2]:
                raise ValueError(f"Expected scores of shape {keypoints.shape[:2]}, got {scores.shape}.")
            with np.errstate(invalid="ignore"):
                visible = np.isfinite(scores) & (scores > 0)
        tracked = track_ids[track_ids >= 0]
        if len(np.unique(tracked)) != len(tracked):
            raise ValueError(f"Track ids must be unique within a frame, got {track_ids.tolist()}.")
        t = float(t)
        self._forget_stale(t)
        out = keypoints.astype(np.float32, copy=True)
        for row, track_id in enumerate(track_ids.tolist()):
            if track_id < 0:
                continue
            if track_id not in self._filters:
                self._filters[track_id] = OneEuroFilter(self.min_cutoff, self.beta, self.d_cutoff)
            valid = None if scores is None else visible[row][:, None]
            out[row] = self._filters[track_id](keypoints[row], t, valid)
            self._last_seen[track_id] = t
        return out

    def _forget_stale(self, t: float) -> None:
        for track_id in [i for i, seen in self._last_seen.items() if t - seen > self.max_age]:
            del self._filters[track_id], self._last_seen[track_id]

    def reset(self) -> None:
        self._filters.clear()
        self._last_seen.clear()

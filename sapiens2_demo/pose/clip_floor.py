"""The clip fit's second pass, on the floor (clip_fit.fit_on_floor): its two terms and where its depth offsets start.

- No sole keypoint (heel, toes) below the floor by more than FLOOR_SLACK: one-sided, a residual over FLOOR_SIGMA.
  The floor is the world's (the first frame's camera); the observations, and so the keypoints the fit moves, are
  each frame's camera's: a turning camera's floor is turned into each frame's (R_t^T up).
- A foot in contact stays where it is in the world: its ankle, heel and toes move at about CONTACT_VELOCITY_SIGMA
  at most over each step into, through and out of a contact (World.contacts' window eats about a frame off each
  end; a foot left free on that step slid 1.5-3 cm under noise), measured in the first frame's camera.
- The depth offsets (clip_fit's slowly varying per-keypoint depth error) start where the first pass left them:
  the fit's depth less the read one, over a second (from zero, 100 iterations left the heavy model's drifting depth
  2 mm further off).
"""

from __future__ import annotations

import numpy as np
import torch

FLOOR_ITERATIONS, FLOOR_SLACK, FLOOR_SIGMA, CONTACT_VELOCITY_SIGMA = 100, 0.005, 0.003, 0.01  # -, m, m, m/s


class FloorTerms:
    """`terms(full)`: the two terms' energy on the fit's (T, 3, K) keypoints (0 where neither is given). `soles`
    and `feet`: the keypoint columns of the soles and of each foot (left's then right's, alike in number); floor
    (up (3,), offset) in the first frame's camera; contacts (T, 2) bool; turns (T, 3, 3): frame t's camera -> the
    first's, None for a still camera."""

    def __init__(self, frames: int, fps: float, soles: list[int], feet: list[int], floor: tuple | None = None,
                 contacts: np.ndarray | None = None, turns: np.ndarray | None = None, dtype=torch.float64):
        self.frames, self.fps, self.soles, self.feet, self.up, self.in_contact = frames, fps, soles, feet, None, None
        self.turns = None if turns is None else torch.as_tensor(np.asarray(turns, np.float64), dtype=dtype)
        if floor is not None:
            up = np.asarray(floor[0], np.float64)
            up = np.broadcast_to(up, (frames, 3)) if turns is None else np.einsum("tji,j->ti", np.asarray(turns), up)
            self.up = torch.as_tensor(np.ascontiguousarray(up), dtype=dtype)[:, :, None]  # (T, 3, 1)
            self.offset = float(floor[1])
        if contacts is not None and frames > 1:
            held = np.asarray(contacts, bool)
            self.in_contact = torch.as_tensor(held[1:] | held[:-1], dtype=dtype)[:, None, :, None]  # (T-1, 1, 2, 1)

    def __call__(self, full: torch.Tensor):
        e = 0.0
        if self.up is not None:
            height = (full[:, :, self.soles] * self.up).sum(1) + self.offset  # (T, soles) above the floor
            e = e + ((torch.relu(-height - FLOOR_SLACK) / FLOOR_SIGMA) ** 2).sum()
        if self.in_contact is not None:
            held = full[:, :, self.feet] if self.turns is None else torch.matmul(self.turns, full[:, :, self.feet])
            step = torch.diff(held, dim=0).view(self.frames - 1, 3, 2, -1)
            e = e + (((step * (self.fps / CONTACT_VELOCITY_SIGMA)) ** 2) * self.in_contact).sum()
        return e


def starting_offsets(gap: np.ndarray, fps: float, limit: float) -> np.ndarray:
    """(T, K) each keypoint's depth offset to start from: its `gap` (the first fit's depth less the read one, NaN
    where not read) averaged over a second about each frame (0 where none), within +-limit."""
    window = max(1, int(round(fps)))
    finite = np.isfinite(gap)
    kernel = np.ones(window)

    def smooth(a):
        return np.apply_along_axis(lambda c: np.convolve(c, kernel, mode="same"), 0, a)

    total, count = smooth(np.where(finite, gap, 0.0)), smooth(finite.astype(float))
    return np.clip(np.where(count > 0, total / np.maximum(count, 1), 0.0), -limit, limit)

"""Heatmaps -> keypoints: a vectorised DARK-UDP equal to transformers' post_process_pose_estimation.

The reference blurs every 256x192 heatmap with an 11x11 Gaussian (seconds for ten people on a CPU), but
its one Newton step only reads the blurred log-heatmap in the 3x3 neighbourhood of each raw argmax.
That neighbourhood needs only a 13x13 window of the raw map, so we blur just those windows.

The one global quantity is the max-preserving scale s = raw_max / blurred_max. The log's derivatives do
not depend on s (log(s*b) = log s + log b) unless the clamp to [1e-3, 50] bites. With raw max M > 0 the
true blurred max lies in [local blurred max, M], so 1 <= s and s*b <= M: if every local b > 1e-3 and
M < 50 no scale can make the clamp bite and the local result is exact. The few other maps get the full
blur, op for op as the reference does, and so do near-singular Newton steps (flat or noisy maps), whose
answer is decided by the reference's own float32 rounding. Maps whose max is <= 0 get the reference's
location (-1, -1) and its (quirky) refinement, which reads the replicate-padded corner and the previous
map in memory. Result: within 0.05 px of transformers (1e-3 px typical), 100x faster on model-like maps.
Where the reference's answer is not finite (a singular Hessian on a nearly flat map, or a NaN/inf map) we
depart from it: such a keypoint sits at its raw argmax with score 0, so every coordinate and score is finite.

This module is the host road, in numpy (on a CPU its argmax is ~5x torch's, and its small float64 steps
measured 4x faster than torch's on the shared 2-core box: `python -m benchmarks pose`); the reference's full
blur is transformers' torch code (pose/dark_udp.py), shared with the device road
(pipelines.device_post.pose_keypoints), which runs the same steps in torch where the heatmaps are.
"""

from __future__ import annotations

import numpy as np

from .. import ledger
from .boxes import crop_params
from .dark_udp import (
    _EPS32,
    _LOG_ROUNDING,
    _MAX_ROUNDING_PX,
    _SAFE_MAX,
    _SAFE_MIN,
    CLAMP_MAX,
    CLAMP_MIN,
    gaussian_kernel1d,
    reference_refine,
    window_half,
)

__all__ = ["CLAMP_MAX", "CLAMP_MIN", "dark_udp", "decode_heatmaps", "gaussian_kernel1d", "heatmap_to_image",
           "slow_path_maps", "window_half"]


def dark_udp(heatmaps, kernel: int = 11, force_reference: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(N, K, h, w) heatmaps -> refined (N, K, 2) x y in heatmap pixels and (N, K) raw peak scores.
    force_reference: every map takes the reference's full blur (for tests and benchmarks)."""
    import torch

    hm = _as_numpy(heatmaps)
    n, k, h, w = hm.shape
    if n * k == 0:
        return np.zeros((n, k, 2), np.float32), np.zeros((n, k), np.float32)
    flat, index, scores, windows = _peaks(hm, kernel)
    x, y = index % w, index // w
    coords, redo = _fast_step(index, scores, windows, h, w, kernel)
    redo_index = np.flatnonzero(redo | force_reference)
    if redo_index.size:
        coords[redo_index] = reference_refine(
            torch.from_numpy(flat), (h, w), torch.from_numpy(redo_index), torch.from_numpy(x), torch.from_numpy(y),
            torch.from_numpy(scores > 0), kernel).numpy()
    coords, scores = _finite(coords.astype(np.float32), scores.astype(np.float32), x, y)
    return coords.reshape(n, k, 2), scores.reshape(n, k)


def heatmap_to_image(coords: np.ndarray, boxes_xyxy: np.ndarray, input_size: tuple[int, int],
                     heatmap_size: tuple[int, int]) -> np.ndarray:
    """Heatmap pixels -> image pixels through each person's crop (UDP: heatmap (w-1, h-1) spans the crop)."""
    center, scale = crop_params(boxes_xyxy, input_size)
    hm_h, hm_w = heatmap_size
    unit = np.array([hm_w - 1, hm_h - 1], dtype=np.float32)
    coords = np.asarray(coords, dtype=np.float32)
    return (coords / unit * scale[:, None, :] + center[:, None, :] - 0.5 * scale[:, None, :]).astype(np.float32)


def heatmap_to_image_on_device(coords, boxes_xyxy: np.ndarray, input_size: tuple[int, int],
                               heatmap_size: tuple[int, int]):
    """`heatmap_to_image` in torch where the (N, K, 2) float32 `coords` are, in the same float32 steps (tensor by
    tensor, no reciprocal of a scalar), so to the bit; the crops' centres and sizes up without a wait."""
    import torch

    center, scale = crop_params(boxes_xyxy, input_size)
    hm_h, hm_w = heatmap_size
    params = ledger.to_device(np.concatenate([center, scale], 1), coords.device, non_blocking=True)
    center, scale = params[:, None, :2], params[:, None, 2:]
    unit = torch.empty(2, dtype=torch.float32, device=coords.device)
    unit[0], unit[1] = hm_w - 1, hm_h - 1
    return coords.float() / unit * scale + center - 0.5 * scale


def decode_heatmaps(heatmaps, boxes_xyxy: np.ndarray, input_size: tuple[int, int],
                    kernel: int = 11, force_reference: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(N, K, h, w) heatmaps of N person crops -> (N, K, 2) image keypoints and (N, K) scores."""
    hm = _as_numpy(heatmaps)
    coords, scores = dark_udp(hm, kernel, force_reference)
    return heatmap_to_image(coords, boxes_xyxy, input_size, hm.shape[-2:]), scores


def slow_path_maps(heatmaps, kernel: int = 11) -> np.ndarray:
    """(N, K) bool: the maps of (N, K, h, w) heatmaps that the fast path hands to the reference's full blur
    (flat or noisy maps, peaks near the clamp, max <= 0). For benchmarks and tests of structured weights."""
    hm = _as_numpy(heatmaps)
    n, k, h, w = hm.shape
    _, index, scores, windows = _peaks(hm, kernel)
    return _fast_step(index, scores, windows, h, w, kernel)[1].reshape(n, k)


# -- internals ----------------------------------------------------------------------------------------
def _as_numpy(heatmaps) -> np.ndarray:
    if hasattr(heatmaps, "detach"):  # a torch tensor, maybe on the GPU or in bf16
        heatmaps = heatmaps.detach().float().cpu().numpy()
    hm = np.ascontiguousarray(heatmaps, dtype=np.float32)
    if hm.ndim != 4:
        raise ValueError(f"heatmaps must be (N, K, h, w); got shape {hm.shape}")
    return hm


def _peaks(hm: np.ndarray, kernel: int):
    """Flat maps (p, h*w), each map's first argmax (torch.argmax's tie rule), its peak value and the
    replicate-padded raw window around it (p, S, S)."""
    n, k, h, w = hm.shape
    p = n * k
    flat = hm.reshape(p, h * w)
    index = flat.argmax(axis=1)
    scores = flat[np.arange(p), index]
    half = window_half(kernel)
    x, y = index % w, index // w
    span = np.arange(-half, half + 1)
    rows, cols = (y[:, None] + span).clip(0, h - 1), (x[:, None] + span).clip(0, w - 1)
    windows = flat[np.arange(p)[:, None, None], rows[:, :, None] * w + cols[:, None, :]]
    return flat, index, scores, windows


def _fast_step(index: np.ndarray, scores: np.ndarray, windows: np.ndarray, h: int, w: int,
               kernel: int) -> tuple[np.ndarray, np.ndarray]:
    """The local step of every map -> (p, 2) float64 x y, and (p,) True for maps it cannot settle (see
    pose.dark_udp.fast_step, its torch twin, for which and why)."""
    x, y = index % w, index // w
    # Blurred values at the replicate-clamped 3x3 neighbourhood of each peak, from 13x13 raw windows.
    blurred = _blur_windows(windows, h, w, x, y, gaussian_kernel1d(kernel))
    exact = (scores > 0) & (blurred.min(axis=(1, 2)) > _SAFE_MIN) & (scores < _SAFE_MAX)
    offset, error = _newton_offset(np.log(np.where(exact[:, None, None], blurred, 1.0)))
    return np.stack([x, y], axis=-1) - offset, ~exact | ~(error < _MAX_ROUNDING_PX)


def _blur_windows(windows: np.ndarray, h: int, w: int, x: np.ndarray, y: np.ndarray,
                  g: np.ndarray) -> np.ndarray:
    """Zero-padded Gaussian blur at rows clip(y-1..y+1) and cols clip(x-1..x+1) of each map, from its
    replicate-padded raw window (p, S, S) around (x, y)."""
    p, size = windows.shape[0], windows.shape[1]
    span = np.arange(size) - size // 2
    rows, cols = y[:, None] + span, x[:, None] + span  # (p, 13)
    inside = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :]
    window = np.where(inside, windows, np.float32(0)).astype(np.float64)  # the blur's zero padding
    kernel = g.size
    # Separable blur: rows then columns, giving the blur at window centres offset -1, 0, +1.
    by_rows = np.lib.stride_tricks.sliding_window_view(window, kernel, axis=1) @ g  # (p, 3, 13)
    full3 = np.lib.stride_tricks.sliding_window_view(by_rows, kernel, axis=2) @ g  # (p, 3, 3)
    # Replicate padding of the log map = clamp the neighbour position to the map.
    ri = np.clip(y[:, None] + np.arange(-1, 2), 0, h - 1) - y[:, None] + 1
    ci = np.clip(x[:, None] + np.arange(-1, 2), 0, w - 1) - x[:, None] + 1
    return full3[np.arange(p)[:, None, None], ri[:, :, None], ci[:, None, :]]


def _newton_offset(logs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One Newton step on a (p, 3, 3) log neighbourhood (rows y-1..y+1, cols x-1..x+1) -> (p, 2) dx dy,
    and a bound on how far float32 rounding of the log values (as in the reference) could move it."""
    v0, xp, xm = logs[:, 1, 1], logs[:, 1, 2], logs[:, 1, 0]
    yp, ym, pp, mm = logs[:, 2, 1], logs[:, 0, 1], logs[:, 2, 2], logs[:, 0, 0]
    gx, gy = 0.5 * (xp - xm), 0.5 * (yp - ym)
    hxx = xp - 2 * v0 + xm + _EPS32
    hyy = yp - 2 * v0 + ym + _EPS32
    hxy = 0.5 * (pp - xp - yp + 2 * v0 - xm - ym + mm)
    det = hxx * hyy - hxy * hxy
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):  # flat maps: det 0, as the reference
        dx = (hyy * gx - hxy * gy) / det
        dy = (-hxy * gx + hxx * gy) / det
        # Perturbing the logs by delta moves the step by about delta * (1 + 4|step|) / (smallest |eigenvalue|).
        smallest = np.abs(np.abs(0.5 * (hxx + hyy)) - np.sqrt(0.25 * (hxx - hyy) ** 2 + hxy ** 2))
        delta = _LOG_ROUNDING * (1.0 + np.abs(logs).max(axis=(1, 2)))
        error = delta * (1.0 + 4.0 * np.maximum(np.abs(dx), np.abs(dy))) / smallest
    error = np.where(smallest > 0, error, np.inf)
    return np.stack([dx, dy], axis=-1), error


def _finite(coords: np.ndarray, scores: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keypoints whose x, y or score is not finite go to their raw argmax with score 0 (pose.dark_udp._finite)."""
    bad = ~(np.isfinite(coords).all(axis=-1) & np.isfinite(scores))
    if bad.any():
        coords = coords.copy()
        coords[bad] = np.stack([x[bad], y[bad]], axis=-1)
        scores = np.where(bad, np.float32(0), scores)
    return coords, scores

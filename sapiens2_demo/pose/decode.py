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

So the refinement needs, per map, only its argmax, its peak and that 13x13 window (`PeakData`); whole maps
only for the few redone ones. `decode_peaks` decodes from such a summary (cut out on the GPU by
`pipelines.device_post.heatmap_peaks`), with the same result as `decode_heatmaps`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .boxes import crop_params

CLAMP_MIN, CLAMP_MAX = 1e-3, 50.0  # clamp before the log, as the original Sapiens2 code
_SAFE_MIN, _SAFE_MAX = CLAMP_MIN * (1 + 1e-4), CLAMP_MAX * (1 - 1e-4)  # margins for float rounding of s
_EPS32 = float(np.finfo(np.float32).eps)  # the reference adds float32 eps to the Hessian diagonal
_LOG_ROUNDING = 1e-6  # bound on float32 rounding of the reference's blurred log values (measured ~3e-7)
_MAX_ROUNDING_PX = 0.02  # steps more sensitive are redone the reference's way (bound is ~4x pessimistic)


def gaussian_kernel1d(kernel: int = 11) -> np.ndarray:
    """cv2's Gaussian for ksize k with sigma = 0.3*((k-1)*0.5-1)+0.8 (what sigma=0 means in cv2)."""
    if kernel % 2 == 0 or kernel <= 1:
        raise ValueError("Kernel size must be an odd integer greater than 1.")
    sigma = 0.3 * ((kernel - 1) * 0.5 - 1) + 0.8
    x = np.arange(kernel, dtype=np.float64) - (kernel - 1) / 2
    g = np.exp(-0.5 * (x / sigma) ** 2)
    return g / g.sum()


@dataclass
class PeakData:
    """What DARK-UDP needs of (N, K, h, w) heatmaps, without the maps themselves.

    index: (N, K) int64 first argmax in each flattened h*w map; scores: (N, K) float32 peak values;
    windows: (N, K, S, S) float32 raw values at rows y-S//2..y+S//2, cols x-S//2..x+S//2 of each peak,
    positions outside the map replaced by the nearest edge pixel (replicate padding), S = 2*(kernel//2+1)+1;
    heatmaps: the full maps (a torch tensor, on any device, or an array), read only for the few maps that
    need the reference's full blur.
    """

    index: np.ndarray
    scores: np.ndarray
    windows: np.ndarray
    heatmap_size: tuple[int, int]
    heatmaps: Any = None


def window_half(kernel: int) -> int:
    """Half-width of the raw window a blurred 3x3 neighbourhood needs: kernel//2 + 1 (6 for 11)."""
    return kernel // 2 + 1


def dark_udp(heatmaps, kernel: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """(N, K, h, w) heatmaps -> refined (N, K, 2) x y in heatmap pixels and (N, K) raw peak scores."""
    hm = _as_numpy(heatmaps)
    n, k, h, w = hm.shape
    p = n * k
    if p == 0:
        return np.zeros((n, k, 2), np.float32), np.zeros((n, k), np.float32)
    flat = hm.reshape(p, h * w)
    index = _argmax_rows(flat)
    scores = flat[np.arange(p), index]
    windows = _gather_windows(hm.reshape(-1), p, h, w, index % w, index // w, window_half(kernel))
    return _refine(index, scores, windows, (n, k, h, w), flat, kernel)


def dark_udp_from_peaks(peaks: PeakData, kernel: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """`dark_udp` from a PeakData: the same (N, K, 2) x y in heatmap pixels and (N, K) scores."""
    n, k = peaks.index.shape
    h, w = peaks.heatmap_size
    p, size = n * k, 2 * window_half(kernel) + 1
    if peaks.windows.shape != (n, k, size, size):
        raise ValueError(f"PeakData windows must be (N, K, {size}, {size}) for kernel {kernel}; "
                         f"got {peaks.windows.shape}")
    if p == 0:
        return np.zeros((n, k, 2), np.float32), np.zeros((n, k), np.float32)
    index = np.asarray(peaks.index, dtype=np.int64).reshape(p)
    scores = np.asarray(peaks.scores, dtype=np.float32).reshape(p)
    windows = np.asarray(peaks.windows, dtype=np.float32).reshape(p, size, size)
    return _refine(index, scores, windows, (n, k, h, w), _MapRows(peaks.heatmaps, p, h * w), kernel)


def heatmap_to_image(coords: np.ndarray, boxes_xyxy: np.ndarray, input_size: tuple[int, int],
                     heatmap_size: tuple[int, int]) -> np.ndarray:
    """Heatmap pixels -> image pixels through each person's crop (UDP: heatmap (w-1, h-1) spans the crop)."""
    center, scale = crop_params(boxes_xyxy, input_size)
    hm_h, hm_w = heatmap_size
    unit = np.array([hm_w - 1, hm_h - 1], dtype=np.float32)
    coords = np.asarray(coords, dtype=np.float32)
    return (coords / unit * scale[:, None, :] + center[:, None, :] - 0.5 * scale[:, None, :]).astype(np.float32)


def decode_heatmaps(heatmaps, boxes_xyxy: np.ndarray, input_size: tuple[int, int],
                    kernel: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """(N, K, h, w) heatmaps of N person crops -> (N, K, 2) image keypoints and (N, K) scores."""
    hm = _as_numpy(heatmaps)
    coords, scores = dark_udp(hm, kernel)
    return heatmap_to_image(coords, boxes_xyxy, input_size, hm.shape[-2:]), scores


def decode_peaks(peaks: PeakData, boxes_xyxy: np.ndarray, input_size: tuple[int, int],
                 kernel: int = 11) -> tuple[np.ndarray, np.ndarray]:
    """`decode_heatmaps` from a PeakData: (N, K, 2) image keypoints and (N, K) scores."""
    coords, scores = dark_udp_from_peaks(peaks, kernel)
    return heatmap_to_image(coords, boxes_xyxy, input_size, peaks.heatmap_size), scores


# -- internals ----------------------------------------------------------------------------------------
def _as_numpy(heatmaps) -> np.ndarray:
    if hasattr(heatmaps, "detach"):  # a torch tensor, maybe on the GPU or in bf16
        heatmaps = heatmaps.detach().float().cpu().numpy()
    hm = np.ascontiguousarray(heatmaps, dtype=np.float32)
    if hm.ndim != 4:
        raise ValueError(f"heatmaps must be (N, K, h, w); got shape {hm.shape}")
    return hm


def _argmax_rows(flat: np.ndarray) -> np.ndarray:
    """First index of each row's max (torch.argmax's tie rule); numpy's SIMD argmax beats torch's here."""
    return flat.argmax(axis=1)


def _refine(index: np.ndarray, scores: np.ndarray, windows: np.ndarray, shape: tuple[int, int, int, int],
            flat, kernel: int) -> tuple[np.ndarray, np.ndarray]:
    """DARK-UDP from each map's argmax `index` (p,), peak `scores` (p,) and raw `windows` (p, S, S); `flat`
    gives whole maps as flat[rows] -> (len(rows), h*w), read only for maps redone the reference's way."""
    n, k, h, w = shape
    x, y = index % w, index // w
    valid = scores > 0  # the reference puts maps with max <= 0 at (-1, -1)

    # Blurred values at the replicate-clamped 3x3 neighbourhood of each peak, from 13x13 raw windows.
    blurred = _blur_windows(windows, h, w, x, y, gaussian_kernel1d(kernel))
    exact = valid & (blurred.min(axis=(1, 2)) > _SAFE_MIN) & (scores < _SAFE_MAX)
    offset, error = _newton_offset(np.log(np.where(exact[:, None, None], blurred, 1.0)))
    coords = np.stack([x, y], axis=-1) - offset

    # Redo the rest the reference's way, in float32, on just those maps: maps where the clamp might
    # bite, maps with max <= 0, and ill-conditioned steps (a near-singular Hessian) where the reference's
    # own float32 rounding decides the answer, so only its exact arithmetic reproduces it.
    redo = ~exact | ~(error < _MAX_ROUNDING_PX)
    redo_index = np.flatnonzero(redo)
    if redo_index.size:
        coords[redo_index] = _reference_refine(flat, (h, w), redo_index, x, y, valid, kernel)
    coords, scores = _finite(coords.astype(np.float32), scores.astype(np.float32), x, y)
    return coords.reshape(n, k, 2), scores.reshape(n, k)


def _finite(coords: np.ndarray, scores: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Keypoints (p, 2) whose refined x or y, or whose score, is not finite go to their raw argmax (x, y)
    with score 0 ("not visible"). A nearly flat map (a constant plus float32 noise) makes the reference's
    Hessian singular, so its Newton step divides by zero: inf or NaN, which video smoothing would spread and
    JSON cannot hold. NaN/inf heatmaps (a model overflow) give non-finite peaks and scores."""
    bad = ~(np.isfinite(coords).all(axis=-1) & np.isfinite(scores))
    if bad.any():
        coords = coords.copy()
        coords[bad] = np.stack([x[bad], y[bad]], axis=-1)
        scores = np.where(bad, np.float32(0), scores)
    return coords, scores


class _MapRows:
    """flat[rows] of (N, K, h, w) heatmaps held elsewhere (a tensor on the GPU): fetches just those maps."""

    def __init__(self, heatmaps, p: int, hw: int):
        self.heatmaps, self.shape = heatmaps, (p, hw)

    def __getitem__(self, rows: np.ndarray) -> np.ndarray:
        if self.heatmaps is None:
            raise ValueError("These heatmaps need the full-map refinement, but PeakData.heatmaps is None.")
        if hasattr(self.heatmaps, "detach"):
            import torch

            flat = self.heatmaps.detach().reshape(self.shape)
            picked = flat[torch.as_tensor(np.asarray(rows), device=flat.device)]
            return picked.float().cpu().numpy()
        return np.asarray(self.heatmaps, dtype=np.float32).reshape(self.shape)[rows]


def _gather_windows(values: np.ndarray, p: int, h: int, w: int, x: np.ndarray, y: np.ndarray,
                    half: int) -> np.ndarray:
    """(p, 2*half+1, 2*half+1) raw values around each peak of the flat maps, replicate-padded."""
    span = np.arange(-half, half + 1)
    rows, cols = (y[:, None] + span).clip(0, h - 1), (x[:, None] + span).clip(0, w - 1)
    flat_index = np.arange(p)[:, None, None] * (h * w) + rows[:, :, None] * w + cols[:, None, :]
    return values[flat_index]


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


def _reference_log_maps(maps: np.ndarray, kernel: int):
    """log(clamp(max-preserving blur)) of whole maps (M, h, w), op for op as transformers' float32 code
    (zero pad, torchvision Gaussian blur, rescale to the original max), so results match bit for bit."""
    import torch
    import torch.nn.functional as F
    import torchvision.transforms.v2.functional as tvF

    sigma = 0.3 * ((kernel - 1) * 0.5 - 1) + 0.8
    border = (kernel - 1) // 2
    t = torch.from_numpy(np.ascontiguousarray(maps, dtype=np.float32))
    origin_maxes = t.amax(dim=(1, 2))
    padded = F.pad(t, (border, border, border, border), mode="constant", value=0.0)
    result = tvF.gaussian_blur(padded, kernel_size=[kernel, kernel], sigma=[sigma, sigma])[:, border:-border,
                                                                                           border:-border]
    result_maxes = result.amax(dim=(1, 2))
    safe_maxes = torch.where(result_maxes > 0, result_maxes, torch.ones_like(result_maxes))
    scale = torch.where(result_maxes > 0, origin_maxes / safe_maxes, torch.ones_like(origin_maxes))
    return (result * scale[:, None, None]).clamp(CLAMP_MIN, CLAMP_MAX).log()


def _reference_refine(flat: np.ndarray, size: tuple[int, int], index: np.ndarray, x: np.ndarray,
                      y: np.ndarray, valid: np.ndarray, kernel: int) -> np.ndarray:
    """The reference's refinement for maps `index` of `flat` (p, h*w) -> (len(index), 2) x y.

    It reads the flat, replicate-padded log maps at x+1 + (y+1)*pw plus fixed offsets. A map with max <= 0
    sits at (-1, -1), i.e. padded (0, 0), so its left/up neighbours are the previous map's last padded
    cells (map 0 wraps to the last map): we gather those maps too and index the same way.
    """
    import torch
    import torch.nn.functional as F

    h, w = size
    p = flat.shape[0]
    pw, stride = w + 2, (h + 2) * (w + 2)
    bad = ~valid[index]
    needed = np.unique(np.concatenate([index, (index[bad] - 1) % p]))
    logs = _reference_log_maps(flat[needed].reshape(-1, h, w), kernel)
    padded = F.pad(logs[None], (1, 1, 1, 1), mode="replicate")[0].reshape(-1)  # (len(needed) * stride,)
    slot = np.searchsorted(needed, index)  # where each redone map sits in `padded`
    xi = torch.from_numpy(np.where(valid[index], x[index], -1).astype(np.float32))
    yi = torch.from_numpy(np.where(valid[index], y[index], -1).astype(np.float32))
    base = torch.from_numpy(slot * stride) + xi.long() + 1 + (yi.long() + 1) * pw
    # A bad map's negative offsets land in the previous map: shift them to that map's slot in `padded`.
    prev_slot = np.searchsorted(needed, (index - 1) % p)
    jump = torch.from_numpy((prev_slot + 1 - slot) * stride)  # 0 when the previous map is adjacent

    def value(offset: int):
        where = base + offset
        if offset < 0:  # only reaches the previous map when base is padded (0, 0) of a bad map
            where = torch.where(torch.from_numpy(bad), where + jump, where)
        return padded[where]

    v00, v01, v0m1 = value(0), value(1), value(-1)
    v10, vm10, v11, vm1m1 = value(pw), value(-pw), value(pw + 1), value(-(pw + 1))
    gradient_x = 0.5 * (v01 - v0m1)
    gradient_y = 0.5 * (v10 - vm10)
    hessian_xx = v01 - 2 * v00 + v0m1
    hessian_yy = v10 - 2 * v00 + vm10
    hessian_xy = 0.5 * (v11 - v01 - v10 + v00 + v00 - v0m1 - vm10 + vm1m1)
    eps = torch.finfo(hessian_xx.dtype).eps
    hessian_xx = hessian_xx + eps
    hessian_yy = hessian_yy + eps
    determinant = hessian_xx * hessian_yy - hessian_xy * hessian_xy
    offset_x = (hessian_yy * gradient_x - hessian_xy * gradient_y) / determinant
    offset_y = (-hessian_xy * gradient_x + hessian_xx * gradient_y) / determinant
    return (torch.stack([xi, yi], dim=-1) - torch.stack([offset_x, offset_y], dim=-1)).numpy()


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

"""DARK-UDP refinement in torch, on whatever device the heatmaps are (see pose/decode.py for the why).

The device road (pipelines.device_post.pose_keypoints) runs all of it where the heatmaps are, so no heatmap
leaves the device. The fast step works in float32 on (p, 13, 13) windows, in logs relative to the peak (float64
is slow on the GPUs a Space offers: 1/64 of float32's rate on an L4 or A10G); the reference path is
transformers' float32 arithmetic, op for op, on just the maps that need it (or on all of them with
force_reference). The host road (pose.decode) has a numpy twin of the fast step (faster on a CPU, where
torch's small ops measured 4x slower) and shares reference_refine, on CPU tensors.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from .. import ledger

CLAMP_MIN, CLAMP_MAX = 1e-3, 50.0  # clamp before the log, as the original Sapiens2 code
_SAFE_MIN, _SAFE_MAX = CLAMP_MIN * (1 + 1e-4), CLAMP_MAX * (1 - 1e-4)  # margins for float rounding of s
_EPS32 = float(np.finfo(np.float32).eps)  # the reference adds float32 eps to the Hessian diagonal
_LOG_ROUNDING = 1e-6  # bound on float32 rounding of the reference's blurred log values (measured ~3e-7)
_MAX_ROUNDING_PX = 0.02  # steps more sensitive are redone the reference's way (bound is ~4x pessimistic)
# Bound on our float32 rounding of the logs relative to the peak, log(b / b0): the blur's two 11-term sums of
# positive terms in b and in b0, the division and the log (measured ~2.7e-7; as _LOG_ROUNDING, ~4x that).
_OWN_LOG_ROUNDING = 1e-6
_U32 = _EPS32 / 2  # float32 unit roundoff


def gaussian_kernel1d(kernel: int = 11) -> np.ndarray:
    """cv2's Gaussian for ksize k with sigma = 0.3*((k-1)*0.5-1)+0.8 (what sigma=0 means in cv2)."""
    if kernel % 2 == 0 or kernel <= 1:
        raise ValueError("Kernel size must be an odd integer greater than 1.")
    sigma = 0.3 * ((kernel - 1) * 0.5 - 1) + 0.8
    x = np.arange(kernel, dtype=np.float64) - (kernel - 1) / 2
    g = np.exp(-0.5 * (x / sigma) ** 2)
    return g / g.sum()


def window_half(kernel: int) -> int:
    """Half-width of the raw window a blurred 3x3 neighbourhood needs: kernel//2 + 1 (6 for 11)."""
    return kernel // 2 + 1


def gather_windows(flat, index, h: int, w: int, half: int):
    """(p, h*w) tensor and (p,) argmax -> (p, S, S) raw values around each peak, replicate-padded, S = 2*half+1."""
    import torch

    size = 2 * half + 1
    span = torch.arange(-half, half + 1, device=flat.device)
    rows = (index[:, None] // w + span).clamp_(0, h - 1)
    cols = (index[:, None] % w + span).clamp_(0, w - 1)
    where = (rows[:, :, None] * w + cols[:, None, :]).reshape(-1, size * size)
    return flat.gather(1, where).reshape(-1, size, size)


def refine(flat, index, scores, windows, size: tuple[int, int], kernel: int = 11, force_reference: bool = False):
    """DARK-UDP of p maps -> (p, 2) float32 x y in heatmap pixels, (p,) float32 scores, (p,) bool reference-path mask.

    flat: (p, h*w) float32 maps (read only for maps redone the reference's way); index: (p,) argmax; scores:
    (p,) peak values; windows: (p, S, S) raw windows around the peaks (`gather_windows`). All on one device.
    Keypoints whose answer is not finite go to their raw argmax with score 0 (see pose.decode).
    """
    import torch

    h, w = size
    index = index.long()
    x, y = index % w, index // w
    coords, redo = fast_step(index, scores, windows, h, w, kernel)
    if force_reference:
        redo = torch.ones_like(redo)
    coords = coords.float()
    rows = torch.nonzero(redo).flatten()  # a count crosses (one sync); the maps stay where they are
    if rows.numel():
        coords[rows] = reference_refine(flat, size, rows, x, y, scores > 0, kernel)
    coords, scores = _finite(coords, scores.float(), x, y)
    return coords, scores, redo


def refine_capped(flat, index, scores, windows, size: tuple[int, int], kernel: int = 11, capacity: int = 0):
    """`refine` without a read back (on CUDA a count read back waits for the device): the reference's way for the
    first `capacity` maps that need it, a set of fixed size picked on the device. -> (p, 2) coords, (p,) scores
    and the number of maps that needed it (a 0-dim tensor to copy back with the results: above `capacity`,
    the answer is `refine`'s only for the maps it covered, and the caller redoes the batch with `refine`)."""
    import torch

    h, w = size
    index = index.long()
    x, y = index % w, index // w
    coords, redo = fast_step(index, scores, windows, h, w, kernel)
    coords = coords.float()
    taken = min(int(capacity), redo.shape[0])
    if taken:
        # the maps that need it first, in order, then others to fill the set (computed, not used)
        rows = torch.sort((~redo).to(torch.uint8), stable=True).indices[:taken]
        redone = reference_refine(flat, size, rows, x, y, scores > 0, kernel, fixed=True)
        coords[rows] = torch.where(redo[rows][:, None], redone, coords[rows])
    coords, scores = _finite(coords, scores.float(), x, y)
    return coords, scores, redo.sum()


def fast_step(index, scores, windows, h: int, w: int, kernel: int):
    """The local step of every map -> (p, 2) float32 x y, and (p,) True for maps it cannot settle: maps
    where the clamp might bite, maps with max <= 0, and ill-conditioned steps (a near-singular Hessian)
    where the reference's own float32 rounding (or ours) decides the answer, so only its exact arithmetic
    reproduces it. Those are redone the reference's way, in float32, on just those maps.

    All float32: the Newton step only needs log differences, so it works on log(b / b_peak), numbers
    near 0 whose rounding does not grow with |log b| (up to 6.9 at the clamp); the bound on what our
    rounding and the reference's could move the step sends every step where they matter to the reference."""
    import torch

    x, y = index % w, index // w
    # Blurred values at the replicate-clamped 3x3 neighbourhood of each peak, from 13x13 raw windows.
    blurred = _blur_windows(windows, h, w, x, y, kernel)
    scores = scores.float()
    exact = (scores > 0) & (blurred.amin(dim=(1, 2)) > _SAFE_MIN) & (scores < _SAFE_MAX)
    blurred = torch.where(exact[:, None, None], blurred, 1.0)
    peak = blurred[:, 1:2, 1:2]
    offset, error = _newton_offset(torch.log(blurred / peak), torch.log(peak).abs().flatten())
    return torch.stack([x, y], dim=-1).float() - offset, ~exact | ~(error < _MAX_ROUNDING_PX)


def _blur_windows(windows, h: int, w: int, x, y, kernel: int):
    """Zero-padded Gaussian blur at rows clip(y-1..y+1) and cols clip(x-1..x+1) of each map, from its
    replicate-padded raw window (p, S, S) around (x, y), in float32: sums of positive terms, no cancellation.
    Products and sums, not matmuls: a matmul may run in TF32 (10-bit mantissa) where torch allows it."""
    import torch

    p, size = windows.shape[0], windows.shape[1]
    by_row, by_col = _band(kernel, size, str(windows.device))
    span = torch.arange(size, device=windows.device) - size // 2
    rows, cols = y[:, None] + span, x[:, None] + span  # (p, S)
    inside = ((rows >= 0) & (rows < h))[:, :, None] & ((cols >= 0) & (cols < w))[:, None, :]
    window = torch.where(inside, windows.float(), 0.0)  # the blur's zero padding
    # Separable blur, rows then columns, with a (3, S) band: the blur at window centres -1, 0, +1.
    by_rows = (by_row * window[:, None, :, :]).sum(dim=2)  # (p, 3, S)
    full3 = (by_rows[:, :, None, :] * by_col).sum(dim=3)  # (p, 3, 3)
    # Replicate padding of the log map = clamp the neighbour position to the map.
    steps = torch.arange(-1, 2, device=windows.device)
    ri = (y[:, None] + steps).clamp(0, h - 1) - y[:, None] + 1
    ci = (x[:, None] + steps).clamp(0, w - 1) - x[:, None] + 1
    return full3[torch.arange(p, device=windows.device)[:, None, None], ri[:, :, None], ci[:, None, :]]


@lru_cache(maxsize=8)
def _band(kernel: int, size: int, device: str):
    """A (3, S) float32 band (row i holds the Gaussian at columns i..i+kernel-1), shaped (1, 3, S, 1) to blur
    rows and (1, 1, 3, S) to blur columns; uploaded once per device, from pinned memory (ledger.upload_once), not per
    call (a copy from pageable memory waits for the device)."""
    g = gaussian_kernel1d(kernel)
    band = np.zeros((size - kernel + 1, size), np.float32)
    for i in range(band.shape[0]):
        band[i, i:i + kernel] = g
    return tuple(ledger.upload_once(np.ascontiguousarray(b), device) for b in (band[None, :, :, None], band[None, None]))


def _newton_offset(logs, peak_log):
    """One Newton step on a (p, 3, 3) float32 neighbourhood of logs relative to the peak's, log(b / b[1, 1])
    (rows y-1..y+1, cols x-1..x+1; |log b_peak| is `peak_log`) -> (p, 2) dx dy, and a bound on how far
    rounding could move it: the reference's float32 rounding of its absolute logs, ours of the relative
    ones, and our float32 rounding of the 2x2 solve."""
    import torch

    v0, xp, xm = logs[:, 1, 1], logs[:, 1, 2], logs[:, 1, 0]
    yp, ym, pp, mm = logs[:, 2, 1], logs[:, 0, 1], logs[:, 2, 2], logs[:, 0, 0]
    gx, gy = 0.5 * (xp - xm), 0.5 * (yp - ym)
    hxx = xp - 2 * v0 + xm + _EPS32
    hyy = yp - 2 * v0 + ym + _EPS32
    hxy = 0.5 * (pp - xp - yp + 2 * v0 - xm - ym + mm)
    det = hxx * hyy - hxy * hxy  # flat maps: det 0, a division by zero, as the reference
    dx = (hyy * gx - hxy * gy) / det
    dy = (-hxy * gx + hxx * gy) / det
    # Perturbing the logs by delta moves the step by about delta * (1 + 4|step|) / (smallest |eigenvalue|).
    smallest = torch.abs(torch.abs(0.5 * (hxx + hyy)) - torch.sqrt(0.25 * (hxx - hyy) ** 2 + hxy ** 2))
    relative = logs.abs().amax(dim=(1, 2))
    delta = _LOG_ROUNDING * (1.0 + peak_log + relative) + _OWN_LOG_ROUNDING * (1.0 + relative)
    step = torch.maximum(dx.abs(), dy.abs())
    error = delta * (1.0 + 4.0 * step) / smallest
    # The solve's own rounding: a few units in the determinant's and numerators' terms, over |det|.
    terms = step * (hxx * hyy).abs() + step * hxy * hxy + (hyy * gx).abs() + (hxy * gy).abs() + (hxx * gy).abs() \
        + (hxy * gx).abs()
    error = error + 4 * _U32 * terms / det.abs()
    error = torch.where(smallest > 0, error, torch.inf)
    return torch.stack([dx, dy], dim=-1), error


def reference_log_maps(maps, kernel: int):
    """log(clamp(max-preserving blur)) of whole maps (M, h, w), op for op as transformers' float32 code
    (zero pad, torchvision Gaussian blur, rescale to the original max), so results match bit for bit."""
    import torch
    import torch.nn.functional as F
    import torchvision.transforms.v2.functional as tvF

    sigma = 0.3 * ((kernel - 1) * 0.5 - 1) + 0.8
    border = (kernel - 1) // 2
    origin_maxes = maps.amax(dim=(1, 2))
    padded = F.pad(maps, (border, border, border, border), mode="constant", value=0.0)
    result = tvF.gaussian_blur(padded, kernel_size=[kernel, kernel], sigma=[sigma, sigma])[:, border:-border,
                                                                                           border:-border]
    result_maxes = result.amax(dim=(1, 2))
    safe_maxes = torch.where(result_maxes > 0, result_maxes, torch.ones_like(result_maxes))
    scale = torch.where(result_maxes > 0, origin_maxes / safe_maxes, torch.ones_like(origin_maxes))
    return (result * scale[:, None, None]).clamp(CLAMP_MIN, CLAMP_MAX).log()


def reference_refine(flat, size: tuple[int, int], rows, x, y, valid, kernel: int, fixed: bool = False):
    """The reference's refinement for maps `rows` of `flat` (p, h*w) -> (len(rows), 2) float32 x y.

    It reads the flat, replicate-padded log maps at x+1 + (y+1)*pw plus fixed offsets. A map with max <= 0
    sits at (-1, -1), i.e. padded (0, 0), so its left/up neighbours are the previous map's last padded
    cells (map 0 wraps to the last map): we gather those maps too and index the same way. fixed: every row's
    map before is gathered (2 * len(rows) maps, a size known without reading a count back), not just the
    distinct ones needed.
    """
    import torch
    import torch.nn.functional as F

    h, w = size
    p = flat.shape[0]
    pw, stride = w + 2, (h + 2) * (w + 2)
    good = valid[rows]
    bad = ~good
    if fixed:  # the rows' maps, then each one's map before
        needed = torch.cat([rows, (rows - 1) % p])
        slot = torch.arange(len(rows), device=flat.device)
        jump = (len(rows) + 1) * stride  # from the slot before a row's to its map before's, at len(rows) + slot
    else:  # rows and, for bad ones, the map before: sorted and unique, in one count read back (a mask, not a unique)
        needed = torch.zeros(p, dtype=torch.bool, device=flat.device)
        needed[rows] = True
        needed[(rows - 1) % p] |= bad
        needed = torch.nonzero(needed).flatten()
        slot = torch.searchsorted(needed, rows)  # where each redone map sits in `padded`
        # 0 when the previous map is adjacent
        jump = (torch.searchsorted(needed, (rows - 1) % p) + 1 - slot) * stride
    logs = reference_log_maps(flat[needed].reshape(-1, h, w).float(), kernel)
    padded = F.pad(logs[None], (1, 1, 1, 1), mode="replicate")[0].reshape(-1)  # (len(needed) * stride,)
    xi = torch.where(good, x[rows], -1).float()
    yi = torch.where(good, y[rows], -1).float()
    base = slot * stride + xi.long() + 1 + (yi.long() + 1) * pw
    # A bad map's negative offsets land in the previous map: `jump` shifts them to that map's slot in `padded`.

    def value(offset: int):
        where = base + offset
        if offset < 0:  # only reaches the previous map when base is padded (0, 0) of a bad map
            where = torch.where(bad, where + jump, where)
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
    return torch.stack([xi, yi], dim=-1) - torch.stack([offset_x, offset_y], dim=-1)


def _finite(coords, scores, x, y):
    """Keypoints (p, 2) whose refined x or y, or whose score, is not finite go to their raw argmax (x, y)
    with score 0 ("not visible"). A nearly flat map (a constant plus float32 noise) makes the reference's
    Hessian singular, so its Newton step divides by zero: inf or NaN, which video smoothing would spread and
    JSON cannot hold. NaN/inf heatmaps (a model overflow) give non-finite peaks and scores."""
    import torch

    bad = ~(torch.isfinite(coords).all(dim=-1) & torch.isfinite(scores))
    coords = torch.where(bad[:, None], torch.stack([x, y], dim=-1).float(), coords)
    return coords, torch.where(bad, torch.zeros_like(scores), scores)

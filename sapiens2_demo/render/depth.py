"""Depth drawing (reference rule): inverse depth coloured with matplotlib 'turbo' between bounds taken from
the 1st and 99th percentiles of foreground depth, clamped to 0.1-250 m; background grey (100, 100, 100).

Near is red, far is blue. `DepthAnnotator.annotate` returns the depth image alone, at the image's size
(so it lines up with the photo); `depth_colorbar` draws the matching scale in metres as a separate
strip and `attach_colorbar` puts that strip to the right of an image.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

from ..results import PointmapResult, resolve_mask
from ..util import ArrayMemo

NEAR_LIMIT_M = 0.1
FAR_LIMIT_M = 250.0
PERCENTILES = (1.0, 99.0)
SUMMARY_PERCENTILES = (PERCENTILES[0], 50.0, PERCENTILES[1])  # an image answer's summary: the bounds and the median
BACKGROUND = (100, 100, 100)


@dataclass(frozen=True)
class DepthBounds:
    near: float  # metres, drawn at the top / red end
    far: float  # metres, drawn at the bottom / blue end


@lru_cache(maxsize=8)
def colormap_lut(name: str = "turbo") -> np.ndarray:
    """(256, 3) uint8 RGB table of a matplotlib colormap, read-only."""
    from matplotlib import colormaps

    lut = np.rint(colormaps[name](np.linspace(0.0, 1.0, 256))[:, :3] * 255).astype(np.uint8)
    lut.setflags(write=False)
    return lut


def _depth_of(result: PointmapResult | np.ndarray) -> np.ndarray:
    depth = result.depth if isinstance(result, PointmapResult) else np.asarray(result)
    if depth.ndim != 2:
        raise ValueError(f"expected an (H, W) depth map, got shape {depth.shape}")
    return depth


def valid_depth(depth: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Pixels with a usable depth: finite, in front of the camera, and inside `mask` when given."""
    valid = np.isfinite(depth) & (depth > 0)
    mask = resolve_mask(None, mask, depth.shape, use_result_mask=False)
    if mask is not None:
        valid &= mask
    return valid


def depth_bounds(depth: PointmapResult | np.ndarray, mask: np.ndarray | None = None) -> DepthBounds:
    """1st/99th percentile of the valid (foreground) depth, each clamped to [0.1, 250] m.

    With no valid pixel the whole clamp range is used; equal bounds are widened slightly.
    """
    found = depth_percentiles(depth, PERCENTILES, mask)
    return DepthBounds(NEAR_LIMIT_M, FAR_LIMIT_M) if found is None else clamped_bounds(*found)


def depth_percentiles(result: PointmapResult | np.ndarray, q, mask: np.ndarray | None = None) -> np.ndarray | None:
    """np.percentile (linear) of the valid depths in metres (inside `mask` when given), or None when none is.
    A light answer's millimetres are counted (a histogram of 65536 bins) rather than decoded and partially sorted
    (at 1080p 4.5 against 48 ms): its order statistics are those of the decoded map, decoding being monotone."""
    if isinstance(result, PointmapResult) and result.points is None and result.depth_mm is not None:
        mask = resolve_mask(None, mask, result.depth_mm.shape, use_result_mask=False)
        millimetres = result.depth_mm if mask is None else np.where(mask, result.depth_mm, np.uint16(0))
        counts = np.bincount(millimetres.ravel(), minlength=65536)
        counts[0] = 0  # 0: invalid or background
        running = np.cumsum(counts)
        if not running[-1]:
            return None
        ranks = np.asarray(q, dtype=np.float64) / 100 * (int(running[-1]) - 1)
        below, above = np.floor(ranks).astype(np.int64), np.ceil(ranks).astype(np.int64)
        low, high = (np.searchsorted(running, k, side="right").astype(np.float64) for k in (below, above))
        return (low + (high - low) * (ranks - below)) * 0.001
    depth = _depth_of(result)
    if not isinstance(result, PointmapResult):
        values = depth[valid_depth(depth, mask)]
        return positive_percentiles(values, q) if values.size else None
    # a result's valid depths are gathered once (the render's bounds and the summary ask for them: ~10 ms CPU at
    # 1080p), counted rather than sorted (positive_percentiles: np.percentile's values), and each set of
    # percentiles asked for is kept (the tab asks for the summary's three once, for both)
    gathered = _gathered(result, depth, mask)
    asked = tuple(np.atleast_1d(q).tolist()), np.shape(q)
    with _GATHERED_LOCK:  # one computation of a set at a time: two threads may ask for the same
        if asked not in gathered.found:
            values = gathered.values
            gathered.found[asked] = positive_percentiles(values, q) if values.size else None
        found = gathered.found[asked]
    return found.copy() if isinstance(found, np.ndarray) else found


def positive_percentiles(values: np.ndarray, q) -> np.ndarray:
    """np.percentile(values, q) (its linear method, q a sequence) of positive finite float32 values: the same numbers.
    The order statistics it interpolates are found by counting the values' leading 16 bits (positive floats sort
    as their bits do: 7 bits of mantissa, a bin 1/128 of an octave wide) and sorting only the values in the bins
    that hold them, not partially sorting all of them (300k-700k depths: 0.8-3.3 against 3.8-13 ms)."""
    values = np.asarray(values)
    qs = np.true_divide(np.asarray(q, dtype=np.float64), 100)
    if values.dtype != np.float32 or values.ndim != 1 or not values.size or qs.ndim != 1:
        return np.percentile(values, q)
    n = values.size
    virtual = (n - 1) * qs  # numpy's steps (_quantile, _get_indexes, _get_gamma, _lerp), for one axis
    previous = np.floor(virtual).astype(np.intp)
    following = previous + 1
    above, below = virtual >= n - 1, virtual < 0
    previous[above], following[above] = -1, -1
    previous[below], following[below] = 0, 0
    gamma = virtual - previous
    ranks = np.unique(np.concatenate([previous, following]) % n)
    bins = values.view(np.uint32) >> 16
    running = np.cumsum(np.bincount(bins))
    found = {}
    for hit in np.unique(np.searchsorted(running, ranks, side="right")):  # the bins holding a wanted rank
        inside = np.sort(values[bins == hit])
        first = int(running[hit - 1]) if hit else 0
        for rank in ranks[(ranks >= first) & (ranks < first + inside.size)]:
            found[int(rank)] = inside[rank - first]
    a = np.array([found[int(i) % n] for i in previous], dtype=np.float32)
    b = np.array([found[int(i) % n] for i in following], dtype=np.float32)
    difference = b - a
    result = np.add(a, difference * gamma)
    np.subtract(b, difference * (1 - gamma), out=result, where=gamma >= 0.5, casting="unsafe")
    return result


@dataclass
class _Gathered:
    valid: np.ndarray  # (H, W) bool: valid_depth of the map inside the mask
    values: np.ndarray  # the valid depths, 1-D, in the map's order
    found: dict  # (q, its shape) -> np.percentile's answer (None: no valid depth)


_GATHERED = ArrayMemo()  # (points, mask) -> _Gathered
_GATHERED_LOCK = threading.RLock()  # one computation of a set of percentiles at a time


def _gathered(result: PointmapResult, depth: np.ndarray, mask) -> _Gathered:
    """`result`'s valid pixels and depths inside `mask`, gathered once while both maps live and hold the same bytes
    (results share their maps: a cached result is a copy of the dataclass, not of its arrays)."""

    def gather() -> _Gathered:
        valid = valid_depth(depth, mask)
        return _Gathered(valid, depth[valid], {})

    return gather() if result.points is None else _GATHERED.get((result.points, mask), gather)


def clamped_bounds(low: float, high: float) -> DepthBounds:
    """Bounds from the two percentiles of the valid depth, each clamped to [0.1, 250] m, equal ones widened."""
    near, far = (float(np.clip(v, NEAR_LIMIT_M, FAR_LIMIT_M)) for v in (low, high))
    if far <= near * (1 + 1e-6):
        near, far = max(near / 1.01, NEAR_LIMIT_M), min(far * 1.01, FAR_LIMIT_M)
    return DepthBounds(near, far)


def inverse_depth_position(depth: np.ndarray, bounds: DepthBounds) -> np.ndarray:
    """0 at `far`, 1 at `near`, linear in 1/depth, clipped to [0, 1] (float32)."""
    inv_far, inv_near = 1.0 / bounds.far, 1.0 / bounds.near
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (np.float32(1) / depth.astype(np.float32) - np.float32(inv_far)) / np.float32(inv_near - inv_far)
    return np.clip(np.nan_to_num(t, nan=0.0), 0.0, 1.0)


def colour_index(depth: np.ndarray, bounds: DepthBounds) -> np.ndarray:
    """uint8 round(255 * inverse_depth_position), in place on one float32 buffer (a 1080p map in a few passes);
    invalid depth gives an arbitrary index, for the caller to mask."""
    inv_far, inv_near = 1.0 / bounds.far, 1.0 / bounds.near
    scale = np.float32(255.0 / (inv_near - inv_far))
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        t = np.reciprocal(np.asarray(depth, dtype=np.float32))  # a new array: the caller's map stays untouched
        t -= np.float32(inv_far)
        t *= scale
        t += np.float32(0.5)
        np.clip(t, 0, 255, out=t)
        if t.size:  # the clip left only NaN to mend: one pass (np.nan_to_num's four: 1.1 against 0.1 ms at 720p)
            cv2.patchNaNs(t, 0)
        return t.astype(np.uint8)


def _millimetre_colours(bounds: DepthBounds) -> np.ndarray:
    """colour_index of every depth a light answer can hold: the 65536 millimetre codes in metres, computed as
    results.CodedMap.decode computes them (float32 codes times float32 DEPTH_MM)."""
    from ..results import DEPTH_MM

    metres = np.arange(65536, dtype=np.float32)
    metres *= np.float32(DEPTH_MM)
    return colour_index(metres, bounds)


class DepthAnnotator:
    """Inverse-depth colouring of a PointmapResult (or an (H, W) depth map in metres).

    Background = mask False (the given mask, else `result.mask`) or invalid depth (non-finite, <= 0).
    """

    def __init__(self, cmap: str = "turbo", background: tuple[int, int, int] = BACKGROUND):
        self.cmap = cmap
        self.background = tuple(int(c) for c in background)

    def annotate(self, image: np.ndarray | None, result: PointmapResult | np.ndarray,
                 mask: np.ndarray | None = None, bounds: DepthBounds | None = None) -> np.ndarray:
        """RGB uint8 at the depth map's size. `image` is accepted for a uniform annotator API and unused.

        `bounds` defaults to `depth_bounds(depth, mask)`; pass them to share one scale across images.
        """
        if mask is None and isinstance(result, PointmapResult):
            mask = result.mask
        if isinstance(result, PointmapResult) and result.points is None and result.depth_mm is not None:
            # a light answer: its millimetres index a table of every code's colour, no map decoded; the same
            # per-pixel function of the same decoded values (results.CodedMap.decode), so the same bytes
            millimetres = result.depth_mm
            valid = resolve_mask(None, mask, millimetres.shape, use_result_mask=False)
            valid = millimetres > 0 if valid is None else valid & (millimetres > 0)
            bounds = bounds or depth_bounds(result, mask)
            index = _millimetre_colours(bounds)[millimetres]
        else:
            depth = _depth_of(result)
            if isinstance(result, PointmapResult):  # the pixels its bounds were taken from, found once
                valid = _gathered(result, depth, resolve_mask(None, mask, depth.shape, use_result_mask=False)).valid
                bounds = bounds or depth_bounds(result, mask)
            else:
                valid = valid_depth(depth, mask)
                bounds = bounds or depth_bounds(depth, mask)
            index = colour_index(depth, bounds)
        out = cv2.LUT(cv2.merge([index] * 3), colormap_lut(self.cmap)[:, None, :])
        # the background in one masked copy (a boolean-index assignment took ~20 ms at 1080p), from a grey picture
        # kept for the size (filling one took ~7 ms at 1080p: a video's frames share one)
        cv2.copyTo(_filled(out.shape, self.background), (~valid).view(np.uint8), out)
        return out


@lru_cache(maxsize=4)
def _filled(shape: tuple, colour: tuple) -> np.ndarray:
    """A read-only uint8 picture of `shape` in one colour."""
    picture = np.empty(shape, np.uint8)
    picture[...] = colour
    picture.setflags(write=False)
    return picture


def _ticks(bounds: DepthBounds, count: int, min_gap: float) -> list[tuple[float, float]]:
    """(position 0-1, depth m) pairs: the exact ends, then depths rounded to 2 significant digits spaced
    evenly in inverse depth, dropping any closer than `min_gap` (in position) to one already kept."""
    ticks = [(1.0, bounds.near), (0.0, bounds.far)]
    for t in np.linspace(1.0, 0.0, count)[1:-1]:
        inv = 1.0 / bounds.far + t * (1.0 / bounds.near - 1.0 / bounds.far)
        value = float(f"{1.0 / inv:.2g}")
        position = float(inverse_depth_position(np.array([value]), bounds)[0])
        if all(abs(position - kept) >= min_gap for kept, _ in ticks):
            ticks.append((position, value))
    return sorted(ticks)


def _format_metres(value: float) -> str:
    return f"{value:.2f}" if value < 1 else f"{value:.3g}"


TILE_LABEL_SHARE = 1 / 19  # a gallery tile's labels: this share of the tile's longer side
TILE_BAR_WIDTH = 4.6  # a tile's colour bar is this many label heights wide
MAX_LABELS_PER_HEIGHT = 5  # a bar's labels are at most 1/5 of its height: the strip keeps about half of it


@lru_cache(maxsize=16)
def depth_colorbar(bounds: DepthBounds, height: int, width: int | None = None, cmap: str = "turbo",
                   fontsize: float | None = None, tile: bool = False) -> np.ndarray:
    """(height, width, 3) uint8 RGB colour scale in metres: near (top) to far (bottom), white background, with
    tick labels right of the strip. Labels are 1/30 of the height (or `fontsize` px).
    Beside a picture shown large (the Depth tab's slider), "m" sits below the strip: an image viewer's toolbar
    covers the top right corner. For a gallery `tile` the strip is narrower, "m" sits above it, and the bottom
    15 % stays clear: the gallery's caption covers the bottom right corner.
    Drawn with PIL (a few ms; matplotlib took ~70 ms), read-only and cached: a request shows it beside both sides
    of its slider.

    Tick positions follow the inverse-depth colouring, so equal steps in metres are not evenly spaced.
    """
    from PIL import Image, ImageDraw, ImageFont

    height = max(int(height), 64)
    # labels at most a fifth of the height: a tile's labels follow its width, and a wide picture's (1920x300) left
    # no room for the strip
    fontsize = min(float(fontsize or np.clip(height / 30.0, 7.0, 40.0)), height / MAX_LABELS_PER_HEIGHT)
    width = int(width or round(fontsize * (TILE_BAR_WIDTH if tile else 6.5)))
    if tile:
        top, bottom = round(fontsize * 1.9), height - max(round(fontsize * 0.8), round(height * 0.15))
        left, right = round(fontsize * 0.35), round(fontsize * 1.25)
    else:  # the top 7 % stays clear (an image viewer's toolbar sits there), the bottom holds the "m"
        top, bottom = max(round(fontsize * 0.6), round(height * 0.07)), height - round(fontsize * 1.6)
        left, right = round(width * 0.08), round(width * 0.30)
    canvas = np.full((height, width, 3), 255, np.uint8)
    rows = np.linspace(255, 0, bottom - top).round().astype(np.uint8)  # row 0 = t 1 = near
    canvas[top:bottom, left:right] = colormap_lut(cmap)[rows][:, None, :]
    picture = Image.fromarray(canvas)
    draw = ImageDraw.Draw(picture)
    font = ImageFont.load_default(size=fontsize)
    bar_px = bottom - top
    ticks = _ticks(bounds, max(3, min(9, int(bar_px // (fontsize * 4)))), min_gap=fontsize * 2.2 / bar_px)
    for position, value in ticks:
        y = bottom - 1 - position * (bar_px - 1)
        draw.line([(right, y), (right + fontsize * 0.35, y)], fill=(0, 0, 0), width=max(1, round(fontsize / 14)))
        draw.text((right + fontsize * 0.5, y), _format_metres(value), fill=(0, 0, 0), font=font, anchor="lm")
    if tile:
        draw.text(((left + right) / 2, top - fontsize * 0.45), "m", fill=(0, 0, 0), font=font, anchor="mb")
    else:
        draw.text(((left + right) / 2, bottom + fontsize * 0.3), "m", fill=(0, 0, 0), font=font, anchor="mt")
    rgb = np.asarray(picture).copy()
    rgb.setflags(write=False)
    return rgb


def tile_fontsize(height: int, width: int) -> float:
    """The label size that keeps a gallery tile's labels at TILE_LABEL_SHARE of the tile's longer side once the
    colour bar (TILE_BAR_WIDTH labels wide) is attached: a gallery shows each tile scaled to fit a cell of a
    fixed size, so on screen they are as large as that share of a cell (~13 px in the All-tasks tab's 255 px
    cells) whatever the picture's size or shape."""
    share = TILE_LABEL_SHARE
    return max(7.0, share * width / (1 - TILE_BAR_WIDTH * share), share * height)


def attach_colorbar(image: np.ndarray, bounds: DepthBounds, cmap: str = "turbo", tile: bool = False) -> np.ndarray:
    """`image` with the colour scale as a strip on its right (same height); `tile`: for a gallery tile, labels
    sized by tile_fontsize."""
    height, width = int(image.shape[0]), int(image.shape[1])
    bar = depth_colorbar(bounds, height, cmap=cmap, fontsize=tile_fontsize(height, width) if tile else None,
                         tile=tile)
    if bar.shape[0] != image.shape[0]:  # images under 64 px: bar is drawn at 64 and cut
        bar = bar[:image.shape[0]] if bar.shape[0] > image.shape[0] else bar
        bar = np.pad(bar, ((0, image.shape[0] - bar.shape[0]), (0, 0), (0, 0)), constant_values=255)
    return np.concatenate([np.asarray(image)[..., :3], bar], axis=1)

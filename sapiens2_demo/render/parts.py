"""Body-part segmentation drawing: palette overlay, colour label map, class names, legend.

Colours and names are the reference's 29 classes (data/seg29.json, RGB). Label 0 is background.
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

import cv2
import numpy as np

from ..results import SegmentationResult

_SEG29 = Path(__file__).resolve().parent.parent / "data" / "seg29.json"


@lru_cache(maxsize=1)
def _seg29() -> tuple[tuple[str, ...], np.ndarray]:
    data = json.loads(_SEG29.read_text())
    palette = np.asarray(data["palette_rgb"], dtype=np.uint8)
    palette.setflags(write=False)
    return tuple(data["classes"]), palette


def class_names() -> tuple[str, ...]:
    """The 29 class names, index = label id ("Background", "Apparel", ...)."""
    return _seg29()[0]


def display_name(name: str) -> str:
    """A class name as people read it, the legend's spelling: "Upper_Clothing" -> "Upper Clothing"."""
    return name.replace("_", " ")


def palette() -> np.ndarray:
    """(29, 3) uint8 RGB colour per label id, read-only."""
    return _seg29()[1]


def _labels_of(result) -> np.ndarray:
    labels = result.labels if isinstance(result, SegmentationResult) else np.asarray(result)
    if labels.ndim != 2:
        raise ValueError(f"expected an (H, W) label map, got shape {labels.shape}")
    return labels


def colorize_labels(result: SegmentationResult | np.ndarray) -> np.ndarray:
    """(H, W, 3) uint8 RGB: every pixel painted its class colour (background too: (50, 50, 50)).

    Ids outside the palette (never produced by the model) are painted black.
    """
    import cv2

    labels = np.ascontiguousarray(_labels_of(result), dtype=np.uint8)
    lut = np.zeros((256, 1, 3), np.uint8)
    lut[:len(palette()), 0] = palette()
    # OpenCV's table look-up on the labels in three channels: ~5x numpy's fancy indexing at 1080p
    return cv2.LUT(cv2.merge([labels] * 3), lut)


class LegendEntry(NamedTuple):
    class_id: int
    name: str
    rgb: tuple[int, int, int]
    share: float  # fraction of all image pixels carrying this label, 0-1


def legend(result: SegmentationResult | np.ndarray, include_background: bool = False,
           min_share: float = 0.0) -> list[LegendEntry]:
    """The classes present in the label map, by class id, with colour and pixel share of the image."""
    labels = _labels_of(result)
    if labels.dtype == np.uint8 and labels.size < 2 ** 24:  # OpenCV's histogram (float32 counts, exact below 2^24):
        # a third of bincount's time at 1080p, which widens every label to int64 first
        counts = cv2.calcHist([np.ascontiguousarray(labels)], [0], None, [256], [0, 256]).ravel().astype(np.int64)
    else:
        counts = np.bincount(labels.ravel(), minlength=len(class_names()))
    total = max(labels.size, 1)
    names, colors = class_names(), palette()
    entries = []
    for class_id in np.flatnonzero(counts[:len(names)]):
        share = counts[class_id] / total
        if (class_id == 0 and not include_background) or share < min_share:
            continue
        entries.append(LegendEntry(int(class_id), names[class_id], tuple(int(c) for c in colors[class_id]),
                                   float(share)))
    return entries


parts_legend = legend  # the name tasks.py uses


class PartsAnnotator:
    """Blend of image and class colour: out = (1 - opacity) * image + opacity * colour (reference: 0.5).

    `skip_background=True` leaves background pixels (label 0) untouched instead of blending them with
    the background colour (50, 50, 50) as the reference demo does.
    """

    def __init__(self, opacity: float = 0.5, skip_background: bool = False):
        if not 0.0 <= opacity <= 1.0:
            raise ValueError("opacity must be within [0, 1]")
        self.opacity = float(opacity)
        self.skip_background = skip_background

    def annotate(self, image: np.ndarray, result: SegmentationResult | np.ndarray) -> np.ndarray:
        labels = _labels_of(result)
        image = np.asarray(image)[..., :3]
        if image.shape[:2] != labels.shape:
            raise ValueError(f"image {image.shape[:2]} and labels {labels.shape} differ in size")
        colors = colorize_labels(labels)
        out = cv2.addWeighted(np.ascontiguousarray(image, dtype=np.uint8), 1.0 - self.opacity,
                              colors, self.opacity, 0.0)
        if self.skip_background:
            background = labels == 0
            out[background] = image[background]
        return out


NAME_FONT = cv2.FONT_HERSHEY_SIMPLEX


class PartNamesAnnotator:
    """Writes each present class's name (as the legend spells it) at a point well inside its largest region, white
    on a black box, its capitals `LABEL_SHARE` of the image's longer side tall (at least `MIN_LABEL_PX`): an image
    shown scaled to a ~420-550 px panel keeps its capitals 10-14 px tall on screen, whatever its size (they were
    a fixed ~6 px in the image: unreadable once a photo is scaled down to the panel).

    Regions smaller than `min_share` of the image are left unnamed so small parts do not clutter.
    """

    LABEL_SHARE = 1 / 40
    MIN_LABEL_PX = 12

    def __init__(self, min_share: float = 0.002, include_background: bool = False):
        self.min_share = min_share
        self.include_background = include_background

    def annotate(self, image: np.ndarray, result: SegmentationResult | np.ndarray) -> np.ndarray:
        return self.draw(image, self.place(result))

    def place(self, result: SegmentationResult | np.ndarray) -> list[tuple]:
        """Where each name goes: (name, origin, box corners, scale, thickness), for `draw` on any picture of the
        result's size (the Body parts slider writes the names on both of its sides)."""
        labels = _labels_of(result)
        height, width = labels.shape
        step = max(1, int(max(height, width) // 512))  # work on a <= ~512 px grid: fast, good enough
        small = labels[::step, ::step]
        cap_px = max(self.MIN_LABEL_PX, max(height, width) * self.LABEL_SHARE)
        scale = cap_px / cv2.getTextSize("H", NAME_FONT, 1.0, 1)[0][1]  # the font's capitals at scale 1
        thick = max(1, round(cap_px / 12))
        pad = max(2, round(cap_px / 5))
        placed = []
        for entry in legend(labels, include_background=self.include_background, min_share=self.min_share):
            name = display_name(entry.name)
            mask = (small == entry.class_id).astype(np.uint8)
            distance = cv2.distanceTransform(np.pad(mask, 1), cv2.DIST_L2, 3)[1:-1, 1:-1]
            y, x = np.unravel_index(int(np.argmax(distance)), distance.shape)
            (tw, th), base = cv2.getTextSize(name, NAME_FONT, scale, thick)
            x0 = int(np.clip(x * step - tw // 2, pad, max(width - tw - pad, pad)))
            y0 = int(np.clip(y * step + th // 2, th + pad, max(height - base - pad, th + pad)))
            box = ((x0 - pad, y0 - th - pad), (x0 + tw + pad, y0 + base + pad // 2))
            placed.append((name, (x0, y0), box, scale, thick))
        return placed

    @staticmethod
    def draw(image: np.ndarray, placed: list[tuple]) -> np.ndarray:
        canvas = np.ascontiguousarray(np.asarray(image, dtype=np.uint8)[..., :3]).copy()
        for name, origin, (corner, far_corner), scale, thick in placed:
            cv2.rectangle(canvas, corner, far_corner, (0, 0, 0), -1)
            cv2.putText(canvas, name, origin, NAME_FONT, scale, (255, 255, 255), thick, cv2.LINE_AA)
        return canvas

"""Surface normals drawing: RGB = (n + 1) / 2 * 255 with R = x, G = y, B = z (camera frame).

Background (mask False) is black, or the original image pixels.
"""

from __future__ import annotations

import numpy as np

from ..results import NormalsResult, resolve_mask


def normals_to_rgb(normals: np.ndarray) -> np.ndarray:
    """(H, W, 3) unit normals in [-1, 1] -> (H, W, 3) uint8, rounded to nearest: (0, 0, 1) -> (128, 128, 255)."""
    scaled = (np.asarray(normals, dtype=np.float32) + np.float32(1)) * np.float32(127.5)
    return np.rint(np.clip(scaled, 0, 255)).astype(np.uint8)


class NormalsAnnotator:
    """Colours the normals; where the mask is False paints black (`background="black"`) or keeps the
    original pixels (`background="image"`). With no mask (neither given nor in the result) every pixel
    is coloured."""

    BACKGROUNDS = ("black", "image")

    def __init__(self, background: str = "black"):
        if background not in self.BACKGROUNDS:
            raise ValueError(f"background must be one of {self.BACKGROUNDS}")
        self.background = background

    def annotate(self, image: np.ndarray, result: NormalsResult, mask: np.ndarray | None = None) -> np.ndarray:
        """`mask` (H, W) bool, e.g. SegmentationResult.foreground, overrides `result.mask`."""
        out = normals_to_rgb(result.normals)
        mask = resolve_mask(result, mask, out.shape[:2])
        if mask is not None:
            background = ~mask
            if self.background == "black":
                out[background] = 0
            else:
                image = np.asarray(image)[..., :3]
                if image.shape[:2] != out.shape[:2]:
                    raise ValueError(f"image {image.shape[:2]} and normals {out.shape[:2]} differ in size")
                out[background] = image[background]
        return out

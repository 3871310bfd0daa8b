"""Surface normals drawing: RGB = (n + 1) / 2 * 255 with R = x, G = y, B = z (camera frame).

Background (mask False) is black, or the original image pixels.
"""

from __future__ import annotations

import numpy as np

from ..results import NormalsResult, resolve_mask


def normals_to_rgb(normals: np.ndarray) -> np.ndarray:
    """(H, W, 3) unit normals in [-1, 1] -> (H, W, 3) uint8, rounded to nearest: (0, 0, 1) -> (128, 128, 255)."""
    import cv2

    # numpy's five passes took ~25 ms a 720p frame (a video's drawing); these three ~7, the same bytes: the same
    # float32 sum, then OpenCV's product rounded to nearest and saturated at 255 (the floor at 0 first, since
    # convertScaleAbs takes the absolute value)
    shifted = np.asarray(normals, dtype=np.float32) + np.float32(1)
    np.maximum(shifted, np.float32(0), out=shifted)
    return cv2.convertScaleAbs(shifted, alpha=127.5)


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
        import cv2

        coded = result.normal_codes
        # a light answer's codes (results.NORMAL_CODE) are round((n + 1) * 32767.5): / 257 gives (n + 1) * 127.5,
        # rounded as normals_to_rgb rounds (never within 1/514 of a tie), without decoding the map
        out = normals_to_rgb(result.normals) if coded is None else cv2.convertScaleAbs(coded.codes, alpha=1 / 257)
        mask = resolve_mask(result, mask, out.shape[:2])
        if mask is not None:  # one OpenCV pass (a boolean index took ~30 ms at 1080p)
            if self.background == "black":
                return cv2.copyTo(out, mask.view(np.uint8))
            image = np.asarray(image)[..., :3]
            if image.shape[:2] != out.shape[:2]:
                raise ValueError(f"image {image.shape[:2]} and normals {out.shape[:2]} differ in size")
            return cv2.copyTo(out, mask.view(np.uint8), np.array(image, dtype=np.uint8, copy=True))
        return out

"""What each pipeline returns: small dataclasses of numpy arrays in original image coordinates.

Renderers and exporters read these and nothing else, so they never touch torch or the model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class PoseResult:
    image_size: tuple[int, int]  # (height, width)
    boxes: np.ndarray  # (N, 4) float32, x1 y1 x2 y2 in image pixels
    box_scores: np.ndarray  # (N,) float32; 1.0 for user boxes and the whole-image fallback
    keypoints: np.ndarray  # (N, K, 2) float32, x y in image pixels
    keypoint_scores: np.ndarray  # (N, K) float32, raw heatmap peaks (may exceed 1)
    notes: list[str] = field(default_factory=list)  # shown to the user, e.g. detector fallback
    track_ids: np.ndarray | None = None  # (N,) int64 on video with tracking; -1 = not (yet) tracked

    @property
    def num_people(self) -> int:
        return int(self.boxes.shape[0])


@dataclass
class SegmentationResult:
    labels: np.ndarray  # (H, W) uint8 class ids, 0 = background

    @property
    def foreground(self) -> np.ndarray:
        return self.labels > 0


@dataclass
class NormalsResult:
    normals: np.ndarray  # (H, W, 3) float32 unit vectors, x y z
    mask: np.ndarray | None = None  # (H, W) bool foreground, when background removal was used


@dataclass
class PointmapResult:
    points: np.ndarray  # (H, W, 3) float32, metric XYZ in metres (camera frame)
    scale: float  # canonical / actual focal length ratio predicted by the model
    focal_length: float  # fx in model-input pixels = input width / scale
    mask: np.ndarray | None = None  # (H, W) bool foreground, when background removal was used

    @property
    def depth(self) -> np.ndarray:
        return self.points[..., 2]


@dataclass
class MattingResult:
    alpha: np.ndarray  # (H, W) float32 in [0, 1]
    foreground: np.ndarray  # (H, W, 3) float32 in [0, 1], premultiplied by alpha


def resolve_mask(result, mask: np.ndarray | None, shape: tuple[int, int],
                 use_result_mask: bool = True) -> np.ndarray | None:
    """The foreground mask to apply: `mask` if given, else the result's own (when allowed), checked
    against the map's (H, W)."""
    if mask is None and use_result_mask:
        mask = getattr(result, "mask", None)
    if mask is None:
        return None
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != tuple(shape):
        raise ValueError(f"mask {mask.shape} does not match the map {tuple(shape)}")
    return mask

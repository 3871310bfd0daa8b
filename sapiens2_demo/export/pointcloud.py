"""The person as a coloured point cloud: masked pointmap points with the image's colours.

Points stay in the model's camera frame (OpenCV convention: x right, y down, z forward, metres).
glTF viewers expect y up and the camera looking down -z, so `to_gltf_frame` flips y and z for .glb.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..results import PointmapResult, resolve_mask

DEFAULT_MAX_POINTS = 200_000


@dataclass
class PointCloud:
    points: np.ndarray  # (N, 3) float32 metres, camera frame
    colors: np.ndarray  # (N, 3) uint8 RGB

    def __len__(self) -> int:
        return int(self.points.shape[0])


def even_subsample(count: int, cap: int) -> np.ndarray:
    """Deterministic, evenly spread indices: all of range(count) when count <= cap, else `cap` of them."""
    if count <= cap:
        return np.arange(count)
    return (np.arange(cap, dtype=np.int64) * count) // cap  # strictly increasing since count > cap


def person_points(result: PointmapResult, image: np.ndarray, mask: np.ndarray | None = None,
                  max_points: int = DEFAULT_MAX_POINTS) -> PointCloud:
    """Points where the mask (given, else `result.mask`, else everywhere) is True and the point is valid
    (finite, z > 0), down-sampled evenly in image order to at most `max_points`."""
    points = np.asarray(result.points)
    image = np.asarray(image)[..., :3]
    if image.shape[:2] != points.shape[:2]:
        raise ValueError(f"image {image.shape[:2]} and pointmap {points.shape[:2]} differ in size")
    mask = resolve_mask(result, mask, points.shape[:2])
    keep = np.isfinite(points).all(axis=2) & (points[..., 2] > 0)
    if mask is not None:
        keep &= mask
    flat = np.flatnonzero(keep)
    flat = flat[even_subsample(flat.size, max(int(max_points), 0))]
    return PointCloud(points=points.reshape(-1, 3)[flat].astype(np.float32),
                      colors=np.ascontiguousarray(image.reshape(-1, 3)[flat], dtype=np.uint8))


def to_gltf_frame(points: np.ndarray) -> np.ndarray:
    """Camera frame (y down, z forward) -> glTF frame (y up, z towards the viewer): (x, -y, -z)."""
    return (points * np.array([1.0, -1.0, -1.0], dtype=np.float32)).astype(np.float32)


def to_trimesh(cloud: PointCloud, gltf_frame: bool = False):
    import trimesh

    points = to_gltf_frame(cloud.points) if gltf_frame else cloud.points
    alpha = np.full((len(cloud), 1), 255, np.uint8)
    return trimesh.PointCloud(vertices=points, colors=np.concatenate([cloud.colors, alpha], axis=1))

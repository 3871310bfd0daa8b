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
    (finite, z > 0), down-sampled evenly in image order to at most `max_points`. A light answer (no `points`):
    the points of its mesh grid, every `grid_stride` pixels."""
    image = np.asarray(image)[..., :3]
    size = image.shape[:2] if result.points is None else result.points.shape[:2]
    if result.points is None and result.depth_mm.shape != size:
        raise ValueError(f"image {image.shape[:2]} and pointmap {result.depth_mm.shape} differ in size")
    mask = resolve_mask(result, mask, size)
    points = np.asarray(result.points)
    if result.points is None:
        stride = result.grid_stride
        points, image = np.asarray(result.grid), image[::stride, ::stride]
        mask = None if mask is None else mask[::stride, ::stride]
    if image.shape[:2] != points.shape[:2]:
        raise ValueError(f"image {image.shape[:2]} and pointmap {points.shape[:2]} differ in size")
    depth = points[..., 2]
    # per component: numpy's reduction over a last axis of 3 (isfinite(...).all(axis=2)) is several times slower
    keep = (depth > 0) & np.isfinite(depth) & np.isfinite(points[..., 0]) & np.isfinite(points[..., 1])
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


def glb_bytes(cloud: PointCloud) -> bytes:
    """The cloud as a binary glTF 2.0 (.glb) in the glTF frame: one POINTS primitive with float32 POSITION and
    uint8 RGBA COLOR_0. Written here rather than by trimesh's exporter, which took ~85 ms for 200k points (its
    generic path) against ~5 ms; trimesh and glTF viewers read it back."""
    import json
    import struct

    count = len(cloud)
    positions = np.ascontiguousarray(to_gltf_frame(cloud.points), dtype="<f4")
    colours = np.concatenate([cloud.colors, np.full((count, 1), 255, np.uint8)], axis=1)
    low, high = (positions.min(axis=0), positions.max(axis=0)) if count else (np.zeros(3), np.zeros(3))
    document = {
        "asset": {"version": "2.0", "generator": "sapiens2_demo"},
        "scene": 0, "scenes": [{"nodes": [0]}], "nodes": [{"mesh": 0, "name": "person"}],
        "meshes": [{"primitives": [{"attributes": {"POSITION": 0, "COLOR_0": 1}, "mode": 0}]}],
        "buffers": [{"byteLength": positions.nbytes + colours.nbytes}],
        "bufferViews": [{"buffer": 0, "byteOffset": 0, "byteLength": positions.nbytes},
                        {"buffer": 0, "byteOffset": positions.nbytes, "byteLength": colours.nbytes}],
        "accessors": [{"bufferView": 0, "componentType": 5126, "count": count, "type": "VEC3",
                       "min": [float(v) for v in low], "max": [float(v) for v in high]},
                      {"bufferView": 1, "componentType": 5121, "normalized": True, "count": count, "type": "VEC4"}],
    }
    text = json.dumps(document, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 4)  # chunks are 4-byte aligned (JSON pads with spaces, BIN with zeros)
    binary = positions.tobytes() + colours.tobytes()  # 12 + 4 bytes a point: already aligned
    total = 12 + 8 + len(text) + 8 + len(binary)
    return b"".join([struct.pack("<4sII", b"glTF", 2, total), struct.pack("<I4s", len(text), b"JSON"), text,
                     struct.pack("<I4s", len(binary), b"BIN\0"), binary])

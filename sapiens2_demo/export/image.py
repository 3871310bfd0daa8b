"""Downloadable files for the dense tasks. Every writer takes an output folder (created if missing) and
returns the Path it wrote. Formats:

| writer | file | contents |
|---|---|---|
| write_label_png | body_parts_labels.png | 8-bit greyscale, pixel = class id 0-28 (0 = background), image size |
| write_parts_colour_png | body_parts_colors.png | RGB, each pixel its class colour (seg29 palette) |
| write_normals_npy | normals.npy | float32 (H, W, 3) unit x y z, every pixel (raw data; (0, 0, 0) only where `mask` is passed and False) |
| write_normals_png | normals.png / normals16.png | RGB (n + 1) / 2 at `bits` 8 or 16; 0 on background when masked |
| write_depth_png | depth_mm.png | 16-bit greyscale, millimetres, clipped to 1-65535; 0 = background/invalid |
| write_depth_npy | depth_m.npy | float32 (H, W) metres, every pixel as predicted (raw data; 0 only where `mask` is passed and False) |
| write_ply | person.ply | binary PLY, masked points + RGB(A) colours, camera frame (x right, y down, z fwd) |
| write_glb | person.glb | the same points in the glTF frame (x, -y, -z: y up), for 3D viewers |
| write_point_cloud | both | (ply path, glb path) |
| write_matting_rgba | matting_rgba.png | RGBA: A = alpha; RGB = un-premultiplied model foreground (default) or image |
| write_alpha_png | matting_alpha.png | 8-bit greyscale alpha |

For the PNGs, "masked" means: the `mask` argument when given, else the result's own `mask` (set when the
background was removed), else nothing is masked. The .npy files are raw data: they ignore `result.mask`
(the person mask is in the label PNG) and are masked only by an explicit `mask` argument.
Point-cloud writers raise NothingToExport (a ValueError) when no valid point is left.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..render.depth import valid_depth
from ..render.matting import alpha_image, rgba_cutout
from ..render.normals import normals_to_rgb
from ..render.parts import colorize_labels
from ..results import MattingResult, NormalsResult, PointmapResult, SegmentationResult, resolve_mask
from ..util import in_parallel, target, write_png
from .bounds import gltf_bounds, remember
from .pointcloud import DEFAULT_MAX_POINTS, glb_bytes, person_points, to_trimesh

DEPTH_PNG_MAX_MM = 65535


class NothingToExport(ValueError):
    """The file would be empty (e.g. no valid person point); the message is meant for the user."""


def _labels(result: SegmentationResult | np.ndarray) -> np.ndarray:
    return np.asarray(result.labels if isinstance(result, SegmentationResult) else result, dtype=np.uint8)


# -- segmentation ---------------------------------------------------------------------------------

def write_label_png(result: SegmentationResult | np.ndarray, folder, name: str = "body_parts_labels.png") -> Path:
    path = target(folder, name)
    return write_png(path, _labels(result))


def write_parts_colour_png(result: SegmentationResult | np.ndarray, folder, name: str = "body_parts_colors.png") -> Path:
    path = target(folder, name)
    return write_png(path, colorize_labels(_labels(result)))


# -- normals --------------------------------------------------------------------------------------

def _masked_normals(result: NormalsResult, mask) -> np.ndarray:
    normals = np.asarray(result.normals, dtype=np.float32)
    mask = resolve_mask(result, mask, normals.shape[:2], use_result_mask=False)
    if mask is not None:
        normals = np.where(mask[..., None], normals, np.float32(0))
    return normals


def write_normals_npy(result: NormalsResult, folder, mask: np.ndarray | None = None, name: str = "normals.npy") -> Path:
    path = target(folder, name)
    np.save(path, np.ascontiguousarray(_masked_normals(result, mask), dtype=np.float32))
    return path


def write_normals_png(result: NormalsResult, folder, bits: int = 8, mask: np.ndarray | None = None,
                      name: str | None = None) -> Path:
    """(n + 1) / 2 scaled to 255 (8-bit) or 65535 (16-bit), rounded; R = x, G = y, B = z."""
    bits = int(bits)
    if bits not in (8, 16):
        raise ValueError("bits must be 8 or 16")
    path = target(folder, name or ("normals.png" if bits == 8 else "normals16.png"))
    coded = result.normal_codes
    if bits == 16 and coded is not None:  # a light answer's normals are this file's codes (results.NORMAL_CODE):
        encoded = coded.codes  # written as they are, never decoded here
    elif bits == 8:
        encoded = normals_to_rgb(np.asarray(result.normals, dtype=np.float32))
    else:  # one OpenCV pass: (n + 1) * 32767.5 rounded and saturated (numpy's five took ~60 ms at 1080p)
        import cv2

        normals = np.asarray(result.normals, dtype=np.float32)
        encoded = cv2.addWeighted(normals, 32767.5, normals, 0.0, 32767.5, dtype=cv2.CV_16U)
    mask = resolve_mask(result, mask, encoded.shape[:2])
    if mask is not None:
        import cv2

        encoded = cv2.copyTo(encoded, mask.view(np.uint8))  # 0 on the background (a boolean index took ~30 ms)
    return write_png(path, encoded)


# -- depth and points -----------------------------------------------------------------------------

def depth_metres(result: PointmapResult, mask: np.ndarray | None = None) -> np.ndarray:
    """float32 (H, W) depth in metres with 0 where masked out or invalid (non-finite, <= 0)."""
    depth = np.asarray(result.depth, dtype=np.float32)
    valid = valid_depth(depth, resolve_mask(result, mask, depth.shape))
    return np.where(valid, depth, np.float32(0))


def depth_millimetres(result: PointmapResult, mask: np.ndarray | None = None) -> np.ndarray:
    """uint16 (H, W) millimetres; valid depth is rounded and clipped to [1, 65535] mm so 0 only means background."""
    if result.depth_mm is not None:  # a light answer holds them (made where the model ran, the same arithmetic)
        mask = resolve_mask(result, mask, result.depth_mm.shape)
        return result.depth_mm if mask is None else np.where(mask, result.depth_mm, np.uint16(0))
    depth = depth_metres(result, mask)
    return np.where(depth > 0, np.clip(np.rint(depth * np.float32(1000)), 1, DEPTH_PNG_MAX_MM), 0).astype(np.uint16)


def write_depth_png(result: PointmapResult, folder, mask: np.ndarray | None = None, name: str = "depth_mm.png") -> Path:
    path = target(folder, name)
    return write_png(path, depth_millimetres(result, mask))  # uint16 (H, W): a 16-bit greyscale PNG


def write_depth_npy(result: PointmapResult, folder, mask: np.ndarray | None = None, name: str = "depth_m.npy") -> Path:
    path = target(folder, name)
    depth = np.asarray(result.depth, dtype=np.float32)
    mask = resolve_mask(result, mask, depth.shape, use_result_mask=False)
    np.save(path, depth if mask is None else np.where(mask, depth, np.float32(0)))
    return path


def _cloud(result, image, mask, max_points):
    cloud = person_points(result, image, mask=mask, max_points=max_points)
    if len(cloud) == 0:
        raise NothingToExport("No point of the person has a valid depth, so there is no point cloud to save.")
    return cloud


def write_ply(result: PointmapResult, image: np.ndarray, folder, mask: np.ndarray | None = None,
              max_points: int = DEFAULT_MAX_POINTS, name: str = "person.ply", cloud=None) -> Path:
    path = target(folder, name)
    cloud = _cloud(result, image, mask, max_points) if cloud is None else cloud
    to_trimesh(cloud).export(str(path), file_type="ply")
    return path


def write_glb(result: PointmapResult, image: np.ndarray, folder, mask: np.ndarray | None = None,
              max_points: int = DEFAULT_MAX_POINTS, name: str = "person.glb", cloud=None) -> Path:
    path = target(folder, name)
    cloud = _cloud(result, image, mask, max_points) if cloud is None else cloud
    path.write_bytes(glb_bytes(cloud))
    return remember(path, gltf_bounds(cloud.points))  # the 3D viewer frames it from these (export/bounds.py)


def write_point_cloud(result: PointmapResult, image: np.ndarray, folder, mask: np.ndarray | None = None,
                      max_points: int = DEFAULT_MAX_POINTS) -> tuple[Path, Path]:
    """(person.ply, person.glb): one down-sampled cloud written both ways, in parallel."""
    cloud = _cloud(result, image, mask, max_points)
    ply, glb = in_parallel(lambda: write_ply(result, image, folder, cloud=cloud),
                           lambda: write_glb(result, image, folder, cloud=cloud))
    return ply, glb


# -- matting --------------------------------------------------------------------------------------

def write_matting_rgba(result: MattingResult, image: np.ndarray | None, folder, rgb: str = "foreground",
                       name: str = "matting_rgba.png") -> Path:
    """See render.matting.rgba_cutout: A = alpha, RGB = un-premultiplied foreground or (rgb="image") the photo."""
    path = target(folder, name)
    return write_png(path, rgba_cutout(image, result, rgb=rgb))


def write_alpha_png(result: MattingResult, folder, name: str = "matting_alpha.png") -> Path:
    path = target(folder, name)
    return write_png(path, alpha_image(result))

"""The downloads of each image task, one function per task, shared by the image tabs and the batch CLI.
Each takes (rgb, result, folder, **options), ignores options meant for others, and returns the paths written.

| task | files |
|---|---|
| pose | pose_sapiens2.json, pose_coco17.json, pose_openpose_keypoints.json (see pose_formats.py) |
| segment | body_parts_labels.png, body_parts_colors.png |
| normals | normals.npy, normals16.png (or normals.png with png_bits=8) |
| pointmap | depth_mm.png, depth_m.npy, person.ply, person.glb (the clouds only when a valid point exists) |
| matting | matting_rgba.png, matting_alpha.png |
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import image as files
from .image import NothingToExport


def export_pose(rgb: np.ndarray, result, folder: Path, *, keypoint_threshold: float = 0.3, **_) -> list[Path]:
    from .pose_formats import write_exports

    return list(write_exports(result, folder, keypoint_threshold=keypoint_threshold).values())


def export_segment(rgb: np.ndarray, result, folder: Path, **_) -> list[Path]:
    return [files.write_label_png(result, folder), files.write_parts_colour_png(result, folder)]


def export_normals(rgb: np.ndarray, result, folder: Path, *, png_bits: int = 16, **_) -> list[Path]:
    return [files.write_normals_npy(result, folder), files.write_normals_png(result, folder, bits=png_bits)]


def export_pointmap(rgb: np.ndarray, result, folder: Path, *, max_points: int = 200_000,
                    notes: list[str] | None = None, **_) -> list[Path]:
    """A point cloud with no valid point is skipped with a note (appended to `notes` when given)."""
    written = [files.write_depth_png(result, folder), files.write_depth_npy(result, folder)]
    try:
        written += list(files.write_point_cloud(result, rgb, folder, max_points=max_points))
    except NothingToExport as error:  # e.g. no person found by the segmentation
        if notes is not None:
            notes.append(str(error))
    return written


def export_matting(rgb: np.ndarray, result, folder: Path, **_) -> list[Path]:
    return [files.write_matting_rgba(result, rgb, folder), files.write_alpha_png(result, folder)]

"""The downloads of each image task, one function per task, shared by the image tabs and the batch CLI.
Each takes (rgb, result, folder, **options), ignores options meant for others, and returns the paths written.

| task | files |
|---|---|
| pose | pose_sapiens2.json, pose_coco17.json, pose_openpose_keypoints.json, pose_coco_wholebody.json |
| pose, lifted | pose_3d.json, pose_3d.glb (3D keypoints and skeleton, see pose3d.py; the .glb when a joint is placed) |
| segment | body_parts_labels.png, body_parts_colors.png |
| normals | normals.npy, normals16.png (or normals.png with png_bits=8) |
| pointmap | depth_mm.png, depth_m.npy, person.ply, person.glb (the clouds only when a valid point exists) |
| pointmap | person_mesh.glb (the surface mesh, see mesh.py; only when a valid face exists) |
| matting | matting_rgba.png, matting_alpha.png |
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import image as files
from .image import NothingToExport


def export_pose(rgb: np.ndarray, result, folder: Path, *, keypoint_threshold: float = 0.3,
                notes: list[str] | None = None, **_) -> list[Path]:
    """The 2D formats and COCO-WholeBody; with a lifted result (`result.lifted`) also the 3D keypoints and
    skeleton. A skeleton with no joint in 3D is skipped with a note (appended to `notes` when given)."""
    from .pose_formats import write_exports
    from .pose_wholebody import write_coco_wholebody

    written = list(write_exports(result, folder, keypoint_threshold=keypoint_threshold).values())
    written.append(write_coco_wholebody(result, folder, keypoint_threshold=keypoint_threshold))
    if getattr(result, "lifted", None) is not None:
        from ..pose.meta import keypoint_names
        from .pose3d import write_pose3d_json, write_skeleton_glb

        written.append(write_pose3d_json(result.lifted, folder, keypoint_names()))
        try:
            written.append(write_skeleton_glb(result.lifted, folder))
        except NothingToExport as error:  # no person, or no joint with a reliable depth
            if notes is not None:
                notes.append(str(error))
    return written


def export_segment(rgb: np.ndarray, result, folder: Path, **_) -> list[Path]:
    return [files.write_label_png(result, folder), files.write_parts_colour_png(result, folder)]


def export_normals(rgb: np.ndarray, result, folder: Path, *, png_bits: int = 16, **_) -> list[Path]:
    return [files.write_normals_npy(result, folder), files.write_normals_png(result, folder, bits=png_bits)]


def export_pointmap(rgb: np.ndarray, result, folder: Path, *, max_points: int = 200_000,
                    max_faces: int = 300_000, notes: list[str] | None = None, **_) -> list[Path]:
    """A point cloud with no valid point, or a mesh with no valid face, is skipped with a note (appended to
    `notes` when given)."""
    from .mesh import pointmap_mesh, write_mesh_glb

    written = [files.write_depth_png(result, folder), files.write_depth_npy(result, folder)]
    try:
        written += list(files.write_point_cloud(result, rgb, folder, max_points=max_points))
    except NothingToExport as error:  # e.g. no person found by the segmentation
        if notes is not None:
            notes.append(str(error))
    try:
        written.append(write_mesh_glb(pointmap_mesh(result.points, rgb, result.mask, max_faces=int(max_faces)),
                                      folder))
    except NothingToExport as error:
        if notes is not None:
            notes.append(str(error))
    return written


def export_matting(rgb: np.ndarray, result, folder: Path, **_) -> list[Path]:
    return [files.write_matting_rgba(result, rgb, folder), files.write_alpha_png(result, folder)]

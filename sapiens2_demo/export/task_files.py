"""The downloads of each image tab, as one call per task, shared by the app and the batch CLI.

| task | files |
|---|---|
| pose | pose_sapiens2.json, pose_coco17.json, pose_openpose_keypoints.json (see pose/formats.py) |
| seg | body_parts_labels.png, body_parts_colors.png |
| normal | normals.npy, normals16.png (or normals.png with png_bits=8) |
| pointmap | depth_mm.png, depth_m.npy, person.ply, person.glb (the clouds only when a valid point exists) |
| matting | matting_rgba.png, matting_alpha.png |
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import image as files
from .image import NothingToExport

EXPECTED = {  # every file a complete export has (the batch CLI's resume check); clouds are optional
    "pose": ("pose_sapiens2.json", "pose_coco17.json", "pose_openpose_keypoints.json"),
    "seg": ("body_parts_labels.png", "body_parts_colors.png"),
    "normal": ("normals.npy", "normals16.png"),
    "pointmap": ("depth_mm.png", "depth_m.npy"),
    "matting": ("matting_rgba.png", "matting_alpha.png"),
}


def write_task_files(task: str, image: np.ndarray, result, folder: str | Path, *, keypoint_threshold: float = 0.3,
                     png_bits: int = 16, max_points: int = 200_000, notes: list[str] | None = None) -> list[Path]:
    """Write `task`'s downloads for one image and its result into `folder`; returns the paths written.
    A point cloud with no valid point is skipped with a note (appended to `notes` when given)."""
    folder = Path(folder)
    if task == "pose":
        from ..pose.formats import write_exports

        return list(write_exports(result, folder, keypoint_threshold=keypoint_threshold).values())
    if task == "seg":
        return [files.write_label_png(result, folder), files.write_parts_colour_png(result, folder)]
    if task == "normal":
        return [files.write_normals_npy(result, folder), files.write_normals_png(result, folder, bits=png_bits)]
    if task == "pointmap":
        written = [files.write_depth_png(result, folder), files.write_depth_npy(result, folder)]
        try:
            written += list(files.write_point_cloud(result, image, folder, max_points=max_points))
        except NothingToExport as error:  # e.g. no person found by the segmentation
            if notes is not None:
                notes.append(str(error))
        return written
    if task == "matting":
        return [files.write_matting_rgba(result, image, folder), files.write_alpha_png(result, folder)]
    raise ValueError(f"No exports for task {task!r}")

"""The downloads of each image task, one function per task, shared by the image tabs and the batch CLI.
Each takes (rgb, result, folder, **options), ignores options meant for others, and returns the paths written.
A task's files are written in parallel threads (PNG and zlib encoding release the GIL).
`raw_data` (default on: everything, as the batch CLI writes it) adds the heavy raw arrays; an image request
turns it off unless asked (the task option of that name), so its answer stays light.

| task | files |
|---|---|
| pose | pose_sapiens2.json, pose_coco17.json, pose_openpose_keypoints.json, pose_coco_wholebody.json |
| pose, lifted | pose_3d.json, pose_3d.glb (3D keypoints and skeleton, see pose3d.py; the .glb when a joint is placed) |
| segment | body_parts_labels.png, body_parts_colors.png |
| normals | normals16.png (or normals.png with png_bits=8); raw data: normals.npy |
| pointmap | depth_mm.png, person_mesh.glb (the surface mesh, see mesh.py; only when a valid face exists) |
| pointmap | raw data: depth_m.npy, person.ply, person.glb (the clouds only when a valid point exists) |
| matting | matting_rgba.png, matting_alpha.png |
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..util import in_parallel
from . import image as files
from .image import NothingToExport


def _attempt(write):
    """`write` as a call returning (paths, note): NothingToExport becomes the note."""

    def call() -> tuple[list[Path], str | None]:
        try:
            written = write()
        except NothingToExport as error:
            return [], str(error)
        return (list(written) if isinstance(written, (list, tuple)) else [written]), None

    return call


def _write_all(notes: list[str] | None, *writers) -> list[Path]:
    """Run the writers in parallel; the paths and the notes (appended to `notes` when given) in writer order."""
    written = []
    for paths, note in in_parallel(*map(_attempt, writers)):
        written += paths
        if note is not None and notes is not None:
            notes.append(note)
    return written


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
            written.append(write_skeleton_glb(result.lifted, folder, notes=notes))
        except NothingToExport as error:  # no person, or no joint with a reliable depth
            if notes is not None:
                notes.append(str(error))
    return written


def export_segment(rgb: np.ndarray, result, folder: Path, **_) -> list[Path]:
    return in_parallel(lambda: files.write_label_png(result, folder),
                       lambda: files.write_parts_colour_png(result, folder))


def export_normals(rgb: np.ndarray, result, folder: Path, *, png_bits: int = 16, raw_data: bool = True,
                   **_) -> list[Path]:
    raw = [lambda: files.write_normals_npy(result, folder)] if raw_data else []
    return in_parallel(*raw, lambda: files.write_normals_png(result, folder, bits=int(png_bits)))


def export_pointmap(rgb: np.ndarray, result, folder: Path, *, max_points: int = 200_000,
                    max_faces: int = 300_000, raw_data: bool = True, notes: list[str] | None = None,
                    **_) -> list[Path]:
    """A point cloud with no valid point, or a mesh with no valid face, is skipped with a note (appended to
    `notes` when given). Without raw_data, a mesh with no valid face gives way to the cloud's .glb (the 3D viewer
    still has something to show)."""
    from .mesh import result_mesh, write_mesh_glb

    def mesh():
        return write_mesh_glb(result_mesh(result, rgb, result.mask, max_faces=int(max_faces)), folder)

    def mesh_or_cloud():
        try:
            return mesh()
        except NothingToExport as error:
            if notes is not None:
                notes.append(str(error))
            return files.write_glb(result, rgb, folder, max_points=int(max_points))

    raw = [lambda: files.write_depth_npy(result, folder),
           lambda: files.write_point_cloud(result, rgb, folder, max_points=int(max_points))] if raw_data else []
    return _write_all(notes, lambda: files.write_depth_png(result, folder), *raw,
                      mesh if raw_data else mesh_or_cloud)


def export_matting(rgb: np.ndarray, result, folder: Path, **_) -> list[Path]:
    return in_parallel(lambda: files.write_matting_rgba(result, rgb, folder),
                       lambda: files.write_alpha_png(result, folder))

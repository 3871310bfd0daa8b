"""An image request's result as the user sees it: the renders, the downloads and the notes (no model work).
One function per task: (LoadedImage, result, folder, **options) -> TaskOutput; options meant for others are ignored.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..export import task_files
from ..results import TaskOutput


def present_pose(image, result, folder: Path, *, keypoint_threshold: float = 0.3, show_face: bool = True,
                 show_boxes: bool = True, **_) -> TaskOutput:
    from ..render.skeleton import SkeletonAnnotator

    drawing = SkeletonAnnotator().annotate(image.rgb, result, keypoint_threshold=keypoint_threshold,
                                           show_face=show_face, show_boxes=show_boxes)
    notes = [*image.notes, *result.notes, f"{result.num_people} person(s) posed."]
    if result.lifted is not None:
        lifted = result.lifted
        placed = int(lifted.available.sum())
        notes.append(f"Lifted to 3D: {placed} of {lifted.available.size} keypoints placed (metres, camera frame; "
                     "the others are null in pose_3d.json).")
    files = task_files.export_pose(image.rgb, result, folder, keypoint_threshold=keypoint_threshold, notes=notes)
    skeleton = next((path for path in files if path.name == "pose_3d.glb"), None)
    return TaskOutput(main=drawing, files=files, notes=notes, model3d=skeleton)


def present_segment(image, result, folder: Path, *, opacity: float = 0.5, show_names: bool = False,
                    **_) -> TaskOutput:
    from ..render.parts import PartNamesAnnotator, PartsAnnotator, parts_legend

    overlay = PartsAnnotator(opacity=opacity).annotate(image.rgb, result)
    if show_names:
        overlay = PartNamesAnnotator().annotate(overlay, result)
    entries = sorted(parts_legend(result), key=lambda entry: -entry.share)  # biggest parts first
    legend = [[entry.name.replace("_", " "), f'<span style="color:rgb{tuple(entry.rgb)}">&#9632;</span>',
               round(100 * entry.share, 2)] for entry in entries]
    files = task_files.export_segment(image.rgb, result, folder)
    return TaskOutput(main=overlay, before_after=(image.rgb, overlay), files=files, notes=list(image.notes),
                      legend=legend)


def present_normals(image, result, folder: Path, *, background: str = "black", png_bits: int = 16,
                    **_) -> TaskOutput:
    from ..render.normals import NormalsAnnotator

    rendered = NormalsAnnotator(background=background).annotate(image.rgb, result)
    files = task_files.export_normals(image.rgb, result, folder, png_bits=int(png_bits))
    return TaskOutput(main=rendered, before_after=(image.rgb, rendered), files=files, notes=list(image.notes))


def present_pointmap(image, result, folder: Path, *, max_points: int = 200_000, max_faces: int = 300_000,
                     **_) -> TaskOutput:
    from ..render.depth import DepthAnnotator, attach_colorbar, depth_bounds

    bounds = depth_bounds(result, result.mask)
    rendered = DepthAnnotator().annotate(image.rgb, result, bounds=bounds)
    # the colour bar (metres) on both sides of the slider keeps them the same size
    before, after = attach_colorbar(image.rgb, bounds), attach_colorbar(rendered, bounds)
    notes = [*image.notes, f"Depth colour scale: {bounds.near:.2f}–{bounds.far:.2f} m (inverse depth, turbo).",
             f"Focal length used: fx = {result.focal_length:.1f} px at the model input (scale {result.scale:.4f})."]
    files = task_files.export_pointmap(image.rgb, result, folder, max_points=int(max_points),
                                       max_faces=int(max_faces), notes=notes)
    by_name = {path.name: path for path in files}
    shown = by_name.get("person_mesh.glb") or by_name.get("person.glb")  # the mesh; the cloud when there is none
    return TaskOutput(main=after, before_after=(before, after), files=files, notes=notes, model3d=shown)


def present_matting(image, result, folder: Path, *, background: str = "colour", colour: str = "#00b140",
                    background_image: np.ndarray | None = None, **_) -> TaskOutput:
    from ..render.matting import MattingAnnotator

    rendered = MattingAnnotator(background=background, colour=colour,
                                image=background_image).annotate(image.rgb, result)
    files = task_files.export_matting(image.rgb, result, folder)
    return TaskOutput(main=rendered, before_after=(image.rgb, rendered), files=files, notes=list(image.notes))

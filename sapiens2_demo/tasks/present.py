"""An image request's result as the user sees it: the renders and the notes (no model work, no files: the
downloads are written after the display, by the spec's `export`, see TaskSpec.finish).
One function per task: (LoadedImage, result, **options) -> TaskOutput; options meant for others are ignored.
`tile=True` (the All-tasks gallery) asks for the main render only, drawn to be read at a gallery cell's size.
"""

from __future__ import annotations

import numpy as np

from ..results import TaskOutput


def present_pose(image, result, *, keypoint_threshold: float = 0.3, show_face: bool = True,
                 show_boxes: bool = True, **_) -> TaskOutput:
    from ..render.skeleton import SkeletonAnnotator

    drawing = SkeletonAnnotator().annotate(image.rgb, result, keypoint_threshold=keypoint_threshold,
                                           show_face=show_face, show_boxes=show_boxes)
    people = "1 person" if result.num_people == 1 else f"{result.num_people} people"
    notes = [*image.notes, *result.notes, f"{people} posed."]
    if result.lifted is not None:
        lifted = result.lifted
        placed = int(lifted.available.sum())
        notes.append(f"Lifted to 3D: {placed} of {lifted.available.size} keypoints placed (metres, camera frame; "
                     "the others are null in pose_3d.json).")
    return TaskOutput(main=drawing, notes=notes)


def swatch(rgb) -> str:
    """A legend's colour sample, large enough to match against the overlay."""
    r, g, b = (int(v) for v in rgb)
    return (f'<span style="display:inline-block;width:2.4em;height:1.2em;vertical-align:middle;border-radius:3px;'
            f'background:rgb({r},{g},{b});border:1px solid rgba(0,0,0,0.35)"></span>')


def present_segment(image, result, *, opacity: float = 0.5, show_names: bool = False,
                    **_) -> TaskOutput:
    from ..render.parts import PartNamesAnnotator, PartsAnnotator, parts_legend

    overlay, before = PartsAnnotator(opacity=opacity).annotate(image.rgb, result), image.rgb
    if show_names:  # on both sides of the slider: it starts in the middle, where names on one side lose half
        names = PartNamesAnnotator()
        placed = names.place(result)
        overlay, before = names.draw(overlay, placed), names.draw(image.rgb, placed)
    entries = sorted(parts_legend(result), key=lambda entry: -entry.share)  # biggest parts first
    legend = [[entry.name.replace("_", " "), swatch(entry.rgb), round(100 * entry.share, 2)] for entry in entries]
    return TaskOutput(main=overlay, before_after=(before, overlay), notes=list(image.notes), legend=legend)


def present_normals(image, result, *, background: str = "black", **_) -> TaskOutput:
    from ..render.normals import NormalsAnnotator

    rendered = NormalsAnnotator(background=background).annotate(image.rgb, result)
    return TaskOutput(main=rendered, before_after=(image.rgb, rendered), notes=list(image.notes))


def present_pointmap(image, result, *, tile: bool = False, **_) -> TaskOutput:
    from ..render.depth import (
        SUMMARY_PERCENTILES,
        DepthAnnotator,
        attach_colorbar,
        clamped_bounds,
        depth_bounds,
        depth_percentiles,
    )

    # the summary's percentiles, taken once for both (render.depth keeps them): the bounds are their ends
    found = depth_percentiles(result, SUMMARY_PERCENTILES, result.mask)
    bounds = depth_bounds(result, result.mask) if found is None else clamped_bounds(found[0], found[-1])
    rendered = DepthAnnotator().annotate(image.rgb, result, bounds=bounds)
    notes = [*image.notes, f"Depth colour scale: {bounds.near:.2f}–{bounds.far:.2f} m (inverse depth, turbo).",
             f"Focal length used: fx = {result.focal_length:.1f} px at the model input (scale {result.scale:.4f})."]
    if tile:  # a gallery tile: the colour bar's labels sized for a small cell
        return TaskOutput(main=attach_colorbar(rendered, bounds, tile=True), notes=notes)
    # the colour bar (metres) on both sides of the slider keeps them the same size
    before, after = attach_colorbar(image.rgb, bounds), attach_colorbar(rendered, bounds)
    return TaskOutput(main=after, before_after=(before, after), notes=notes)


def present_matting(image, result, *, background: str = "colour", colour: str = "#00b140",
                    background_image: np.ndarray | None = None, **_) -> TaskOutput:
    from ..render.matting import MattingAnnotator

    rendered = MattingAnnotator(background=background, colour=colour,
                                image=background_image).annotate(image.rgb, result)
    return TaskOutput(main=rendered, before_after=(image.rgb, rendered), notes=list(image.notes))

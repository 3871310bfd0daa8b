"""One function per tab: loaded image -> pipeline -> renderer / exporter -> TaskOutput.

UI-agnostic (no gradio here), so the same calls serve the UI, the API and the tests.
"""

from __future__ import annotations

import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .pipelines import dense
from .export import image as export
from .media.image import LoadedImage
from .models.manager import ModelManager
from .ui.outputs import OutputStore
from .models.registry import checkpoint


@dataclass
class AppContext:
    manager: ModelManager
    seg_cache: dense.SegmentationCache = field(default_factory=dense.SegmentationCache)
    outputs: OutputStore = field(default_factory=OutputStore)
    max_people: int = 50


@dataclass
class TaskOutput:
    main: np.ndarray | None = None  # the rendered result
    before_after: tuple[np.ndarray, np.ndarray] | None = None  # for gr.ImageSlider
    files: list[Path] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    legend: list[list] | None = None
    model3d: Path | None = None
    gallery: list[tuple[np.ndarray, str]] | None = None


def _announce_load(ctx: AppContext, task: str, size: str, progress) -> None:
    """Say so while a checkpoint loads: the first run of a model takes a while."""
    ckpt = checkpoint(task, size)
    if progress is not None and not ctx.manager.is_loaded(ckpt):
        progress(0.1, desc=f"Loading {ckpt.repo_id} (first use)...")


def _timed(ctx: AppContext, notes: list[str], label: str, started: float) -> None:
    notes.append(f"{label} took {time.perf_counter() - started:.2f} s on {ctx.manager.device}.")


def _foreground(ctx: AppContext, image: np.ndarray, size: str, remove_background: bool, progress):
    if not remove_background:
        return None
    _announce_load(ctx, "seg", size, progress)
    return dense.segment(image, ctx.manager, size, cache=ctx.seg_cache).foreground


# --- tabs -------------------------------------------------------------------------------------------
def pose(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None, size: str = "0.4b",
         boxes: str | list | None = None, flip_test: bool = True, detection_threshold: float = 0.3,
         nms_iou: float = 0.3, max_people: int = 20, keypoint_threshold: float = 0.3,
         show_face: bool = True, show_boxes: bool = True) -> TaskOutput:
    from .pose import estimate_pose, write_exports
    from .render.skeleton import SkeletonAnnotator

    started = time.perf_counter()
    _announce_load(ctx, "pose", size, progress)
    result = estimate_pose(image.rgb, ctx.manager, size, boxes=boxes or None, flip_test=flip_test,
                           score_threshold=detection_threshold, nms_iou=nms_iou,
                           max_people=min(int(max_people), ctx.max_people))
    drawing = SkeletonAnnotator().annotate(image.rgb, result, keypoint_threshold=keypoint_threshold,
                                           show_face=show_face, show_boxes=show_boxes)
    files = list(write_exports(result, run_dir, keypoint_threshold=keypoint_threshold).values())
    notes = [*image.notes, *result.notes, f"{result.num_people} person(s) posed."]
    _timed(ctx, notes, "Pose", started)
    return TaskOutput(main=drawing, files=files, notes=notes)


def segment(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None, size: str = "0.4b",
            opacity: float = 0.5, show_names: bool = False) -> TaskOutput:
    from .render.parts import PartNamesAnnotator, PartsAnnotator, parts_legend

    started = time.perf_counter()
    _announce_load(ctx, "seg", size, progress)
    result = dense.segment(image.rgb, ctx.manager, size, cache=ctx.seg_cache)
    overlay = PartsAnnotator(opacity=opacity).annotate(image.rgb, result)
    if show_names:
        overlay = PartNamesAnnotator().annotate(overlay, result)
    entries = sorted(parts_legend(result), key=lambda entry: -entry.share)  # biggest parts first
    legend = [[entry.name.replace("_", " "), f'<span style="color:rgb{tuple(entry.rgb)}">&#9632;</span>',
               round(100 * entry.share, 2)] for entry in entries]
    files = [export.write_label_png(result, run_dir), export.write_parts_colour_png(result, run_dir)]
    notes = list(image.notes)
    _timed(ctx, notes, "Segmentation", started)
    return TaskOutput(main=overlay, before_after=(image.rgb, overlay), files=files, notes=notes, legend=legend)


def normals(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None, size: str = "0.4b",
            remove_background: bool = True, background: str = "black", png_bits: int = 16) -> TaskOutput:
    from .render.normals import NormalsAnnotator

    started = time.perf_counter()
    mask = _foreground(ctx, image.rgb, size, remove_background, progress)
    _announce_load(ctx, "normal", size, progress)
    result = dense.estimate_normals(image.rgb, ctx.manager, size, mask=mask)
    rendered = NormalsAnnotator(background=background).annotate(image.rgb, result)
    files = [export.write_normals_npy(result, run_dir), export.write_normals_png(result, run_dir, bits=png_bits)]
    notes = list(image.notes)
    _timed(ctx, notes, "Normals", started)
    return TaskOutput(main=rendered, before_after=(image.rgb, rendered), files=files, notes=notes)


def pointmap(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None, size: str = "0.4b",
             remove_background: bool = True, max_points: int = 200_000) -> TaskOutput:
    from .render.depth import DepthAnnotator, attach_colorbar, depth_bounds

    started = time.perf_counter()
    mask = _foreground(ctx, image.rgb, size, remove_background, progress)
    _announce_load(ctx, "pointmap", size, progress)
    result = dense.estimate_pointmap(image.rgb, ctx.manager, size, mask=mask)
    bounds = depth_bounds(result, mask)
    rendered = DepthAnnotator().annotate(image.rgb, result, bounds=bounds)
    # the colour bar (metres) on both sides of the slider keeps them the same size
    before, after = attach_colorbar(image.rgb, bounds), attach_colorbar(rendered, bounds)
    files = [export.write_depth_png(result, run_dir), export.write_depth_npy(result, run_dir)]
    notes = [*image.notes, f"Depth colour scale: {bounds.near:.2f}–{bounds.far:.2f} m (inverse depth, turbo).",
             f"Focal length used: fx = {result.focal_length:.1f} px at the model input (scale {result.scale:.4f})."]
    glb = None
    try:
        ply, glb = export.write_point_cloud(result, image.rgb, run_dir, max_points=max_points)
        files += [ply, glb]
    except export.NothingToExport as error:  # e.g. no person found by the segmentation
        notes.append(str(error))
    _timed(ctx, notes, "Depth & 3D", started)
    return TaskOutput(main=after, before_after=(before, after), files=files, notes=notes, model3d=glb)


def matting(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None, background: str = "colour",
            colour: str = "#00b140", background_image: np.ndarray | None = None) -> TaskOutput:
    from .render.matting import MattingAnnotator

    if background == "image" and background_image is None:  # before the forward, not after it
        raise ValueError("Choose a background image, or pick the 'colour' or 'transparent' background.")
    started = time.perf_counter()
    _announce_load(ctx, "matting", "1b", progress)
    result = dense.estimate_matting(image.rgb, ctx.manager, "1b")
    rendered = MattingAnnotator(background=background, colour=colour,
                                image=background_image).annotate(image.rgb, result)
    files = [export.write_matting_rgba(result, image.rgb, run_dir), export.write_alpha_png(result, run_dir)]
    notes = list(image.notes)
    _timed(ctx, notes, "Matting", started)
    return TaskOutput(main=rendered, before_after=(image.rgb, rendered), files=files, notes=notes)


def all_tasks(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None,
              size: str = "0.4b") -> TaskOutput:
    """Every task on one image; the segmentation is computed once and shared through the cache."""
    steps = [("Pose", pose, {"size": size}), ("Body parts", segment, {"size": size}),
             ("Normals", normals, {"size": size}), ("Depth", pointmap, {"size": size}),
             ("Matting", matting, {})]
    gallery, files, notes = [(image.rgb, "Input")], [], list(image.notes)
    for index, (title, fn, kwargs) in enumerate(steps):
        if progress is not None:
            progress(index / len(steps), desc=f"{title}...")
        task_dir = run_dir / title.lower().replace(" ", "_")
        task_dir.mkdir()
        try:
            out = fn(ctx, LoadedImage(image.rgb, image.original_size, []), run_dir=task_dir, **kwargs)
        except Exception as error:  # one task failing (e.g. a missing checkpoint) must not sink the rest
            notes.append(f"{title}: {error}")
            continue
        gallery.append((out.main, title))
        files.extend(out.files)
        notes.extend(f"{title}: {note}" for note in out.notes)
    archive = run_dir / "sapiens2_all_tasks.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in files:
            zf.write(path, arcname=f"{path.parent.name}/{path.name}")
    return TaskOutput(files=[archive], notes=notes, gallery=gallery)

"""One function per tab: loaded image -> GPU call (pipelines) -> renderer / exporter -> TaskOutput.

UI-agnostic (no gradio here), so the same calls serve the UI, the API and the tests. Models run only inside
`gpu.infer` (data in, numpy results out: ZeroGPU-safe); rendering and file writing happen here, outside it.
"""

from __future__ import annotations

import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from . import gpu
from .export.task_files import write_task_files
from .media.image import LoadedImage
from .models.manager import ModelManager
from .models.registry import checkpoint
from .pipelines.dense import SegmentationCache
from .ui.outputs import OutputStore


@dataclass
class AppContext:
    manager: ModelManager
    seg_cache: SegmentationCache = field(default_factory=SegmentationCache)
    outputs: OutputStore = field(default_factory=OutputStore)
    max_people: int = 50
    manager_key: str = ""  # how GPU calls reach the manager (set from `manager`)

    def __post_init__(self):
        self.manager_key = gpu.register(self.manager, self.seg_cache)


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
        progress(0.1, desc=f"Loading {ckpt.repo_id} (first use: slower)...")


def _timed(ctx: AppContext, notes: list[str], label: str, started: float) -> None:
    notes.append(f"{label} took {time.perf_counter() - started:.2f} s on {ctx.manager.device}.")


def _infer(ctx: AppContext, image: LoadedImage, jobs: list[gpu.Job], progress) -> list:
    for job in jobs:
        _announce_load(ctx, job.task, job.size, progress)
        if job.options.get("remove_background"):
            _announce_load(ctx, "seg", job.size, progress)
    return gpu.answers(ctx.manager_key, [image.rgb], jobs)


def pose_job(ctx: AppContext, image: np.ndarray, size: str = "0.4b", boxes=None, flip_test: bool = True,
             detection_threshold: float = 0.3, nms_iou: float = 0.3, max_people: int = 20) -> gpu.Job:
    """The pose job for one image; user boxes are validated here, before any model work."""
    from .pose.boxes import parse_boxes
    from .pose.pipeline import Detections

    max_people = min(int(max_people), ctx.max_people)
    user_boxes = parse_boxes(boxes or None, image.shape[:2], max_boxes=max_people)
    detections = None if user_boxes is None else [Detections(user_boxes, np.ones(len(user_boxes), np.float32))]
    return gpu.Job("pose", size, dict(detections=detections, flip_test=flip_test, score_threshold=detection_threshold,
                                      nms_iou=nms_iou, max_people=max_people))


# --- presenting a result: renders, downloads, notes (no model work) ----------------------------------
def present_pose(image: LoadedImage, result, run_dir: Path, *, keypoint_threshold: float = 0.3,
                 show_face: bool = True, show_boxes: bool = True) -> TaskOutput:
    from .render.skeleton import SkeletonAnnotator

    drawing = SkeletonAnnotator().annotate(image.rgb, result, keypoint_threshold=keypoint_threshold,
                                           show_face=show_face, show_boxes=show_boxes)
    files = write_task_files("pose", image.rgb, result, run_dir, keypoint_threshold=keypoint_threshold)
    notes = [*image.notes, *result.notes, f"{result.num_people} person(s) posed."]
    return TaskOutput(main=drawing, files=files, notes=notes)


def present_segment(image: LoadedImage, result, run_dir: Path, *, opacity: float = 0.5,
                    show_names: bool = False) -> TaskOutput:
    from .render.parts import PartNamesAnnotator, PartsAnnotator, parts_legend

    overlay = PartsAnnotator(opacity=opacity).annotate(image.rgb, result)
    if show_names:
        overlay = PartNamesAnnotator().annotate(overlay, result)
    entries = sorted(parts_legend(result), key=lambda entry: -entry.share)  # biggest parts first
    legend = [[entry.name.replace("_", " "), f'<span style="color:rgb{tuple(entry.rgb)}">&#9632;</span>',
               round(100 * entry.share, 2)] for entry in entries]
    files = write_task_files("seg", image.rgb, result, run_dir)
    return TaskOutput(main=overlay, before_after=(image.rgb, overlay), files=files, notes=list(image.notes),
                      legend=legend)


def present_normals(image: LoadedImage, result, run_dir: Path, *, background: str = "black",
                    png_bits: int = 16) -> TaskOutput:
    from .render.normals import NormalsAnnotator

    rendered = NormalsAnnotator(background=background).annotate(image.rgb, result)
    files = write_task_files("normal", image.rgb, result, run_dir, png_bits=png_bits)
    return TaskOutput(main=rendered, before_after=(image.rgb, rendered), files=files, notes=list(image.notes))


def present_pointmap(image: LoadedImage, result, run_dir: Path, *, max_points: int = 200_000) -> TaskOutput:
    from .render.depth import DepthAnnotator, attach_colorbar, depth_bounds

    bounds = depth_bounds(result, result.mask)
    rendered = DepthAnnotator().annotate(image.rgb, result, bounds=bounds)
    # the colour bar (metres) on both sides of the slider keeps them the same size
    before, after = attach_colorbar(image.rgb, bounds), attach_colorbar(rendered, bounds)
    notes = [*image.notes, f"Depth colour scale: {bounds.near:.2f}–{bounds.far:.2f} m (inverse depth, turbo).",
             f"Focal length used: fx = {result.focal_length:.1f} px at the model input (scale {result.scale:.4f})."]
    files = write_task_files("pointmap", image.rgb, result, run_dir, max_points=max_points, notes=notes)
    glb = next((path for path in files if path.suffix == ".glb"), None)
    return TaskOutput(main=after, before_after=(before, after), files=files, notes=notes, model3d=glb)


def present_matting(image: LoadedImage, result, run_dir: Path, *, background: str = "colour",
                    colour: str = "#00b140", background_image: np.ndarray | None = None) -> TaskOutput:
    from .render.matting import MattingAnnotator

    rendered = MattingAnnotator(background=background, colour=colour,
                                image=background_image).annotate(image.rgb, result)
    files = write_task_files("matting", image.rgb, result, run_dir)
    return TaskOutput(main=rendered, before_after=(image.rgb, rendered), files=files, notes=list(image.notes))


# --- tabs -------------------------------------------------------------------------------------------
def pose(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None, size: str = "0.4b",
         boxes: str | list | None = None, flip_test: bool = True, detection_threshold: float = 0.3,
         nms_iou: float = 0.3, max_people: int = 20, keypoint_threshold: float = 0.3,
         show_face: bool = True, show_boxes: bool = True) -> TaskOutput:
    started = time.perf_counter()
    job = pose_job(ctx, image.rgb, size, boxes, flip_test, detection_threshold, nms_iou, max_people)
    [result] = _infer(ctx, image, [job], progress)[0]
    out = present_pose(image, result, run_dir, keypoint_threshold=keypoint_threshold, show_face=show_face,
                       show_boxes=show_boxes)
    _timed(ctx, out.notes, "Pose", started)
    return out


def segment(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None, size: str = "0.4b",
            opacity: float = 0.5, show_names: bool = False) -> TaskOutput:
    started = time.perf_counter()
    [result] = _infer(ctx, image, [gpu.Job("seg", size)], progress)[0]
    out = present_segment(image, result, run_dir, opacity=opacity, show_names=show_names)
    _timed(ctx, out.notes, "Segmentation", started)
    return out


def normals(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None, size: str = "0.4b",
            remove_background: bool = True, background: str = "black", png_bits: int = 16) -> TaskOutput:
    started = time.perf_counter()
    [result] = _infer(ctx, image, [gpu.Job("normal", size, {"remove_background": remove_background})], progress)[0]
    out = present_normals(image, result, run_dir, background=background, png_bits=png_bits)
    _timed(ctx, out.notes, "Normals", started)
    return out


def pointmap(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None, size: str = "0.4b",
             remove_background: bool = True, max_points: int = 200_000) -> TaskOutput:
    started = time.perf_counter()
    [result] = _infer(ctx, image, [gpu.Job("pointmap", size, {"remove_background": remove_background})], progress)[0]
    out = present_pointmap(image, result, run_dir, max_points=max_points)
    _timed(ctx, out.notes, "Depth & 3D", started)
    return out


def matting(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None, background: str = "colour",
            colour: str = "#00b140", background_image: np.ndarray | None = None) -> TaskOutput:
    if background == "image" and background_image is None:  # before the forward, not after it
        raise ValueError("Choose a background image, or pick the 'colour' or 'transparent' background.")
    started = time.perf_counter()
    [result] = _infer(ctx, image, [gpu.Job("matting", "1b")], progress)[0]
    out = present_matting(image, result, run_dir, background=background, colour=colour,
                          background_image=background_image)
    _timed(ctx, out.notes, "Matting", started)
    return out


def all_tasks(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None,
              size: str = "0.4b") -> TaskOutput:
    """Every task on one image in one GPU call; the segmentation is computed once and shared (the cache).
    A task that fails (e.g. a missing checkpoint) is reported in the notes and the others go on."""
    steps = [("Pose", present_pose, pose_job(ctx, image.rgb, size)),
             ("Body parts", present_segment, gpu.Job("seg", size)),
             ("Normals", present_normals, gpu.Job("normal", size, {"remove_background": True})),
             ("Depth", present_pointmap, gpu.Job("pointmap", size, {"remove_background": True})),
             ("Matting", present_matting, gpu.Job("matting", "1b"))]
    if progress is not None:
        progress(0.05, desc="Running every task...")
    jobs = [job for _, _, job in steps]
    for job in jobs:
        job.tolerate_errors = True
    answers = _infer(ctx, image, jobs, progress)
    gallery, files, notes = [(image.rgb, "Input")], [], list(image.notes)
    for (title, present, _), answer in zip(steps, answers):
        if isinstance(answer, Exception):
            notes.append(f"{title}: {answer}")
            continue
        task_dir = run_dir / title.lower().replace(" ", "_")
        out = present(LoadedImage(image.rgb, image.original_size, []), answer[0], task_dir)
        gallery.append((out.main, title))
        files.extend(out.files)
        notes.extend(f"{title}: {note}" for note in out.notes)
    archive = run_dir / "sapiens2_all_tasks.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:  # PNG/GLB are compressed already
        for path in files:
            zf.write(path, arcname=f"{path.parent.name}/{path.name}")
    return TaskOutput(files=[archive], notes=notes, gallery=gallery)

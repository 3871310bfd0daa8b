"""The Features request: Sapiens2's pretrained backbone seen and exported (UI-agnostic, like `image.py`):
one or two images in, the PCA pictures, the downloads, the cosine similarity and notes out."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .. import tasks
from ..export.features import write_features
from ..media.image import ImageError, LoadedImage, load_image
from ..models.manager import CheckpointUnavailable
from ..pipelines.features import patch_mask
from ..render.features import cosine_similarity, features_picture, joint_pca_rgb, upsample_to_image
from ..results import FeaturesResult, TaskOutput
from ..tasks.summary import summarize
from .image import AppContext, infer, load_notes


@dataclass
class FeaturesOutput(TaskOutput):
    """TaskOutput plus the similarity; with a second image, `gallery` holds [(image 2, "Image 2"),
    (its joint-PCA picture, ...)] (the gallery is what the app turns into PNG files for gradio)."""

    similarity: float | None = None  # cosine similarity of the two CLS embeddings


def features_jobs(size: str, use_mask: bool) -> list:
    """The tab's GPU jobs: the features, and with `use_mask` the body parts in a separate job, so a missing
    segmentation model only costs the mask (a note), not the run."""
    jobs = [tasks.get("features").job(size, {"remove_background": False})]
    if use_mask:
        jobs.append(tasks.get("segment").job(size, tolerate_errors=True))
    return jobs


def infer_features(ctx: AppContext, frames: list[np.ndarray], size: str, use_mask: bool,
                   progress=None) -> tuple[list[FeaturesResult], list]:
    """Every model call of the tab in one GPU call (data in, numpy out): the features of `frames` and, with
    `use_mask`, each frame's body-part segmentation (or the error when there is no such model)."""
    answers = infer(ctx, frames, features_jobs(size, use_mask), progress)
    if not use_mask:
        return answers[0], [None] * len(frames)
    segmentations = answers[1]
    if isinstance(segmentations, Exception):
        if not isinstance(segmentations, CheckpointUnavailable):
            raise segmentations
        segmentations = [segmentations] * len(frames)
    return answers[0], segmentations


def _person_patches(result: FeaturesResult, segmentation, label: str, notes: list[str]) -> np.ndarray | None:
    """The patch-grid person mask, or None (with a note) when there is no segmentation or no person: the
    colours are then fitted on every patch."""
    if segmentation is None:
        return None
    if isinstance(segmentation, Exception):
        notes.append(f"{label}: no person mask (the segmentation model is unavailable: {segmentation}); "
                     "colours fitted on every patch.")
        return None
    mask = patch_mask(segmentation.foreground, result.grid_hw)
    if mask.sum() < 2:
        notes.append(f"{label}: the segmentation found no person; colours fitted on every patch.")
        return None
    return mask


def run_features(ctx: AppContext, image: LoadedImage, image2: LoadedImage | None = None, *, run_dir: Path,
                 progress=None, size: str = "0.4b", use_mask: bool = True) -> FeaturesOutput:
    """CLS embedding + patch features of `image` (and `image2`), PCA colours (one joint PCA for two images),
    files `features_*` (and `features2_*`), and the cosine similarity of the two embeddings."""
    started, since = time.perf_counter(), ctx.manager.notes_mark()
    images = [image] + ([image2] if image2 is not None else [])
    labels = ["Image", "Second image"]
    notes = [f"{labels[k]}: {note}" if k else note for k, im in enumerate(images) for note in im.notes]
    results, segmentations = infer_features(ctx, [im.rgb for im in images], size, use_mask, progress)
    masks = [_person_patches(result, segmentation, label, notes)
             for result, segmentation, label in zip(results, segmentations, labels)]
    if len(results) == 1:
        pictures = [features_picture(results[0].patches, results[0].image_hw, masks[0])]
    else:
        grids = joint_pca_rgb(results[0].patches, results[1].patches, masks[0], masks[1])
        pictures = [upsample_to_image(grid, result.image_hw) for grid, result in zip(grids, results)]
    files = []
    for k, (result, picture) in enumerate(zip(results, pictures)):
        files += write_features(result, picture, run_dir, prefix="features" if k == 0 else "features2")

    (h, w), (patch_h, patch_w) = results[0].grid_hw, results[0].patch_size_px
    notes.append(f"Patch grid {w} wide x {h} tall (one patch = {patch_w:.1f} px wide x {patch_h:.1f} px tall); "
                 f"CLS embedding of {results[0].embedding.size} values.")
    notes.append("Colours: the first 3 PCA components of the patch features as RGB"
                 + (", one PCA for both images (same colour = similar features)." if image2 is not None else "."))
    output = FeaturesOutput(main=pictures[0], before_after=(image.rgb, pictures[0]), files=files, notes=notes)
    output.summary = summarize(results[0], image.rgb.shape[:2])
    if image2 is not None:
        output.similarity = cosine_similarity(results[0].embedding, results[1].embedding)
        output.summary["cls_cosine_similarity"] = round(float(output.similarity), 4)
        output.gallery = [(image2.rgb, "Second image"), (pictures[1], "Second image: joint PCA colours")]
        notes.append(f"Cosine similarity of the CLS embeddings: {output.similarity:.4f}.")
    notes.append(f"Features took {time.perf_counter() - started:.2f} s on {ctx.manager.device}.")
    notes.extend(load_notes(ctx, since, features_jobs(size, use_mask)))  # its own load's note
    return output


def load_second_image(image2) -> LoadedImage | None:
    """The optional second upload, its problems worded as the second image's."""
    if image2 is None:
        return None
    try:
        return load_image(image2)
    except ImageError as error:
        raise ImageError(f"Second image: {error}") from None



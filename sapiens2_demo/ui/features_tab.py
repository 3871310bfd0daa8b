"""The Features tab: Sapiens2's pretrained backbone seen and exported.

`run_features` is the task-level function (UI-agnostic, like those in `tasks`): one or two images in,
the PCA pictures, the downloads, the cosine similarity and notes out. `build_features_tab` lays the tab
out inside `build_app`'s `gr.Blocks` and wires the named endpoint `/features`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..export.features import write_features
from ..media.image import ImageError, LoadedImage, load_image
from ..models.manager import CheckpointUnavailable
from ..models.registry import TASKS, checkpoint, default_size
from ..pipelines import dense
from ..pipelines.features import FeaturesResult, extract_features, patch_mask
from ..render.features import cosine_similarity, features_picture, joint_pca_rgb, upsample_to_image
from ..tasks import AppContext, TaskOutput


@dataclass
class FeaturesOutput(TaskOutput):
    """TaskOutput plus the similarity; with a second image, `gallery` holds [(image 2, "Image 2"),
    (its joint-PCA picture, ...)] (the gallery is what the app turns into PNG files for gradio)."""

    similarity: float | None = None  # cosine similarity of the two CLS embeddings


def _announce_load(ctx: AppContext, task: str, size: str, progress) -> None:
    ckpt = checkpoint(task, size)
    if progress is not None and not ctx.manager.is_loaded(ckpt):
        progress(0.1, desc=f"Loading {ckpt.repo_id} (first use: slower)...")


def infer_features(ctx: AppContext, frames: list[np.ndarray], size: str, use_mask: bool,
                   progress=None) -> tuple[list[FeaturesResult], list]:
    """Every model call of the tab in one GPU call (data in, numpy out): the features of `frames` and, with
    `use_mask`, each frame's body-part segmentation (or the error when there is no such model)."""
    from .. import gpu

    _announce_load(ctx, "pretrain", size, progress)
    jobs = [gpu.Job("pretrain", size)]
    if use_mask:
        _announce_load(ctx, "seg", size, progress)
        jobs.append(gpu.Job("seg", size, tolerate_errors=True))
    answers = gpu.answers(ctx.manager_key, frames, jobs)
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
    started = time.perf_counter()
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
    notes.append(f"Patch grid {h}x{w} (one patch = {patch_h:.1f}x{patch_w:.1f} image pixels); "
                 f"CLS embedding of {results[0].embedding.size} values.")
    notes.append("Colours: the first 3 PCA components of the patch features as RGB"
                 + (", one PCA for both images (same colour = similar features)." if image2 is not None else "."))
    output = FeaturesOutput(main=pictures[0], before_after=(image.rgb, pictures[0]), files=files, notes=notes)
    if image2 is not None:
        output.similarity = cosine_similarity(results[0].embedding, results[1].embedding)
        output.gallery = [(image2.rgb, "Second image"), (pictures[1], "Second image: joint PCA colours")]
        notes.append(f"Cosine similarity of the CLS embeddings: {output.similarity:.4f}.")
    notes.append(f"Features took {time.perf_counter() - started:.2f} s on {ctx.manager.device}.")
    return output


def load_second_image(image2) -> LoadedImage | None:
    """The optional second upload, its problems worded as the second image's."""
    if image2 is None:
        return None
    try:
        return load_image(image2)
    except ImageError as error:
        raise ImageError(f"Second image: {error}") from None


def build_features_tab(ctx: AppContext, task_tab, run) -> Callable:
    """Call inside `build_app`'s `with gr.Blocks()`, after the other tabs:

        build_features_tab(ctx, task_tab, run)

    `task_tab` is build_app's tab scaffold and `run` its `run(task_title, fn, image, request, progress,
    **kwargs)` helper (load the upload, make the run folder, infer, hand PNG files to gradio).
    Returns the endpoint's handler."""
    import gradio as gr

    from .app import ImageUpload, user_errors

    def features(image, image2=None, size: str = "0.4b", use_mask: bool = True,
                 request: gr.Request = None, progress=gr.Progress()):
        with user_errors("Features"):
            second = load_second_image(image2)
        out = run("Features", run_features, image, request, progress, image2=second, size=size,
                  use_mask=bool(use_mask))
        pair2 = (out.gallery[0][0], out.gallery[1][0]) if out.gallery else None
        notes = "\n".join(f"- {note}" for note in out.notes)
        return out.before_after, pair2, out.similarity, [str(p) for p in out.files], notes

    with task_tab("Features", "features") as tab:
        with tab.inputs:
            size_dropdown = gr.Dropdown(list(TASKS["pretrain"].sizes), value=default_size("pretrain"),
                                        label="Model size (facebook/sapiens2-pretrain)")
            image2 = ImageUpload(type="filepath", label="Second image (optional): one joint PCA and the "
                                 "similarity of the two", sources=["upload", "clipboard"])
            use_mask = gr.Checkbox(True, label="Fit the colours on the person only (body-part segmentation)")
            btn = gr.Button("Extract features", variant="primary")
        with tab.results:
            slider = gr.ImageSlider(label="Image / PCA colours of the patch features", format="png",
                                    interactive=False, elem_id="features-output")
            slider2 = gr.ImageSlider(label="Second image / joint PCA colours", format="png", interactive=False,
                                     elem_id="features-output2")
            similarity = gr.Number(label="Cosine similarity of the CLS embeddings", precision=4,
                                   interactive=False, elem_id="features-similarity")
            files = gr.File(label="Downloads (CLS embedding .npy, patch features .npy, PCA PNG)",
                            file_count="multiple", elem_id="features-files")
        btn.click(features, [tab.img, image2, size_dropdown, use_mask],
                  [slider, slider2, similarity, files, tab.info], api_name="features", concurrency_id="pretrain")
    return features

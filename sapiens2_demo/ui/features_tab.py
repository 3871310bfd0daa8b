"""The Features tab: lays the tab out inside `build_app`'s `gr.Blocks` and wires the named endpoint `/features`
(the request itself is `jobs/features.py`)."""

from __future__ import annotations

from collections.abc import Callable

import gradio as gr

from .. import tasks
from ..jobs.features import load_second_image, run_features
from ..jobs.image import AppContext
from .common import ImageUpload, answer_markdown, check_upload, cleared_by, needs, user_errors
from .sizes import size_menu


def build_features_tab(ctx: AppContext, task_tab, run) -> Callable:
    """Call inside `build_app`'s `with gr.Blocks()`, after the other tabs:

        build_features_tab(ctx, task_tab, run)

    `task_tab` is build_app's tab scaffold and `run` its `run(task_title, fn, image, request, progress,
    **kwargs)` helper (load the upload, make the run folder, infer, hand PNG files to gradio).
    Returns the endpoint's handler. gradio passes `request` (whose session names the visitor's output folder)
    only where it can resolve the type hint in this module's globals, so gradio is imported at the top."""

    def features(image, image2=None, size: str = "0.4b", use_mask: bool = True,
                 request: gr.Request = None, progress=gr.Progress()):
        """Sapiens2 backbone features of an image (the pretrained model, no task head): the CLS embedding and
        the patch features, shown as PCA colours; with a second image, the joint PCA colours of both and the
        cosine similarity of their CLS embeddings.

        Args:
            image: the input picture (JPEG, PNG, WebP; up to 50 megapixels)
            image2: an optional second picture to compare with the first
            size: model size, one of 0.1b, 0.4b, 0.8b, 1b, 5b (facebook/sapiens2-pretrain-<size>; 0.1b does a
                quarter of 0.4b's work; default '0.4b')
            use_mask: fit the PCA colours on the person only, found with the body-part model (true or false)

        Returns:
            the image and its PCA colours; the second image and its colours (or nothing); the similarity (or
            nothing); the downloads (CLS embedding .npy, patch features .npy, PCA PNG); notes (Markdown)
        """
        with user_errors("Features"):
            second = load_second_image(image2)
        out = run("Features", run_features, image, request, progress, image2=second, size=size,
                  use_mask=bool(use_mask))
        pair2 = (out.gallery[0][0], out.gallery[1][0]) if out.gallery else None
        return out.before_after, pair2, out.similarity, [str(p) for p in out.files], answer_markdown(ctx, out.notes)

    with task_tab("Features", "features") as tab:
        with tab.inputs:
            spec = tasks.get("features")
            size_dropdown = size_menu(ctx.manager, [spec.family], spec.sizes,
                                      label=f"Model size (facebook/sapiens2-{spec.family})")
            image2 = ImageUpload(type="filepath", label="Second image (optional): one joint PCA and the "
                                 "similarity of the two", sources=["upload", "clipboard"])
            use_mask = gr.Checkbox(True, label="Fit the colours on the person only (body-part segmentation)")
            btn = gr.Button("Extract features", variant="primary")
        with tab.results:
            slider = gr.ImageSlider(label="Image / PCA colours of the patch features", format="png",
                                    interactive=False, elem_id="features-output")
            # the second image's results only show when there is a second image
            slider2 = gr.ImageSlider(label="Second image / joint PCA colours", format="png", interactive=False,
                                     visible=False, elem_id="features-output2")
            similarity = gr.Number(label="Cosine similarity of the CLS embeddings", precision=4,
                                   interactive=False, visible=False, elem_id="features-similarity")
            files = gr.File(label="Downloads (CLS embedding .npy, patch features .npy, PCA PNG)",
                            file_count="multiple", interactive=False, elem_id="features-files")
        image2.upload(check_upload, image2, image2, api_visibility="private", show_progress="hidden")
        for picture in (tab.img, image2):  # either picture's change: the results were of the pictures before
            cleared_by(picture, [slider, slider2, similarity, files, tab.info])
        image2.change(lambda second: [gr.update(visible=second is not None)] * 2, image2, [slider2, similarity],
                      api_visibility="private", show_progress="hidden")
        btn.click(features, [tab.img, image2, size_dropdown, use_mask],
                  [slider, slider2, similarity, files, tab.info], api_name=spec.name, concurrency_id=spec.family,
                  show_progress_on=[slider], validator=needs("an image"))
        from . import mcp  # its hidden outputs inside the tab: between two tabs they would split the tab bar

        mcp.add_features_tool(ctx, [tab.img, image2, size_dropdown, use_mask], features.__doc__, spec.family)
    return features

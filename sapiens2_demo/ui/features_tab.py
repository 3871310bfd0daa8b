"""The Features tab: lays the tab out inside `build_app`'s `gr.Blocks` and wires the named endpoint `/features`
(the request itself is `jobs/features.py`)."""

from __future__ import annotations

from collections.abc import Callable

from .. import tasks
from ..jobs.features import load_second_image, run_features
from ..jobs.image import AppContext
from ..util import notes_markdown


def build_features_tab(ctx: AppContext, task_tab, run) -> Callable:
    """Call inside `build_app`'s `with gr.Blocks()`, after the other tabs:

        build_features_tab(ctx, task_tab, run)

    `task_tab` is build_app's tab scaffold and `run` its `run(task_title, fn, image, request, progress,
    **kwargs)` helper (load the upload, make the run folder, infer, hand PNG files to gradio).
    Returns the endpoint's handler."""
    import gradio as gr

    from .common import ImageUpload, user_errors

    def features(image, image2=None, size: str = "0.4b", use_mask: bool = True,
                 request: gr.Request = None, progress=gr.Progress()):
        with user_errors("Features"):
            second = load_second_image(image2)
        out = run("Features", run_features, image, request, progress, image2=second, size=size,
                  use_mask=bool(use_mask))
        pair2 = (out.gallery[0][0], out.gallery[1][0]) if out.gallery else None
        return out.before_after, pair2, out.similarity, [str(p) for p in out.files], notes_markdown(out.notes)

    with task_tab("Features", "features") as tab:
        with tab.inputs:
            spec = tasks.get("features")
            size_dropdown = gr.Dropdown(list(spec.sizes), value=spec.default_size(),
                                        label=f"Model size (facebook/sapiens2-{spec.family})")
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
                  [slider, slider2, similarity, files, tab.info], api_name=spec.name, concurrency_id=spec.family)
    return features

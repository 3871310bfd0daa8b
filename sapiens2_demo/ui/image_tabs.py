"""The image tabs, built from the task descriptions: one tab and one named endpoint per task with a presenter,
its widgets made from the task's options, plus the All-tasks tab.

An endpoint's parameters are `image`, then `size` (when the task has more than one), then the task's options
in order, each with its default, so gradio_client calls them by name: `client.predict(img, boxes=..., api_name=
"/pose")`. The handler's signature is built from the options (gradio reads parameter names from it).
"""

from __future__ import annotations

import inspect
from pathlib import Path

import gradio as gr

from .. import tasks
from ..jobs import image as image_jobs
from ..media.image import ImageError, load_image
from ..util import notes_markdown
from .common import ImageUpload, as_display_files, session_of, task_tab, user_errors


def stream_request(ctx, title: str, stream, image, request, progress, **kwargs):
    """Load the upload, make the run folder, run `stream` (a job yielding TaskOutputs: the shown result, then
    the complete one), and hand each step to gradio with display files."""
    with user_errors(title):
        if image is None:
            raise ImageError("Please upload an image first.")
        loaded = load_image(image)
        run_dir = ctx.outputs.new_run_dir(session_of(request))
        saved = {}
        for out in stream(ctx, loaded, run_dir=run_dir, progress=progress, **kwargs):
            yield as_display_files(out, run_dir, loaded, image if isinstance(image, str) else None, saved)


def run_request(ctx, title: str, fn, image, request, progress, **kwargs):
    """stream_request for a job that returns one TaskOutput."""
    *_, out = stream_request(ctx, title, lambda *args, **kw: [fn(*args, **kw)], image, request, progress, **kwargs)
    return out


def size_choice(spec, label: str = "Model size"):
    return gr.Dropdown(list(spec.sizes), value=spec.default_size(), label=label, interactive=len(spec.sizes) > 1)


def option_widget(option, ctx):
    """The gradio component for one task option."""
    if option.kind == "checkbox":
        return gr.Checkbox(option.default, label=option.label)
    if option.kind == "slider":
        high = ctx.max_people if option.name == "max_people" else option.high  # the app's own cap
        return gr.Slider(option.low, high, min(option.default, high), step=option.step, label=option.label)
    if option.kind == "radio":
        return gr.Radio(list(option.choices), value=option.default, label=option.label)
    if option.kind == "dropdown":
        return gr.Dropdown(list(option.choices), value=option.default, label=option.label)
    if option.kind == "text":
        return gr.Textbox(option.default, label=option.label, placeholder="[[10, 20, 200, 400]]")
    if option.kind == "colour":
        return gr.ColorPicker(option.default, label=option.label)
    if option.kind == "image":
        return ImageUpload(type="filepath", label=option.label)
    raise ValueError(f"Unknown option kind {option.kind!r}")


def result_widget(kind: str, spec):
    elem_id = f"{spec.name}-output"
    if kind == "image":
        return gr.Image(label=spec.result_label, format="jpeg", interactive=False, elem_id=elem_id)
    if kind == "slider":
        return gr.ImageSlider(label=spec.result_label, format="jpeg", interactive=False, elem_id=elem_id)
    if kind == "legend":
        return gr.Dataframe(headers=["class", "colour", "share %"], label="Classes present", interactive=False,
                            datatype=["str", "html", "number"])
    if kind == "model3d":
        return gr.Model3D(label=spec.model3d_label, clear_color=(0.1, 0.1, 0.1, 1.0), elem_id=f"{spec.name}-3d")
    raise ValueError(f"Unknown output kind {kind!r}")


def result_value(kind: str, out):
    return {"image": lambda: out.main, "slider": lambda: out.before_after, "legend": lambda: out.legend,
            "model3d": lambda: str(out.model3d) if out.model3d else None}[kind]()


def make_handler(ctx, spec):
    """The endpoint function for `spec`, with a signature gradio and gradio_client read parameter names from."""
    has_size = len(spec.sizes) > 1
    names = (["size"] if has_size else []) + [option.name for option in spec.options]
    images = {option.name for option in spec.options if option.kind == "image"}

    def handler(image, *args):
        *values, request, progress = args
        chosen = dict(zip(names, values))
        with user_errors(spec.title):
            for name in images:  # extra pictures (e.g. a background) go through the same loader
                chosen[name] = load_image(chosen[name]).rgb if chosen.get(name) is not None else None
        # the render first, then the downloads: what the user looks at does not wait for the files
        for out in stream_request(ctx, spec.title, image_jobs.stream_task, image, request, progress,
                                  task=spec.name, **chosen):
            yield (*[result_value(kind, out) for kind in spec.outputs], [str(p) for p in out.files],
                   notes_markdown(out.notes))

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    defaults = {"size": spec.default_size(), **spec.defaults()}
    handler.__signature__ = inspect.Signature(
        [inspect.Parameter("image", kind)]
        + [inspect.Parameter(name, kind, default=defaults[name]) for name in names]
        + [inspect.Parameter("request", kind, default=None, annotation=gr.Request),
           inspect.Parameter("progress", kind, default=gr.Progress())])
    handler.__name__ = spec.name
    return handler


def viewer_value(spec, files):
    """The extra 3D viewer after a run: the first returned file named `spec.viewer_file`, shown; else hidden."""
    paths = [getattr(f, "path", None) or getattr(f, "name", None) or f for f in files or []]
    found = next((str(p) for p in paths if Path(str(p)).name == spec.viewer_file), None)
    return gr.Model3D(value=found, visible=found is not None)


def build_task_tab(ctx, spec) -> None:
    with task_tab(spec.title, spec.name) as tab:
        with tab.inputs:
            size = size_choice(spec)
            plain = [option_widget(o, ctx) for o in spec.options if not o.advanced]
            advanced = [o for o in spec.options if o.advanced]
            if advanced:
                with gr.Accordion("Options", open=False):
                    advanced = [option_widget(o, ctx) for o in advanced]
            btn = gr.Button(spec.button, variant="primary")
        with tab.results:
            shown = [result_widget(kind, spec) for kind in spec.outputs]
            files = gr.File(label=spec.files_label, file_count="multiple", elem_id=f"{spec.name}-files")
            viewer = (gr.Model3D(label=spec.viewer_label, clear_color=(0.1, 0.1, 0.1, 1.0), visible=False,
                                 elem_id=f"{spec.name}-viewer") if spec.viewer_file else None)
    by_name = dict(zip([o.name for o in spec.options if not o.advanced], plain))
    by_name.update(zip([o.name for o in spec.options if o.advanced], advanced))
    inputs = [tab.img] + ([size] if len(spec.sizes) > 1 else []) + [by_name[o.name] for o in spec.options]
    event = btn.click(make_handler(ctx, spec), inputs, [*shown, files, tab.info], api_name=spec.name,
                      concurrency_id=spec.family)
    if viewer is not None:  # filled from the returned files: the endpoint's return values stay as they are
        event.then(lambda paths: viewer_value(spec, paths), files, viewer, api_visibility="private",
                   show_progress="hidden")


def build_all_tab(ctx) -> None:
    def all_tasks(image, size: str = "0.4b", request: gr.Request = None, progress=gr.Progress()):
        for out in stream_request(ctx, "All tasks", image_jobs.stream_all, image, request, progress, size=size):
            yield out.gallery, (str(out.files[0]) if out.files else None), notes_markdown(out.notes)

    with task_tab("All tasks", "all", scales=(1, 2)) as tab:
        with tab.inputs:
            size = gr.Dropdown(list(tasks.specs(in_all=True)[0].sizes), value="0.4b",
                               label="Model size (a task with one size always uses it)")
            btn = gr.Button("Run every task", variant="primary")
        with tab.results:
            gallery = gr.Gallery(label="All tasks", columns=3, height="auto", format="png", elem_id="all-output")
            files = gr.File(label="Download everything (.zip)", elem_id="all-files")
    btn.click(all_tasks, [tab.img, size], [gallery, files, tab.info], api_name="all", concurrency_id="all")

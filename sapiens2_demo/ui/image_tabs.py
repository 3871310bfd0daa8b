"""The image tabs, built from the task descriptions: one tab and one named endpoint per task with a presenter,
its widgets made from the task's options, plus the All-tasks tab.

An endpoint's parameters are `image`, then `size` (when the task has more than one), then the task's options
in order, each with its default, so gradio_client calls them by name: `client.predict(img, boxes=..., api_name=
"/pose")`. The handler's signature is built from the options (gradio reads parameter names from it).

A tab's button streams (the render first, then the downloads when written, without the render again); the named
endpoint (API, MCP) answers once, complete (the updates merged): gradio_client fetches every file of every update
of a streamed answer and then the final one again, so a second update would cost an API caller more than it gives
(`python -m benchmarks endpoints --download-files`).
"""

from __future__ import annotations

import functools
import inspect

import gradio as gr

from .. import tasks
from ..jobs import image as image_jobs
from ..media.image import ImageError, load_image
from . import mcp
from .common import (
    ImageUpload,
    answer_markdown,
    as_display_files,
    check_upload,
    cleared_by,
    needs,
    session_of,
    task_tab,
    user_errors,
)
from .sizes import size_menu
from .viewers import SHOWN_MODELS, fill_after, model_viewer, shown


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


def option_widget(option, ctx, defaults: dict | None = None):
    """The gradio component for one task option; one with `shown_when` shows only while that choice is made
    (`defaults`: the task's option defaults, the choices at start)."""
    widget = _widget(option, ctx)
    if option.shown_when is not None:
        name, value = option.shown_when
        widget.visible = (defaults or {}).get(name) == value
    return widget


def _widget(option, ctx):
    if option.kind == "checkbox":
        return gr.Checkbox(option.default_on(ctx.manager.device), label=option.label, info=option.info or None)
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
        picture = ImageUpload(type="filepath", label=option.label, sources=["upload", "clipboard"])
        picture.upload(check_upload, picture, picture, api_visibility="private", show_progress="hidden")
        return picture
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
    if kind == "model3d":  # the endpoint's return value only: the tab shows the model in its own viewer
        return gr.Model3D(label=spec.model3d_label, visible=False, elem_id=f"{spec.name}-3d")
    raise ValueError(f"Unknown output kind {kind!r}")


def result_value(kind: str, out):
    return {"image": lambda: out.main, "slider": lambda: out.before_after, "legend": lambda: out.legend,
            "model3d": lambda: str(out.model3d) if out.model3d else None}[kind]()


def make_handler(ctx, spec, stream: bool = True):
    """The endpoint function for `spec`, with a signature gradio and gradio_client read parameter names from:
    a generator of the shown and then the complete output (stream), or a function returning the complete one."""
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
        for step, out in enumerate(stream_request(ctx, spec.title, image_jobs.stream_task, image, request,
                                                  progress, task=spec.name, **chosen)):
            SHOWN_MODELS.put(session_of(request), spec.name, str(out.model3d) if out.model3d else None)
            # the renders once: the second update carries the files and notes only (last_answer merges them)
            renders = [gr.skip() if step and kind in RENDERS else result_value(kind, out) for kind in spec.outputs]
            yield (*renders, [str(p) for p in out.files], answer_markdown(ctx, out.notes))

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    defaults = {"size": spec.default_size(), **spec.defaults(ctx.manager.device)}
    handler.__signature__ = inspect.Signature(
        [inspect.Parameter("image", kind)]
        + [inspect.Parameter(name, kind, default=defaults[name]) for name in names]
        + [inspect.Parameter("request", kind, default=None, annotation=gr.Request),
           inspect.Parameter("progress", kind, default=gr.Progress())])
    handler.__annotations__ = {"request": gr.Request}  # gradio finds the request by type hint, not the signature
    handler.__name__ = spec.name
    handler.__doc__ = endpoint_doc(spec, names)
    return handler if stream else last_answer(handler)


RENDERS = ("image", "slider", "legend")  # outputs the first update gives and the second skips


def skipped(value) -> bool:
    return isinstance(value, dict) and value == gr.skip()


def last_answer(streamed):
    """A function returning the complete answer of the generator function `streamed`: its updates merged (an
    output a later update skips keeps the earlier value), with its name, docstring and signature (gradio reads
    parameter names and the request's type hint from them)."""

    @functools.wraps(streamed)
    def complete(*args, **kwargs):
        merged = None
        for update in streamed(*args, **kwargs):
            merged = update if merged is None else tuple(old if skipped(new) else new
                                                         for old, new in zip(merged, update))
        return merged

    return complete


OUTPUT_DOCS = {"image": "the rendered picture", "slider": "the input and the rendered picture",
               "legend": "a table of the classes present (name, colour, share %)",
               "model3d": "the 3D model shown in the viewer (.glb)"}


def option_doc(option) -> str:
    """One parameter's line for the API docs and MCP: the label, the choices or range, the default."""
    if option.kind in ("radio", "dropdown"):
        values = [choice[1] if isinstance(choice, tuple) else choice for choice in option.choices]
        allowed = f"one of {', '.join(map(repr, values))}"
    elif option.kind == "slider":
        allowed = f"{option.low:g} to {option.high:g}"
    elif option.kind == "image":
        allowed = "an image file"
    elif option.kind == "checkbox":
        allowed = "true or false"
    else:
        allowed = "text" if option.kind == "text" else "a colour like '#00b140'"
    shown = f"; used when {option.shown_when[0]} is {option.shown_when[1]!r}" if option.shown_when else ""
    info = f" {option.info}" if option.info else ""
    default = f"default {option.default!r}" + (f", {option.cpu_default!r} on a CPU" if option.cpu_default is not None
                                               else "")
    return f"{option.label} ({allowed}; {default}{shown}).{info}"


IMAGE_DOC = "the input picture of one or more people (JPEG, PNG, WebP; up to 50 megapixels)"


def endpoint_doc(spec, names: list[str], image_doc: str = IMAGE_DOC, returns: str | None = None) -> str:
    """The handler's docstring: gradio shows it in the API page (and an MCP tool's, ui/mcp.py, as its description)."""
    options = {option.name: option for option in spec.options}
    lines = [spec.description or spec.title, "", "Args:", f"    image: {image_doc}"]
    for name in names:
        if name == "size":
            lines.append(f"    size: model size, one of {', '.join(spec.sizes)} (facebook/sapiens2-{spec.family}-"
                         "<size>; larger is more accurate and slower; default "
                         f"{spec.default_size()!r})")
        else:
            lines.append(f"    {name}: {option_doc(options[name])}")
    outputs = ", ".join(OUTPUT_DOCS[kind] for kind in spec.outputs)
    lines += ["", "Returns:", "    " + (returns or f"{outputs}; the downloads (a list of files); notes (Markdown)")]
    return "\n".join(lines)


def has_viewer(spec) -> bool:
    return "model3d" in spec.outputs or spec.viewer_file is not None


def build_task_tab(ctx, spec) -> None:
    # everything stays inside the tab: a component made between two tabs (the MCP tool's hidden outputs)
    # would split the tab bar in two, each tab then drawn under the other
    with task_tab(spec.title, spec.name) as tab:
        with tab.inputs:
            size = size_menu(ctx.manager, [spec.family], spec.sizes)
            plain = [option_widget(o, ctx, spec.defaults(ctx.manager.device)) for o in spec.options if not o.advanced]
            advanced = [o for o in spec.options if o.advanced]
            if advanced:
                with gr.Accordion("Options", open=False):
                    advanced = [option_widget(o, ctx, spec.defaults(ctx.manager.device)) for o in advanced]
            btn = gr.Button(spec.button, variant="primary")
        with tab.results:
            shown = [result_widget(kind, spec) for kind in spec.outputs]
            viewer = (model_viewer(spec.name, spec.viewer_label if spec.viewer_file else spec.model3d_label,
                                   *spec.viewer_card) if has_viewer(spec) else None)
            files = gr.File(label=spec.files_label, file_count="multiple", interactive=False,
                            elem_id=f"{spec.name}-files")
        by_name = dict(zip([o.name for o in spec.options if not o.advanced], plain))
        by_name.update(zip([o.name for o in spec.options if o.advanced], advanced))
        for option in spec.options:  # controls that apply only to one choice of another option
            if option.shown_when is not None:
                name, value = option.shown_when
                by_name[name].change(lambda chosen, value=value: gr.update(visible=chosen == value), by_name[name],
                                     by_name[option.name], api_visibility="private", show_progress="hidden")
        inputs = [tab.img] + ([size] if len(spec.sizes) > 1 else []) + [by_name[o.name] for o in spec.options]
        outputs = [*shown, files, tab.info]
        event = btn.click(make_handler(ctx, spec), inputs, outputs, api_name=f"{spec.name}_tab",
                          api_visibility="private", concurrency_id=spec.family, show_progress_on=shown[:1] or None,
                          validator=needs("an image"))
        gr.on([], make_handler(ctx, spec, stream=False), inputs, outputs, api_name=spec.name,  # the API only
              concurrency_id=spec.family)
        names = [o.name for o in spec.options]
        names = (["size"] if len(spec.sizes) > 1 else []) + names
        mcp.add_tool(ctx, spec, inputs, names, endpoint_doc(spec, names, mcp.IMAGE_INPUT, mcp.RETURNS))
        cleared_by(tab.img, outputs)
        if viewer is not None:  # the model the run recorded, in a step of its own (see viewers.py)
            fill_after(event, spec.name, viewer)
            card_on_new_input(tab.img, viewer)


def card_on_new_input(source, viewer) -> None:
    """A new input puts `viewer`'s card back: the previous input's model never stands beside it (see cleared_by)."""
    card = viewer.value["path"]
    source.change(lambda: shown(card), None, viewer, api_visibility="private", show_progress="hidden", queue=False)


def build_all_tab(ctx) -> None:
    def all_tasks(image, size: str = "0.4b", request: gr.Request = None, progress=gr.Progress()):
        """Every Sapiens2 task on one image at once: pose (lifted to 3D), body parts, normals, depth & 3D and
        matting, sharing one body-part segmentation.

        Args:
            image: the input picture of one or more people (JPEG, PNG, WebP; up to 50 megapixels)
            size: model size for every task that has it, one of 0.4b, 0.8b, 1b, 5b (matting is always 1b)

        Returns:
            a gallery of the renders (input first, captioned by task); one .zip of every task's downloads;
            notes (Markdown)
        """
        # the gallery grows as the tasks finish; the last update carries the zip only (last_answer merges them)
        for out in stream_request(ctx, "All tasks", image_jobs.stream_all, image, request, progress, size=size):
            yield (gr.skip() if out.files else out.gallery), (str(out.files[0]) if out.files else None), \
                answer_markdown(ctx, out.notes)

    with task_tab("All tasks", "all", scales=(1, 2)) as tab:
        with tab.inputs:
            chosen = tasks.specs(in_all=True)
            size = size_menu(ctx.manager, [spec.family for spec in chosen], max((s.sizes for s in chosen), key=len),
                             label="Model size (a task with one size always uses it)")
            btn = gr.Button("Run every task", variant="primary")
        with tab.results:
            gallery = gr.Gallery(label="All tasks", columns=3, height="auto", format="png", object_fit="contain",
                                 elem_id="all-output")  # contain: the depth tile keeps its colour bar
            files = gr.File(label="Download everything (.zip)", interactive=False, elem_id="all-files")
    outputs = [gallery, files, tab.info]
    cleared_by(tab.img, outputs)
    btn.click(all_tasks, [tab.img, size], outputs, api_name="all_tab", api_visibility="private", concurrency_id="all",
              validator=needs("an image"))
    gr.on([], last_answer(all_tasks), [tab.img, size], outputs, api_name="all", concurrency_id="all")  # API, MCP

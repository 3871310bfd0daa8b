"""The MCP tools (`--mcp`): one per image task and one for video, answering as an agent needs it, on gradio's MCP
server.

A tool answers with three content items: the render as MCP image content (at most 1024 px on its long side; for
video a frame from the middle), a JSON summary (people and keypoint counts, part shares, depth range, ...;
tasks/summary.py) with the notes, and the downloads as JSON {name: URL} the client can fetch. The tools are
endpoints of their own (`/mcp_<task>`, left out of the API page) on the tabs' inputs; the gradio_client endpoints
(`/pose`, ...) keep their answers and are not tools.

gradio 6.31's MCP server is adapted where it falls short for agents (`adapt`, installed when the server starts):
- an endpoint with several outputs reached it as one tuple and was answered as that tuple's Python repr (unless
  the client asked for progress): the outputs are handed on one by one;
- a list of files was answered as the repr of their dicts (server paths included): it becomes {name: URL};
- integers were typed as numbers, false and zero defaults were left out, a file input kept FileData's
  `required: [path]`: the schema says integer, gives every default and takes a file as one string;
- a local path was refused with "provide a url": the refusal says what to pass instead; and a URL of a file
  uploaded to this app (gradio's upload_file_to_gradio tool) was fetched over HTTP, which the SSRF guard refuses
  on localhost: it is read from gradio's upload folder (only there).

Each call writes into a folder of its own (`agent-<id>`): gradio's MCP transport is stateless (no session id), so
a call is a session; the folders are swept after SAPIENS2_OUTPUT_MAX_AGE_S like a browser's runs.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import re
import uuid
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from ..jobs import image as image_jobs
from ..media.image import ImageError, load_image
from .common import answer_notes, user_errors

RENDER_SIDE = 1024  # the image content's long side: enough to look at, small in an agent's context
ENDPOINT_PREFIX = "mcp_"
IMAGE_INPUT = ("the picture, one of: a data URL ('data:image/jpeg;base64,...'; PNG and WebP too), or an http(s) "
               "URL this server can fetch (a URL gradio's upload_file_to_gradio tool returned included). A path on "
               "your machine is refused: the server cannot read it; upload the file first with that tool (gradio's "
               "File Upload MCP server, `gradio upload-mcp <this app's URL> <folder>`) and pass the URL it returns. "
               "Up to 50 megapixels.")
RETURNS = ("the render as an image (at most 1024 px on its long side) and its URL; a JSON summary of the result "
           "(task, image size, counts, shares, ranges) with the notes; the downloads as JSON {file name: URL}")
TAG = re.compile(r"</?[A-Za-z][^>]*>")


def add_tool(ctx, spec, inputs: list, names: list[str], doc: str) -> None:
    """The MCP tool for `spec` on the tab's own input components (call inside the Blocks, after the tab)."""
    outputs = [gr.Image(type="filepath", format="jpeg", visible=False), gr.Textbox(visible=False),
               gr.File(file_count="multiple", visible=False)]
    gr.on([], tool_handler(ctx, spec, names, doc), inputs, outputs, api_name=ENDPOINT_PREFIX + spec.name,
          api_visibility="undocumented", concurrency_id=spec.family)


def tool_handler(ctx, spec, names: list[str], doc: str):
    images = {option.name for option in spec.options if option.kind == "image"}

    def tool(image, *args):
        *values, _request, progress = args
        chosen = dict(zip(names, values))
        with user_errors(spec.title):
            if image is None:
                raise ImageError("No image was given: pass `image` as a data URL or an http(s) URL.")
            for name in images:
                chosen[name] = load_image(chosen[name]).rgb if chosen.get(name) is not None else None
            loaded = load_image(image)
            run_dir = agent_folder(ctx)
            out = image_jobs.run_task(ctx, loaded, task=spec.name, run_dir=run_dir, progress=progress, **chosen)
            return answer(ctx, spec.name, out, run_dir)

    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    defaults = {"size": spec.default_size(), **spec.defaults()}
    tool.__signature__ = inspect.Signature(
        [inspect.Parameter("image", kind)]
        + [inspect.Parameter(name, kind, default=defaults[name]) for name in names]
        + [inspect.Parameter("request", kind, default=None, annotation=gr.Request),
           inspect.Parameter("progress", kind, default=gr.Progress())])
    tool.__annotations__ = {"request": gr.Request}
    tool.__name__ = spec.name  # the tool's name
    tool.__doc__ = doc
    return tool


def agent_session() -> str:
    """A session of its own for each call: gradio's MCP transport has no sessions."""
    return f"agent-{uuid.uuid4().hex[:12]}"


def agent_folder(ctx) -> Path:
    return ctx.outputs.new_run_dir(agent_session())


def answer(ctx, task: str, out, run_dir: Path) -> tuple[str, str, list[str]]:
    """A TaskOutput as the tools' three outputs: the render's file, the JSON summary with the notes, the files."""
    render = write_render(out.main, run_dir)
    summary = {"task": task, **out.summary, "notes": [TAG.sub("", note) for note in answer_notes(ctx, out.notes)]}
    return str(render), json.dumps(summary, ensure_ascii=False), [str(path) for path in out.files]


def add_features_tool(ctx, inputs: list, doc: str, family: str) -> None:
    """The `features` tool on the Features tab's inputs (`doc`: the tab endpoint's docstring)."""
    from ..jobs.features import load_second_image, run_features

    doc = re.sub(r"(\n\s+image: )[^\n]*", lambda m: m.group(1) + IMAGE_INPUT, doc, count=1)
    doc = re.sub(r"(\n\s+image2: )[^\n]*", lambda m: m.group(1) + "an optional second picture to compare with "
                 "the first, passed the same way", doc, count=1)
    doc = re.sub(r"(Returns:\n)(\s+)[^\n]*(\n\s+[^\n]*)*", lambda m: m.group(1) + m.group(2) + RETURNS
                 + " (the summary: embedding size, patch grid, and with a second image the cosine similarity of "
                 "the two CLS embeddings)", doc, count=1)

    def features(image, image2=None, size: str = "0.4b", use_mask: bool = True, request: gr.Request = None,
                 progress=gr.Progress()):
        with user_errors("Features"):
            if image is None:
                raise ImageError("No image was given: pass `image` as a data URL or an http(s) URL.")
            second = load_second_image(image2)
            loaded = load_image(image)
            run_dir = agent_folder(ctx)
            out = run_features(ctx, loaded, second, run_dir=run_dir, progress=progress, size=size,
                               use_mask=bool(use_mask))
            return answer(ctx, "features", out, run_dir)

    features.__doc__ = doc
    outputs = [gr.Image(type="filepath", format="jpeg", visible=False), gr.Textbox(visible=False),
               gr.File(file_count="multiple", visible=False)]
    gr.on([], features, inputs, outputs, api_name=ENDPOINT_PREFIX + "features", api_visibility="undocumented",
          concurrency_id=family)


VIDEO_INPUT = ("the video, one of: a data URL ('data:video/mp4;base64,...'; mov, webm, mkv, avi too), or an http(s) "
               "URL this server can fetch (a URL gradio's upload_file_to_gradio tool returned included). A path on "
               "your machine is refused: upload the file first with that tool and pass the URL it returns. The "
               "first 60 s are processed.")
VIDEO_RETURNS = ("a frame from the middle of the rendered video as an image (at most 1024 px on its long side) and "
                 "its URL; a JSON summary (task, frames, frame rate, duration, size) with the notes; the rendered "
                 "video and the downloads as JSON {file name: URL}")


def add_video_tool(ctx, inputs: list, doc: str, run_video) -> None:
    """The `video` tool on the Video tab's inputs (`doc`: the tab endpoint's docstring, reworded for agents), answered
    by the tab's own `run_video` (handed in: the tab imports this module, not the other way round)."""
    doc = re.sub(r"(\n\s+video: )[^\n]*", lambda m: m.group(1) + VIDEO_INPUT, doc, count=1)
    doc = re.sub(r"(Returns:\n\s+)[^\n]*", lambda m: m.group(1) + VIDEO_RETURNS, doc, count=1)

    signature = inspect.signature(run_video)
    signature = signature.replace(parameters=list(signature.parameters.values())[1:])  # without ctx

    def video(*args, **kwargs):
        from ..media.video import probe, read_frames

        arguments = signature.bind(*args, **kwargs)
        arguments.apply_defaults()
        chosen = {**arguments.arguments, "request": SimpleNamespace(session_hash=agent_session())}
        *_, (rendered, files, notes) = run_video(ctx, **chosen)  # the request only names the (own) folder
        info = probe(rendered)
        frame = next(frame for i, frame in enumerate(read_frames(rendered)) if i >= info.frame_count // 2)
        summary = {"task": chosen["task"], "frames": info.frame_count, "fps": round(info.fps, 3),
                   "seconds": round(info.duration, 3), "size": {"width": info.width, "height": info.height},
                   "notes": [line[2:] for line in notes.splitlines() if line.startswith("- ")]}
        return str(write_render(frame.rgb, Path(rendered).parent)), json.dumps(summary, ensure_ascii=False), files

    video.__signature__ = signature
    video.__annotations__ = {"request": gr.Request}
    video.__doc__ = doc
    outputs = [gr.Image(type="filepath", format="jpeg", visible=False), gr.Textbox(visible=False),
               gr.File(file_count="multiple", visible=False)]
    gr.on([], video, inputs, outputs, api_name=ENDPOINT_PREFIX + "video", api_visibility="undocumented",
          concurrency_id="video")


def write_render(picture, run_dir: Path) -> Path:
    """The render scaled to at most RENDER_SIDE on its long side: JPEG, or PNG where it has transparency."""
    from PIL import Image

    image = Image.fromarray(picture)
    image.thumbnail((RENDER_SIDE, RENDER_SIDE), Image.Resampling.LANCZOS)
    path = run_dir / ("render.png" if image.mode == "RGBA" else "render.jpg")
    image.save(path, quality=90)
    return path


# -- gradio's MCP server, adapted -------------------------------------------------------------------------------

def lifespan(demo):
    """A FastAPI lifespan (demo.launch(app_kwargs={"lifespan": ...})) that adapts gradio's MCP server as the app
    starts, before any request can reach it."""

    @contextlib.asynccontextmanager
    async def adapting(_app):
        if getattr(demo, "mcp_server_obj", None) is not None:
            adapt(demo.mcp_server_obj, demo)
        yield

    return adapting


def adapt(server, demo) -> None:
    """Serve our tools only, their schema exact, their outputs one by one, files as URLs (see the docstring)."""
    server.api_info = demo.get_api_info(all_endpoints=True)  # the tools' endpoints are not on the API page
    tools = {}
    for endpoint in server.api_info["named_endpoints"]:
        block_fn = server.get_block_fn_from_endpoint_name(endpoint)
        if endpoint.lstrip("/").startswith(ENDPOINT_PREFIX) and block_fn is not None:
            tools[server.tool_prefix + block_fn.fn.__name__] = endpoint
    server.tool_to_endpoint = tools
    server._execute_tool_without_progress = _outputs_one_by_one
    server.get_input_schema = _exact_schema(server, server.get_input_schema)
    server.convert_strings_to_filedata = _files_from_urls(server, server.convert_strings_to_filedata)
    server.postprocess_output_data = _files_as_urls(server.postprocess_output_data)


async def _outputs_one_by_one(job) -> list:
    """gradio_client answers a tuple for an endpoint of several outputs, the value itself for one output."""
    from anyio.to_thread import run_sync

    result = await run_sync(job.result)
    return list(result) if isinstance(result, tuple) else [result]


def _exact_schema(server, original):
    def get_input_schema(tool_name, parameters=None):
        schema, positions = original(tool_name, parameters)
        info = server.api_info["named_endpoints"][server.tool_to_endpoint[tool_name]]["parameters"]
        files = {position[0] for position in positions if len(position) == 1}
        for parameter in info:
            name = parameter["parameter_name"]
            spec = schema["properties"].get(name)
            if spec is None:
                continue
            if parameter.get("parameter_has_default"):
                spec["default"] = parameter["parameter_default"]
            default = spec.get("default")
            if name in files:  # one string (a URL), not FileData's object with its required path
                for key in ("required", "title", "format"):
                    spec.pop(key, None)
                spec["type"] = "string"
                spec["format"] = "uri"
            elif spec.get("enum") and all(type(value) is int for value in spec["enum"]):
                spec["type"] = "integer"
            elif spec.get("type") == "number" and type(default) is int:
                spec["type"] = "integer"
            spec.pop("title", None)
        return schema, positions

    return get_input_schema


def _files_from_urls(server, original):
    """gradio's conversion of file arguments, plus: a URL of a file uploaded to this app (what gradio's
    upload_file_to_gradio returns) is read from the upload folder, not fetched over HTTP, where gradio's SSRF guard
    would refuse it when the app runs on localhost; and a refusal that says what to pass instead."""

    def convert_strings_to_filedata(value, positions):
        if isinstance(value, dict):
            value = {key: _uploaded_path(server, item) if [key] in positions else item
                     for key, item in value.items()}
        try:
            return original(value, positions)
        except ValueError as error:
            shown = str(error).split("Received: ", 1)[-1][:80]
            raise ValueError(
                f"Cannot use {shown!r} as a file: this server cannot read paths on your machine. Pass a data URL "
                "('data:image/jpeg;base64,...') or an http(s) URL the server can fetch; for a local file, upload it "
                "first with gradio's upload_file_to_gradio tool (`gradio upload-mcp <this app's URL> <folder>`) and "
                "pass the URL it returns.") from None

    return convert_strings_to_filedata


def _uploaded_path(server, value):
    """`value`, or the file it names when it is this app's URL of a file in gradio's upload folder."""
    from urllib.parse import unquote

    from gradio import route_utils
    from gradio.utils import get_upload_folder, is_in_or_equal
    from gradio_client.utils import handle_file

    request = server.mcp_server.request_context.request
    if not isinstance(value, str) or request is None:
        return value
    own = route_utils.get_root_url(request, server.get_route_path(request), server.root_path) + "/gradio_api/file="
    if not value.startswith(own):
        return value
    path = Path(unquote(value[len(own):]))
    if not (path.is_file() and is_in_or_equal(path, get_upload_folder())):
        raise ValueError(f"{value[:120]!r} is not a file uploaded to this app.")
    return handle_file(str(path))


def _files_as_urls(original):
    def postprocess_output_data(data, root_url: str):
        from gradio import processing_utils
        from gradio_client import utils as client_utils

        data = processing_utils.add_root_url(data, root_url, None)
        shaped = []
        for output in data:
            if isinstance(output, list) and output and all(client_utils.is_file_obj_with_meta(f) for f in output):
                output = json.dumps({"files": {Path(f["path"]).name: f["url"] for f in output}})
            shaped.append(output)
        return original(shaped, root_url)

    return postprocess_output_data

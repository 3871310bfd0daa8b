"""`--mcp`: the task endpoints served as MCP tools, described for an agent, callable through an MCP client."""

import ast
import asyncio
import base64
import io
import json
import re
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import ASSETS, launch_app

pytest.importorskip("mcp", reason="the mcp package is not installed (pip install 'gradio[mcp]')")

TOOLS = {"pose": "pose", "body parts": "segment", "normals": "normals", "depth & 3D": "pointmap",
         "matting": "matting"}


@pytest.fixture(scope="module")
def mcp_app(tiny_dir):
    demo, url = launch_app(tiny_dir, tiny_dir / "yolov8n-random.pt", "--mcp")
    yield demo, url
    demo.close()


def test_mcp_flag_and_environment():
    import app

    assert app.parse_args([]).mcp is False
    assert app.parse_args(["--mcp"]).mcp is True
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("SAPIENS2_MCP", "1")
        assert app.parse_args([]).mcp is True and app.parse_args(["--no-mcp"]).mcp is False
        patch.delenv("SAPIENS2_MCP")
        patch.setenv("SPACE_ID", "someone/sapiens2")
        assert app.parse_args([]).mcp is True  # on by default on a Space


def test_schema_describes_a_tool_per_task(mcp_app):
    _, url = mcp_app
    with urllib.request.urlopen(url + "gradio_api/mcp/schema", timeout=30) as response:
        tools = {tool["name"]: tool for tool in json.load(response)}
    assert set(tools) == {*TOOLS.values(), "features", "video"}  # the gradio_client endpoints are not tools
    for task, name in TOOLS.items():
        tool = tools[name]
        assert len(tool["description"]) > 80, (name, tool["description"])
        properties = tool["inputSchema"]["properties"]
        image = properties["image"]
        assert image["type"] == "string" and "required" not in image and "title" not in image
        assert "data URL" in image["description"] and "upload_file_to_gradio" in image["description"]
        assert all(spec.get("description") for spec in properties.values()), (name, properties)
        for key, spec in properties.items():  # every parameter but the image has its default, false ones too
            assert key == "image" or "default" in spec, (name, key, spec)
    assert "metres" in tools["pointmap"]["description"] and "308 keypoints" in tools["pose"]["description"]
    assert "one of 'colour', 'transparent', 'image'" in tools["matting"]["inputSchema"]["properties"][
        "background"]["description"]
    pose, normals = tools["pose"]["inputSchema"]["properties"], tools["normals"]["inputSchema"]["properties"]
    assert pose["max_people"]["type"] == "integer" and pose["detection_threshold"]["type"] == "number"
    assert normals["png_bits"] == {**normals["png_bits"], "type": "integer", "enum": [8, 16], "default": 16}
    assert normals["raw_data"]["default"] is False and pose["boxes"]["default"] == ""


def texts(result) -> list[str]:
    return [item.text for item in result.content if item.type == "text"]


def call_tools(url: str, calls: list[tuple[str, dict]]) -> list:
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client

    async def call():
        async with streamable_http_client(url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return [await session.call_tool(name, arguments) for name, arguments in calls]

    return asyncio.run(call())


def answer_parts(result):
    """An answer's image content, its JSON summary and its {file name: URL}; nothing else in it."""
    [image] = [item for item in result.content if item.type == "image"]
    [image_url, summary, files] = texts(result)
    assert image_url.startswith("Image URL: http")
    return image, json.loads(summary), json.loads(files)["files"]


SERVER_PATH = re.compile(r"(^|[\s\"'(=])/[A-Za-z]")  # a path outside a URL


def test_each_tool_answers_with_an_image_a_summary_and_file_urls(mcp_app):
    from PIL import Image

    demo, url = mcp_app
    picture = "data:image/jpeg;base64," + base64.b64encode((ASSETS / "camera.jpg").read_bytes()).decode()
    results = call_tools(url, [(name, {"image": picture}) for name in TOOLS.values()])
    folders = set()
    for name, result in zip(TOOLS.values(), results):
        assert not result.isError, (name, texts(result))
        image, summary, files = answer_parts(result)
        shown = Image.open(io.BytesIO(base64.b64decode(image.data)))
        assert image.mimeType in ("image/jpeg", "image/png") and max(shown.size) <= 1024
        assert summary["task"] == name and summary["image_size"] == {"width": 512, "height": 512}
        assert files and all(link.startswith(url + "gradio_api/file=") for link in files.values())
        for text in texts(result):
            bare = re.sub(r"https?://\S+", "", text)
            assert not SERVER_PATH.search(bare) and "FileData" not in text and not re.search(r"<[A-Za-z/]", text)
        first = next(iter(files.values()))
        with urllib.request.urlopen(first, timeout=30) as response:  # the client can fetch what it is given
            assert response.status == 200 and response.read()
        folders.add(first.split("/sapiens2_outputs/")[1].split("/")[0])
    pose, parts, depth = (json.loads(texts(r)[1]) for r in (results[0], results[1], results[3]))
    assert pose["people"] >= 1 and pose["keypoints_per_person"] == 308
    assert parts["parts_percent"] and 0 < parts["person_percent"] <= 100
    assert 0 < depth["depth_m"]["p1"] <= depth["depth_m"]["median"] <= depth["depth_m"]["p99"]
    assert len(folders) == len(TOOLS)  # every call a folder of its own (the transport has no sessions)
    assert all(folder.startswith("agent-") for folder in folders)
    other = call_tools(url, [("segment", {"image": picture})])[0]  # a second client: a folder of its own
    _, _, files = answer_parts(other)
    assert next(iter(files.values())).split("/sapiens2_outputs/")[1].split("/")[0] not in folders


def test_bad_inputs_are_refused_with_the_reason(mcp_app):
    _, url = mcp_app
    bad, local, none = call_tools(url, [("normals", {"image": "data:image/jpeg;base64,aGVsbG8="}),
                                        ("pose", {"image": "/home/someone/photo.jpg"}),
                                        ("pose", {"image": url + "gradio_api/file=/etc/passwd"})])
    assert bad.isError and "not a supported image" in " ".join(texts(bad)) and "Traceback" not in " ".join(texts(bad))
    assert local.isError and "cannot read paths on your machine" in " ".join(texts(local))
    assert "upload_file_to_gradio" in " ".join(texts(local))
    assert none.isError and "not a file uploaded to this app" in " ".join(texts(none))


def test_a_local_photo_through_gradios_upload_server(mcp_app, tmp_path):
    """The README's agent set-up: gradio's File Upload MCP server (`gradio upload-mcp URL DIR`, stdio) beside ours;
    the URL it returns for a local photo is a tool's image."""
    import shutil
    import sys

    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    _, url = mcp_app
    shutil.copy(ASSETS / "camera.jpg", tmp_path / "me.jpg")
    gradio = str(Path(sys.executable).with_name("gradio"))

    async def upload():
        server = StdioServerParameters(command=gradio, args=["upload-mcp", url, str(tmp_path)])
        async with stdio_client(server) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await session.call_tool("upload_file_to_gradio", {"file": str(tmp_path / "me.jpg")})

    uploaded = asyncio.run(upload())
    [link] = texts(uploaded)
    assert link.startswith(url + "gradio_api/file=")
    [result] = call_tools(url, [("matting", {"image": link, "background": "transparent"})])
    assert not result.isError, texts(result)
    image, summary, files = answer_parts(result)
    assert image.mimeType == "image/png" and "matting_rgba.png" in files


def test_the_readmes_python_client_runs_as_written(mcp_app, capsys):
    """The README's client block, as written but for the server's address and the photo's name."""
    _, url = mcp_app
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    section = readme[readme.index("From Python, with the `mcp` package"):]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    assert "streamable_http_client" in code and "streamablehttp_client" not in code
    code = code.replace("http://127.0.0.1:7860/", url).replace('"person.jpg"', repr(str(ASSETS / "camera.jpg")))
    exec(compile(code, "README.md", "exec"), {"__name__": "readme"})
    tools, answer = capsys.readouterr().out.strip().splitlines()
    assert set(TOOLS.values()) <= set(ast.literal_eval(tools))
    mime, people, files = answer.split(" ", 2)
    assert mime == "image/jpeg" and 1 <= int(people) <= 5 and "pose_sapiens2.json" in files


def test_the_video_tool_takes_a_data_url(mcp_app, tmp_path):
    """The video is a file input (one URL string) and answers like the image tools: a frame, a summary, the files."""
    from tests.videos import make_video

    _, url = mcp_app
    with urllib.request.urlopen(url + "gradio_api/mcp/schema", timeout=30) as response:
        [tool] = [tool for tool in json.load(response) if tool["name"] == "video"]
    assert tool["inputSchema"]["properties"]["video"]["type"] == "string"
    assert "required" not in tool["inputSchema"]["properties"]["video"]
    assert tool["inputSchema"]["properties"]["stride"]["type"] == "integer"
    clip = make_video(tmp_path / "clip.mp4", frames=6, size=(96, 64), fps=6, audio=False)
    data = "data:video/mp4;base64," + base64.b64encode(Path(clip).read_bytes()).decode()
    [result] = call_tools(url, [("video", {"video": data, "task": "segment"})])
    assert not result.isError, texts(result)
    image, summary, files = answer_parts(result)
    assert image.mimeType == "image/jpeg" and summary["task"] == "segment" and summary["frames"] == 6
    assert any(name.endswith(".mp4") for name in files) and "FileData" not in " ".join(texts(result))


def test_the_features_tool_compares_two_pictures(mcp_app):
    _, url = mcp_app
    first, second = ("data:image/jpeg;base64," + base64.b64encode((ASSETS / name).read_bytes()).decode()
                     for name in ("camera.jpg", "astronaut.jpg"))
    [result] = call_tools(url, [("features", {"image": first, "image2": second, "use_mask": False})])
    assert not result.isError, texts(result)
    image, summary, files = answer_parts(result)
    assert summary["task"] == "features" and summary["embedding_size"] > 0 and len(summary["patch_grid"]) == 2
    assert -1 <= summary["cls_cosine_similarity"] <= 1
    assert any(name.startswith("features2") for name in files)

"""`--mcp`: the task endpoints served as MCP tools, described for an agent, callable through an MCP client."""

import asyncio
import base64
import json
import urllib.request

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
    for task, name in TOOLS.items():
        assert name in tools, (task, sorted(tools))
        tool = tools[name]
        assert len(tool["description"]) > 80, (name, tool["description"])
        properties = tool["inputSchema"]["properties"]
        assert "image" in properties
        assert all(spec.get("description") for spec in properties.values()), (name, properties)
    assert "metres" in tools["pointmap"]["description"] and "308 keypoints" in tools["pose"]["description"]
    assert "one of 'colour', 'transparent', 'image'" in tools["matting"]["inputSchema"]["properties"][
        "background"]["description"]


def test_a_tool_call_through_an_mcp_client_returns_files(mcp_app):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamablehttp_client

    _, url = mcp_app
    picture = "data:image/jpeg;base64," + base64.b64encode((ASSETS / "camera.jpg").read_bytes()).decode()

    async def call():
        async with streamablehttp_client(url + "gradio_api/mcp/") as (read, write, _):
            async with ClientSession(read, write) as session:
                await session.initialize()
                listed = {tool.name for tool in (await session.list_tools()).tools}
                good = await session.call_tool("normals", {"image": picture, "remove_background": False,
                                                            "raw_data": True})
                bad = await session.call_tool("normals", {"image": "data:image/jpeg;base64,aGVsbG8="})
                return listed, good, bad

    listed, good, bad = asyncio.run(call())
    assert set(TOOLS.values()) <= listed
    assert not good.isError, good.content
    text = " ".join(getattr(item, "text", "") for item in good.content)
    assert "normals.npy" in text and "normals16.png" in text and "gradio_api/file=" in text
    assert bad.isError
    message = " ".join(getattr(item, "text", "") for item in bad.content)
    assert "not a supported image" in message and "Traceback" not in message

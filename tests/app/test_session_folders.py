"""Each visitor's downloads in that visitor's own folder: every tab's files are written under the output root's
<session>/<run id>/, removed when the session ends (the browser tab closes: gradio's heartbeat stops and the app's
unload handler deletes the folder), and another session cannot list them by guessing the folder. A bare API call
gets a session folder of its own too, swept by age like the rest (`anonymous/` is only for a handler called with
no request at all, from Python).

The Features tab's files once went to `anonymous/` for everyone: its handler's `request: gr.Request` hint named
gradio imported inside the building function, so gradio could not resolve it and passed no request."""

import inspect
import json
import time
from pathlib import Path

import httpx
import pytest
from gradio_client import Client, handle_file

from tests.conftest import ASSETS
from tests.videos import make_video

PHOTO = str(ASSETS / "camera.jpg")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return make_video(tmp_path_factory.mktemp("clips") / "clip.mp4", frames=4, size=(96, 64), fps=4, audio=False)


# each tab's named endpoint, called as the tab calls it (the video tab's with its task)
CALLS = {
    "/pose": lambda client, clip: client.predict(handle_file(PHOTO), flip_test=False, api_name="/pose"),
    "/segment": lambda client, clip: client.predict(handle_file(PHOTO), api_name="/segment"),
    "/normals": lambda client, clip: client.predict(handle_file(PHOTO), api_name="/normals"),
    "/pointmap": lambda client, clip: client.predict(handle_file(PHOTO), api_name="/pointmap"),
    "/matting": lambda client, clip: client.predict(handle_file(PHOTO), api_name="/matting"),
    "/all": lambda client, clip: client.predict(handle_file(PHOTO), api_name="/all"),
    "/features": lambda client, clip: client.predict(handle_file(PHOTO), api_name="/features"),
    "/video": lambda client, clip: client.predict(handle_file(str(clip)), "pointmap", api_name="/video"),
}


def downloads(answer) -> list[dict]:
    """Every file of an answer (gradio_client with download_files=False: FileData dicts with the server's path)."""
    if isinstance(answer, dict):
        return [answer] if "path" in answer and "url" in answer else [f for v in answer.values() for f in downloads(v)]
    if isinstance(answer, (list, tuple)):
        return [f for value in answer for f in downloads(value)]
    return []


def wait_until(condition, timeout_s: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


@pytest.fixture()
def quick_heartbeat(monkeypatch):
    """A closed client's heartbeat stream ends within half a second (gradio's default beat is 15 s)."""
    monkeypatch.setenv("GRADIO_HEARTBEAT_INTERVAL", "0.5")


@pytest.mark.parametrize("endpoint", list(CALLS))
def test_a_tabs_downloads_are_the_sessions_own_and_go_with_it(app_server, clip, endpoint, quick_heartbeat):
    demo, url = app_server
    root = demo.sapiens2_context.outputs.root
    visitor = Client(url, verbose=False, download_files=False)
    files = [f for f in downloads(CALLS[endpoint](visitor, clip)) if Path(f["path"]).is_relative_to(root)]
    assert files, f"{endpoint} answered no download from the output folder"
    own = root / visitor.session_hash
    for file in files:  # <root>/<this session>/<run id>/<file> (the pictures shown: <run id>/shown/<file>)
        session, run, *_ = Path(file["path"]).relative_to(root).parts
        assert session == visitor.session_hash and len(run) >= 12, file["path"]  # a run id is not a name to guess

    other = httpx.Client(base_url=url)  # another visitor, guessing folders: no listing of any
    for folder in (own, own / run, root / "anonymous", root):
        for guess in (str(folder), f"{folder}/"):
            assert other.get(f"gradio_api/file={guess}").status_code in (403, 404), guess

    visitor.close()  # the tab closes: its heartbeat stops, the unload handler deletes the session's folder
    assert wait_until(lambda: not own.exists()), f"{own} outlived its session"
    assert other.get(files[0]["url"].removeprefix(url)).status_code in (403, 404)


def test_a_bare_api_call_gets_a_folder_of_its_own_swept_on_schedule(app_server):
    """A bare API call (/gradio_api/call/, no page and no heartbeat, so no unload ever comes): gradio still names
    it a session of its own, so its files are not in the shared `anonymous/` (that is only for a handler called
    with no request at all, from Python), and the age sweep every folder gets removes them."""
    demo, url = app_server
    store = demo.sapiens2_context.outputs
    http = httpx.Client(base_url=url, timeout=120)
    with open(PHOTO, "rb") as photo:
        [uploaded] = http.post("gradio_api/upload", files={"files": ("camera.jpg", photo, "image/jpeg")}).json()
    event = http.post("gradio_api/call/features", json={"data": [
        {"path": uploaded, "meta": {"_type": "gradio.FileData"}}, None, "0.4b", True]}).json()["event_id"]
    stream = http.get(f"gradio_api/call/features/{event}").text
    answer = json.loads(stream.split("event: complete\ndata: ", 1)[1].splitlines()[0])
    paths = [Path(f["path"]) for f in downloads(answer) if Path(f["path"]).is_relative_to(store.root)]
    sessions = {p.relative_to(store.root).parts[0] for p in paths}
    assert paths and len(sessions) == 1 and "anonymous" not in sessions, paths
    store.sweep(now=time.time() + store.max_age_s + 1)
    assert not any(p.exists() for p in paths)


def test_every_handler_that_takes_the_request_is_given_it(app_server):
    """gradio passes the request only to a parameter whose type hint it can resolve to gr.Request (in the
    handler's module globals): a hint it cannot read is silently dropped, and the handler gets None."""
    import gradio as gr
    from gradio import utils

    demo, _ = app_server
    handlers = [fn.fn for fn in demo.fns.values() if fn.fn is not None]
    takes = [h for h in handlers if "request" in inspect.signature(h).parameters]
    assert len(takes) >= 9  # every tab's
    unresolved = [f"{h.__module__}.{h.__qualname__}" for h in takes
                  if utils.get_type_hints(h).get("request") not in (gr.Request, gr.Request | None)]
    assert not unresolved, unresolved

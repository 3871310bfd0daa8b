"""Errors are written for the visitor (what to do, named by task; no exception names, flags or server paths) and
the operator's detail goes to the server log; the size menus mark what this server cannot load."""

import logging

import pytest

from tests.conftest import ASSETS

OPERATOR_WORDS = ("--checkpoint-dir", "SAPIENS2_", "<DIR>", "OSError", "Error:", "Traceback", "/tmp/")


def assert_for_visitors(message: str) -> None:
    for word in OPERATOR_WORDS:
        assert word not in message, (word, message)


def test_a_size_this_server_lacks(client, caplog):
    from gradio_client import handle_file

    caplog.set_level(logging.INFO, logger="sapiens2_demo")
    with pytest.raises(Exception) as info:
        client.predict(handle_file(str(ASSETS / "camera.jpg")), size="0.8b", api_name="/segment")
    message = str(info.value)
    assert "Body parts: This server does not have the 0.8b Body parts model (facebook/sapiens2-seg-0.8b); " \
           "choose another size." in message
    assert_for_visitors(message)
    logged = "\n".join(record.getMessage() for record in caplog.records)
    assert "Could not load facebook/sapiens2-seg-0.8b" in logged and "--checkpoint-dir" in logged
    assert "sapiens2-seg-0.8b" in logged and "looked for" in logged  # the folder the operator should fill


def test_an_unexpected_failure_is_logged_with_its_traceback(client, caplog, monkeypatch):
    from gradio_client import handle_file

    from sapiens2_demo.tasks import TaskSpec

    def broken(*args, **kwargs):
        raise KeyError("colour_table")

    monkeypatch.setattr(TaskSpec, "check", broken)  # a bug in the request's first step (the app runs here)
    caplog.set_level(logging.INFO, logger="sapiens2_demo")
    with pytest.raises(Exception) as info:
        client.predict(handle_file(str(ASSETS / "camera.jpg")), remove_background=False, api_name="/normals")
    message = str(info.value)
    assert "Normals: Something went wrong on the server; it has been logged." in message, message
    assert "KeyError" not in message and "colour_table" not in message
    assert_for_visitors(message)
    failures = [record for record in caplog.records if record.getMessage() == "Normals failed"]
    assert failures and failures[0].exc_info and failures[0].exc_info[0] is KeyError


def test_a_bad_upload_says_why_and_names_the_task(client, tmp_path):
    from gradio_client import handle_file

    bogus = tmp_path / "photo.jpg"
    bogus.write_text("this is not an image")
    with pytest.raises(Exception) as info:
        client.predict(handle_file(str(bogus)), api_name="/pose")
    message = str(info.value)
    assert "Pose: This file is not a supported image" in message
    assert_for_visitors(message)


@pytest.mark.parametrize("detail,expected", [
    ("Could not load facebook/sapiens2-matting-1b at revision main (looked for /data/x/sapiens2-matting-1b): "
     "OSError: nope. To use a local copy ... --checkpoint-dir <DIR>",
     "This server does not have the Matting model (facebook/sapiens2-matting-1b); the other tabs keep working."),
    ("Could not load facebook/sapiens2-pose-5b at revision main: OSError: offline. ... --checkpoint-dir <DIR>",
     "This server does not have the 5b Pose model (facebook/sapiens2-pose-5b); choose another size."),
    ("Could not load the person detector 'yolo26n.pt': FileNotFoundError: offline. Pass --detector PATH",
     "The person detector is not available on this server. Enter person boxes under Options to skip it; the "
     "other tabs keep working."),
])
def test_checkpoint_messages_for_visitors(detail, expected):
    from sapiens2_demo.models.manager import CheckpointUnavailable
    from sapiens2_demo.ui.common import visitor_message

    assert visitor_message(CheckpointUnavailable(detail)) == expected
    assert_for_visitors(expected)


def test_size_menus_mark_what_this_server_cannot_load(tiny_dir, monkeypatch):
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.ui.sizes import size_menu, unavailable_reason

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    manager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32",
                           memory_budget_bytes=8 * 2**30)
    assert unavailable_reason(manager, "seg", "0.4b") is None  # on disk
    assert unavailable_reason(manager, "seg", "0.8b") == "not on this server"  # offline, not on disk or cached
    assert unavailable_reason(manager, "seg", "5b") == "too large for this server's memory"  # 20 GB in float32
    menu = size_menu(manager, ["pose", "seg"], ("0.4b", "0.8b", "1b", "5b"))
    assert menu.choices == [("0.4b", "0.4b"), ("0.8b (not on this server)", "0.8b"),
                            ("1b (not on this server)", "1b"), ("5b (too large for this server's memory)", "5b")]
    assert menu.value == "0.4b"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # online: the hub has every size
    assert unavailable_reason(manager, "seg", "0.8b") is None


@pytest.mark.parametrize("content,name,expected", [
    (b"this is not a video\n" * 10, "clip.mp4", "could not be read as a video"),
    (b"", "clip.mp4", "The video file is empty"),
    ((ASSETS / "camera.jpg").read_bytes(), "clip.mp4", "This file is an image, not a video"),
    ((ASSETS / "astronaut_pan.mp4").read_bytes(), "big.mp4", "more than the"),  # over a 0.1 MB limit
], ids=["text", "empty", "image", "too-big"])
def test_a_bad_video_is_refused_on_upload_with_the_reason(tmp_path, content, name, expected):
    """The Video input's upload step clears a file it cannot use and warns why (the run would fail the same way)."""
    from sapiens2_demo.jobs.video import VideoLimits
    from sapiens2_demo.ui.video_tab import check_video_upload

    path = tmp_path / name
    path.write_bytes(content)
    with pytest.warns(UserWarning) as warned:  # gr.Warning outside a request; a toast in the app
        assert check_video_upload(str(path), VideoLimits(max_bytes=100_000)) is None
    message = str(warned[0].message)
    assert expected in message
    assert_for_visitors(message)


def test_a_good_video_upload_is_left_as_it_is():
    import gradio as gr

    from sapiens2_demo.ui.video_tab import check_video_upload

    assert check_video_upload(str(ASSETS / "astronaut_pan.mp4")) == gr.skip()
    assert check_video_upload(None) == gr.skip()


def test_a_video_the_browser_may_not_preview_is_kept_with_a_note(tmp_path, monkeypatch):
    """MPEG-4 Part 2: the server reads it, a browser's video box may not (gradio would show a red "Video not
    playable"; the page hides that): kept, with a note that it will be processed all the same."""
    import gradio as gr

    from sapiens2_demo.ui import video_tab
    from tests.videos import make_video

    said = []
    monkeypatch.setattr(video_tab.gr, "Info", lambda message, **kwargs: said.append((message, kwargs)))
    clip = make_video(tmp_path / "old.mp4", frames=4, size=(64, 48), codec="mpeg4", audio=False)
    assert video_tab.check_video_upload(str(clip)) == gr.skip()
    [(message, kwargs)] = said
    assert "mpeg4" in message and "can be processed" in message and kwargs["title"] == "Preview may not play"
    said.clear()
    assert video_tab.check_video_upload(str(ASSETS / "astronaut_pan.mp4")) == gr.skip() and said == []  # H.264


def test_a_run_without_its_input_says_what_to_do():
    """The Run buttons' validator: no input, no run, and the input box says what to do (one check per input)."""
    from sapiens2_demo.ui.common import needs

    missing, size = needs("an image")(None, "0.4b")
    assert missing["is_valid"] is False and size["is_valid"] is True
    assert missing["message"] == "Upload an image first: drop a file here, or pick an example at the bottom of this tab."
    assert all(check["is_valid"] for check in needs("an image")("photo.jpg", "0.4b"))
    assert needs("a video", "pick an example clip under Task")(None)["message"] == (  # one input: the check itself
        "Upload a video first: drop a file here, or pick an example clip under Task.")

"""The Live tab's handler, called directly on synthetic webcam frames with the tiny checkpoints."""

import re
import threading
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from sapiens2_demo import gpu
from sapiens2_demo.jobs.image import AppContext
from sapiens2_demo.render.depth import DepthBounds
from sapiens2_demo.ui import live_tab
from sapiens2_demo.ui.live_tab import live_frame

SKIP = {"__type__": "update"}  # what gr.skip() returns: leave the output as it is


@pytest.fixture()
def ctx(manager):
    ctx = AppContext(manager=manager)
    yield ctx
    live_tab.forget_sessions(ctx)


@pytest.fixture(scope="module")
def camera_frame(person_image) -> np.ndarray:
    """A 4:3 webcam frame bigger than the live limit: the astronaut on a grey gradient, 960x720."""
    frame = np.tile(np.linspace(40, 200, 960, dtype=np.uint8)[None, :, None], (720, 1, 3))
    person = cv2.resize(person_image, (540, 540))
    frame[90:630, 210:750] = person
    return frame


def stream(session_hash="s1"):
    """What gradio hands the handler for one stream: the same request object for every frame."""
    return SimpleNamespace(session_hash=session_hash)


def fps_of(text: str) -> float:
    return float(re.search(r"\*\*([\d.]+) fps\*\*", text).group(1))


def frames_of(text: str) -> int:
    return int(re.search(r"(\d+) shown", text).group(1))


def dropped_of(text: str) -> int:
    return int(re.search(r"(\d+) dropped", text).group(1))


@pytest.mark.parametrize("task", ["pose", "segment", "normals", "pointmap"])
def test_each_task_renders_a_downscaled_frame(ctx, camera_frame, task):
    shown, text = live_frame(ctx, camera_frame, task, "0.4b", remove_background=task == "normals",
                             colour_bar=False, request=stream())
    assert isinstance(shown, np.ndarray), text
    assert shown.shape == (480, 640, 3) and shown.dtype == np.uint8  # longest side 960 -> 640
    small = live_tab.downscale(camera_frame)
    assert np.abs(shown.astype(int) - small).mean() > 1.0  # something was drawn over the frame
    assert frames_of(text) == 1 and "camera 960×720 px" in text and "Cannot run" not in text


def test_fps_and_model_time_are_measured_over_recent_frames(ctx, camera_frame):
    request = stream()
    for _ in range(4):
        shown, text = live_frame(ctx, camera_frame, "segment", "0.4b", request=request)
    assert frames_of(text) == 4
    assert 0 < fps_of(text) < 1000
    model_ms = float(re.search(r"model (\d+) ms/frame", text).group(1))
    assert 0 <= model_ms < 5000
    # a new task starts the counters afresh
    shown, text = live_frame(ctx, camera_frame, "pointmap", "0.4b", request=request)
    assert frames_of(text) == 1 and fps_of(text) == 0.0


def test_a_frame_arriving_while_busy_is_dropped_and_counted(ctx, camera_frame, monkeypatch):
    inside, release = threading.Event(), threading.Event()
    real_infer = gpu.infer

    def slow_infer(*args, **kwargs):
        inside.set()
        assert release.wait(30)
        return real_infer(*args, **kwargs)

    monkeypatch.setattr(gpu, "infer", slow_infer)
    first = {}
    worker = threading.Thread(target=lambda: first.update(out=live_frame(ctx, camera_frame, "segment", "0.4b",
                                                                         request=stream())))
    worker.start()
    assert inside.wait(30)
    shown, text = live_frame(ctx, camera_frame, "segment", "0.4b", request=stream())  # same session, busy
    assert shown == SKIP and dropped_of(text) == 1
    release.set()
    worker.join(30)
    shown, text = first["out"]
    assert isinstance(shown, np.ndarray) and frames_of(text) == 1 and dropped_of(text) == 1


def test_frames_gradio_replaced_while_busy_are_counted(ctx):
    session = live_tab.LiveSession(setup=("seg", "0.4b", False), renderer=None)
    request = stream()
    session.count_arrival(request, 10.0)
    session.count_arrival(request, 10.0 + 5 * live_tab.STREAM_EVERY_S)  # 0.5 s later: 4 frames never came
    assert session.replaced == 4 and session.dropped == 4
    session.count_arrival(stream(), 20.0)  # a new stream: counted from its own start
    session.count_arrival(None, 30.0)  # a single API call: nothing to estimate from
    assert session.replaced == 4


def test_errors_become_a_message_and_the_stream_goes_on(ctx, camera_frame):
    request = stream()
    shown, text = live_frame(ctx, camera_frame, "pose", "5b", request=request)  # no such tiny checkpoint
    assert shown == SKIP
    assert text.startswith("**Cannot run:**") and "sapiens2-pose-5b" in text and "Traceback" not in text
    shown, text = live_frame(ctx, camera_frame, "tracking", "0.4b", request=request)
    assert shown == SKIP and "unknown task 'tracking'" in text
    shown, text = live_frame(ctx, camera_frame, "pose", "0.4b", request=request)
    assert isinstance(shown, np.ndarray) and frames_of(text) == 1
    assert live_frame(ctx, None, "pose", "0.4b", request=request) == (SKIP, SKIP)


def test_downscale_keeps_aspect_and_small_frames():
    assert live_tab.downscale(np.zeros((1440, 1920, 3), np.uint8)).shape == (480, 640, 3)
    assert live_tab.downscale(np.zeros((300, 200), np.uint8)).shape == (300, 200, 3)
    assert live_tab.downscale(np.zeros((100, 100, 4), np.uint8)).shape == (100, 100, 3)


def test_depth_has_its_colour_bar_beside_the_frame(ctx, camera_frame):
    """The Live tab's default: the depth picture, then its colour scale in metres (render/depth.py's bar)."""
    from sapiens2_demo.render.depth import depth_colorbar

    plain, _ = live_frame(ctx, camera_frame, "pointmap", "0.4b", colour_bar=False, request=stream())
    barred, text = live_frame(ctx, camera_frame, "pointmap", "0.4b", request=stream())
    assert isinstance(barred, np.ndarray), text
    bar_width = depth_colorbar(DepthBounds(1.0, 2.0), 480).shape[1]  # the width depends on the height only
    assert barred.shape == (480, 640 + bar_width, 3)
    assert (barred[:, 640:] == 255).mean() > 0.5  # a white strip with the scale, not the picture stretched


@pytest.mark.parametrize("task,waits", [("pointmap", 1), ("segment", 1), ("normals", 1), ("pose", 2)])
def test_a_live_frame_on_the_gpu_road_waits_only_for_what_it_must(ctx, camera_frame, task, waits):
    """The transfer ledger (the CUDA road, counted on the CPU) over a live frame after the first (whose one-off
    uploads, the colour tables, it leaves out): the picture's one copy back; depth's colour scale found on the
    device crosses in it, and the scale the last frame left uploads without a wait. Pose: the person detector's
    boxes (its input up from pinned memory without a wait: detect_device.py), then the keypoints in one copy."""
    from sapiens2_demo import ledger

    with ledger.recording():
        live_frame(ctx, camera_frame, task, "0.4b", request=stream())
    with ledger.recording() as book:
        shown, text = live_frame(ctx, camera_frame[::-1].copy(), task, "0.4b", request=stream())
    assert isinstance(shown, np.ndarray), text
    assert book.waits == waits, book.table()

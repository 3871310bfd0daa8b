"""The Video tab's Rerun viewer in a real browser (Debian's Chromium, WebGL through SwiftShader): a pose run with 3D
motion and the recording ends with the viewer drawing the recording, and moving the time cursor changes the view.
The pose model is the tiny random one (its 2D keypoints are noise); the lift places the synthetic walker, so the
3D view shows a skeleton that moves.

Screenshots go to $SAPIENS2_SCREENSHOTS (default: tests' tmp dir).
"""

import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.pipelines.test_rerun_recording import walker_lift
from tests.system.conftest import CHROMIUM, distinct_colours
from tests.videos import make_video

pytest.importorskip("gradio_rerun")
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed "
                                "(make browser-deps installs it as root)")
WEBGL = ["--no-sandbox", "--use-gl=swiftshader", "--enable-unsafe-swiftshader", "--ignore-gpu-blocklist",
         "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update"]


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("SAPIENS2_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def walker_page(app_server):
    """A page on the app whose pose lift places the walker (undone after this module)."""
    from playwright.sync_api import sync_playwright

    with pytest.MonkeyPatch.context() as patch, sync_playwright() as pw:
        walker_lift(patch)
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=WEBGL)
        page = browser.new_page(viewport={"width": 1400, "height": 1100})
        page.set_default_timeout(60_000)  # the viewer's WebAssembly on SwiftShader is slow on a loaded machine
        page.goto(app_server[1], wait_until="domcontentloaded")
        page.get_by_role("tab", name="Video", exact=True).wait_for(timeout=60_000)
        yield page
        browser.close()


def viewer_picture(page) -> np.ndarray:
    canvas = page.locator("#video-rerun canvas").first
    return np.asarray(Image.open(io.BytesIO(canvas.screenshot())).convert("RGB"))


def test_the_viewer_draws_the_recording_and_follows_the_time_cursor(walker_page, tmp_path, shots):
    from tests.pipelines.test_video_mocap import FPS, FRAMES

    page = walker_page
    page.get_by_role("tab", name="Video", exact=True).click()
    clip = make_video(tmp_path / "walk.mp4", frames=FRAMES, size=(160, 120), fps=FPS, audio=False)
    page.locator("#video-input input[type=file]").set_input_files(str(clip))
    page.locator("#video-input video").wait_for(state="attached", timeout=30_000)
    page.locator("#tab-video").get_by_text("Pose options").click()
    page.locator("#video-motion-3d input[type=checkbox]").check()
    page.locator("#video-rerun-on input[type=checkbox]").check()
    page.locator("#tab-video").get_by_role("button", name="Process video").click()
    try:
        page.locator('#video-files td.filename[aria-label="recording.rrd"]').wait_for(timeout=180_000)
    except Exception:
        page.screenshot(path=str(shots / "rerun_run_failed.png"), full_page=True)
        raise
    canvas = page.locator("#video-rerun canvas").first
    canvas.wait_for(state="visible", timeout=60_000)
    page.wait_for_timeout(8000)  # the viewer's WebAssembly starts, then loads the file
    first = viewer_picture(page)
    Image.fromarray(first).save(shots / "rerun_viewer.png")
    assert distinct_colours(first) >= 50, "the viewer's canvas is blank"
    # the time panel's streams (0 s at their left, the clip's end at their right, where the viewer opens, playing),
    # 70 px above the canvas's bottom in this layout: paused, a press there puts the time cursor earlier
    box = canvas.bounding_box()
    canvas.click(position={"x": 18, "y": box["height"] - 145})  # the pause button
    page.wait_for_timeout(1000)
    page.mouse.move(box["x"] + box["width"] * 0.35, box["y"] + box["height"] - 70)
    page.mouse.down()
    page.wait_for_timeout(300)  # a frame of the viewer's own loop sees the press
    page.mouse.up()
    page.wait_for_timeout(2000)
    second = viewer_picture(page)
    Image.fromarray(second).save(shots / "rerun_viewer_earlier.png")
    views = slice(40, int(0.45 * first.shape[0]))  # the video and 3D views (below their titles), not the plots
    changed = np.abs(first[views].astype(int) - second[views].astype(int)).max(axis=2) > 24
    middle = first.shape[1] // 2
    assert changed[:, :middle].mean() > 0.002, "moving the time cursor did not change the video's frame"
    assert changed[:, middle:].mean() > 0.002, "moving the time cursor did not move the 3D skeleton"

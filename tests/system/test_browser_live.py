"""The Live tab in a real browser: Debian's Chromium with its synthetic camera streams to the app and gets
rendered frames back, with the frames per second shown.

Screenshot: $SAPIENS2_SCREENSHOTS/live.png (default: the test's tmp dir).
"""

import contextlib
import os
import re
import shutil
from pathlib import Path

import pytest

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed "
                                "(make browser-deps installs it as root)")
FAKE_CAMERA = ["--use-fake-device-for-media-stream", "--use-fake-ui-for-media-stream"]
STATS_FRAMES = "(document.querySelector('#live-stats')?.innerText || '').match(/(\\d+) shown/)"


def stats_text(page) -> str:
    return page.locator("#live-stats").inner_text()


@contextlib.contextmanager
def live_tab(url: str, width: int = 1600, task: str | None = None):
    """The Live tab in Chromium with its synthetic camera, the stream started (`task` chosen first), three frames
    shown; yields (page, panel)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            *FAKE_CAMERA])
        try:
            context = browser.new_context(permissions=["camera"], viewport={"width": width, "height": 1000})
            page = context.new_page()
            page.goto(url, wait_until="domcontentloaded")
            page.get_by_role("tab", name="Live", exact=True).click()
            panel = page.locator("#tab-live")
            if task:
                panel.get_by_label(task, exact=True).check()
            panel.get_by_role("button", name="Click to Access Webcam").click()
            panel.locator("button[aria-label='capture photo']").click()  # starts the stream
            page.wait_for_function(f"() => {{ const m = {STATS_FRAMES}; return m && +m[1] >= 3; }}", timeout=40_000)
            yield page, panel
        finally:
            browser.close()


def test_live_tab_streams_the_fake_camera(app_server, tmp_path):
    with live_tab(app_server[1]) as (page, panel):
        # rendered frames come back and the stats count them
        output = page.locator("#live-output img").first
        assert (output.get_attribute("src") or "").startswith("http")
        text = stats_text(page)
        assert float(re.search(r"([\d.]+) fps", text).group(1)) > 0, text
        assert "camera 640×480 px" in text, text  # the camera was asked for VGA instead of its 1920x1440
        assert page.locator(".toast-body.error").count() == 0
        shots = Path(os.environ.get("SAPIENS2_SCREENSHOTS") or tmp_path)
        shots.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(shots / "live.png"), full_page=True)

        capture = panel.locator("button[aria-label='capture photo']")
        assert capture.inner_text().strip() == "Stop webcam"  # gradio's own "Stop", named by the page
        capture.click()  # the same button stops the stream
        frames = int(re.search(r"(\d+) shown", stats_text(page)).group(1))
        page.wait_for_timeout(1500)
        after = int(re.search(r"(\d+) shown", stats_text(page)).group(1))
        assert after <= frames + 1  # stopped (one frame may have been in flight)


def test_live_depths_colour_bar_reads_whole_on_a_laptop(app_server):
    """At 1000 px the live picture's share, download and full-screen buttons sat over the colour bar's top label."""
    from sapiens2_demo.render.depth import DepthBounds, depth_colorbar
    from tests.system.conftest import OVER_THE_BAR

    with live_tab(app_server[1], width=1000, task="Depth") as (page, panel):
        panel.locator("button[aria-label='capture photo']").click()  # stopped: the last picture stays
        page.wait_for_timeout(1000)
        page.wait_for_function("() => document.querySelector('#live-output img')?.naturalWidth > 0", timeout=30_000)
        shown = page.locator("#live-output img").first
        shown.scroll_into_view_if_needed()
        page.mouse.move(0, 0)
        height = shown.evaluate("img => img.naturalHeight")
        bar = depth_colorbar(DepthBounds(1.0, 2.0), height).shape[1]  # its width depends on the height only
        assert page.evaluate(OVER_THE_BAR, ["#live-output img", bar]) == []

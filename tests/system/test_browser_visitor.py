"""What a first-time visitor met (issue 38), in a real browser (Debian's Chromium via Playwright): pictures of
extreme shape on All tasks and Pose, the Video tab's progress beside its button and options that change something,
a new picture's page without the previous results, and the words of the Features notes.

One page on the suite's shared app (tests/system/conftest.py); screenshots go to $SAPIENS2_SCREENSHOTS.
"""

import os
from pathlib import Path

import pytest
from PIL import Image

from tests.conftest import ASSETS
from tests.system.conftest import CHROMIUM, OVER_THE_BAR
from tests.system.test_browser_viewers import close_toasts

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed "
                                "(make browser-deps installs it as root)")

ERRORS = ".toast-body.error"


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("SAPIENS2_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def squeezed(folder: Path, width: int, height: int) -> str:
    path = folder / f"astronaut_{width}x{height}.jpg"
    Image.open(ASSETS / "astronaut.jpg").convert("RGB").resize((width, height)).save(path, quality=85)
    return str(path)


def upload(page, tab_id: str, path: str) -> None:
    panel = page.locator(f"#tab-{tab_id}")
    panel.locator("input[type=file]").first.set_input_files(path)
    panel.locator("[data-testid=image] img").first.wait_for(state="visible", timeout=30_000)


def test_all_tasks_draws_a_wide_picture(page, tmp_path, shots):
    """1920x300: every render in the gallery, no red toast (it was "All tasks: Number of samples, -60, must be
    non-negative." and nothing drawn)."""
    page.get_by_role("tab", name="All tasks", exact=True).click()
    upload(page, "all", squeezed(tmp_path, 1920, 300))
    page.locator("#tab-all").get_by_role("button", name="Run every task").click()
    page.wait_for_function(f"""() => document.querySelectorAll('#all-output .grid-wrap img').length >= 6
                           || document.querySelector('{ERRORS}')""", timeout=120_000)
    assert not page.locator(ERRORS).all_inner_texts()
    assert page.locator("#all-output .grid-wrap img").count() == 6
    page.screenshot(path=str(shots / "all_wide.png"), full_page=True)


def test_pose_shows_a_very_wide_result_at_a_usable_height(page, tmp_path, shots):
    """4000x60: the result's panel at least 200 px high with the picture below its label (it was a 12 px strip
    under its own label and toolbar)."""
    page.get_by_role("tab", name="Pose", exact=True).click()
    upload(page, "pose", squeezed(tmp_path, 4000, 60))
    page.locator("#tab-pose").get_by_role("button", name="Estimate pose").click()
    picture = page.locator("#pose-output img").first
    picture.wait_for(state="visible", timeout=120_000)
    page.wait_for_timeout(500)  # laid out
    panel, shown = page.locator("#pose-output").bounding_box(), picture.bounding_box()
    label = page.locator("#pose-output label").first.bounding_box()
    assert panel["height"] >= 200, panel
    assert shown["y"] >= label["y"] + label["height"], (shown, label)  # not drawn under the label
    assert not page.locator(ERRORS).all_inner_texts()
    page.locator("#tab-pose").screenshot(path=str(shots / "pose_wide.png"))


def test_a_new_picture_clears_the_previous_results(page):
    """A new picture empties the results of the one before, so a failed run on it (a size this server lacks)
    does not leave them beside it; a failed run on the same picture keeps its results (test_browser_viewers)."""
    page.get_by_role("tab", name="Normals", exact=True).click()
    panel = page.locator("#tab-normals")
    upload(page, "normals", str(ASSETS / "grace_hopper.jpg"))
    panel.get_by_role("button", name="Estimate normals").click()
    page.locator("#normals-files a").first.wait_for(state="visible", timeout=90_000)
    assert page.locator("#normals-notes").inner_text().strip()
    upload(page, "normals", str(ASSETS / "camera.jpg"))
    page.wait_for_function("""() => !document.querySelector('#normals-output img')
                           && !document.querySelector('#normals-files a')
                           && !document.querySelector('#normals-notes').innerText.trim()""", timeout=10_000)
    panel.get_by_label("Model size").click()
    page.get_by_role("option", name="0.8b (not on this server)").click()
    panel.get_by_role("button", name="Estimate normals").click()
    page.locator(ERRORS).first.wait_for(state="visible", timeout=30_000)
    assert page.locator("#normals-output img").count() == 0 and page.locator("#normals-files a").count() == 0
    close_toasts(page)  # as it was, for the later tests
    panel.get_by_label("Model size").click()
    page.get_by_role("option", name="0.4b", exact=True).click()


def test_features_notes_say_which_side_of_a_patch_is_which(page):
    """The astronaut (512x512) on a 12 x 16 patch grid: "42.7 px wide x 32.0 px tall" (it was "32.0x42.7",
    height first, where people read width x height)."""
    page.get_by_role("tab", name="Features", exact=True).click()
    upload(page, "features", str(ASSETS / "astronaut.jpg"))
    page.locator("#tab-features").get_by_role("button", name="Extract features").click()
    notes = page.locator("#features-notes")
    notes.get_by_text("Patch grid").wait_for(state="visible", timeout=90_000)
    assert "Patch grid 12 wide x 16 tall (one patch = 42.7 px wide x 32.0 px tall)" in notes.inner_text()


def test_video_offers_only_what_changes_something(page):
    """"Also export per-frame data" only for a task that writes per-frame data (it was offered for pose, where it
    changes nothing), and the 3D-motion viewer only with the pose options it shows the result of (it filled half
    the column during a depth run)."""
    page.get_by_role("tab", name="Video", exact=True).click()
    panel = page.locator("#tab-video")
    exports, viewer = panel.get_by_text("Also export per-frame data"), page.locator("#video-motion")
    for task, offered in (("Pose", False), ("Body parts", True), ("Depth", True), ("All tasks (grid)", True)):
        panel.get_by_label(task, exact=True).check()
        exports.wait_for(state="visible" if offered else "hidden", timeout=10_000)
        viewer.wait_for(state="hidden" if task in ("Body parts", "Depth") else "visible", timeout=10_000)
    panel.get_by_label("Pose", exact=True).check()
    viewer.wait_for(state="visible", timeout=10_000)


VISIBLE_PROGRESS = """() => {
    const box = document.querySelector('#video-progress');
    const tracker = box && box.querySelector('[data-testid="status-tracker"]');
    if (!tracker || tracker.classList.contains('hide')) return null;
    const r = box.getBoundingClientRect();
    return r.height >= 40 && r.top >= 0 && r.bottom <= window.innerHeight ? {top: r.top, bottom: r.bottom} : null;
}"""


def test_video_progress_shows_beside_the_button_that_started_it(page, tmp_path, shots):
    """With the pose options open, Process video sits below the result's panel, out of view: the progress shows in
    view just under the button (it showed only on the result's panel, and nothing visible moved)."""
    from tests.videos import make_video

    page.get_by_role("tab", name="Video", exact=True).click()
    panel = page.locator("#tab-video")
    panel.locator("#video-input input[type=file]").set_input_files(
        str(make_video(tmp_path / "walk.mp4", frames=48, size=(160, 120), fps=12, audio=False)))
    panel.locator("#video-input video").first.wait_for(state="attached", timeout=30_000)
    panel.get_by_label("Pose", exact=True).check()
    panel.get_by_text("Pose options").click()  # open: the button moves down the page
    button = panel.get_by_role("button", name="Process video")
    button.scroll_into_view_if_needed()
    button.click()
    seen = page.wait_for_function(VISIBLE_PROGRESS, timeout=30_000, polling="raf").json_value()
    below = button.bounding_box()
    assert 0 <= seen["top"] - (below["y"] + below["height"]) <= 80, (seen, below)  # right under the button
    page.screenshot(path=str(shots / "video_progress.png"))
    page.locator("#video-output video").first.wait_for(state="attached", timeout=120_000)
    page.wait_for_function("() => document.querySelector('#video-progress').getBoundingClientRect().height < 10",
                           timeout=30_000)  # flat again once the run is done
    assert not page.locator(ERRORS).filter(has_text="Video").all_inner_texts()


def test_the_depth_videos_colour_bar_reads_whole_and_the_file_says_depth(page, tmp_path, shots):
    """On a laptop's window (1000 px) the player's download button sat over the colour bar's top label ("1.73"
    half hidden); and the video was named strip_pointmap.mp4 beside the "Depth" choice."""
    from sapiens2_demo.render.depth import DepthBounds, depth_colorbar
    from tests.videos import make_video

    page.set_viewport_size({"width": 1000, "height": 800})
    try:
        page.get_by_role("tab", name="Video", exact=True).click()
        panel = page.locator("#tab-video")
        if not panel.locator("#video-input input[type=file]").count():  # an earlier test's clip is in the input
            panel.locator("#video-input").get_by_role("button", name="Clear").click()
        panel.locator("#video-input input[type=file]").set_input_files(
            str(make_video(tmp_path / "strip.mp4", frames=12, size=(320, 180), fps=12, audio=False)))
        panel.locator("#video-input video").first.wait_for(state="attached", timeout=30_000)
        panel.get_by_label("Depth", exact=True).check()
        panel.get_by_role("button", name="Process video").click()
        page.wait_for_function("() => document.querySelector('#video-output video')?.src?.includes('strip_')"
                               " && document.querySelector('#video-output video').videoWidth > 0", timeout=120_000)
        page.locator("#video-output video").first.scroll_into_view_if_needed()
        page.mouse.move(0, 0)  # the pointer off the player
        bar = depth_colorbar(DepthBounds(1.0, 2.0), 180).shape[1]  # its width depends on the height only
        page.locator("#video-output").screenshot(path=str(shots / "video_depth_bar.png"))
        assert page.evaluate(OVER_THE_BAR, ['#video-output video', bar]) == []
        names = [Path(a.get_attribute("href")).name for a in page.locator("#video-files a").all()]
        assert "strip_depth.mp4" in names and not any("pointmap" in name for name in names), names
    finally:
        page.set_viewport_size({"width": 1400, "height": 1000})

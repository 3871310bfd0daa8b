"""A real browser (Debian's Chromium via Playwright) visits every tab, uploads, runs, sees the output.

Screenshots go to $SAPIENS2_SCREENSHOTS (default: tests' tmp dir); `docs/screenshot.jpg` in the README was taken the same way.
"""

import os
from pathlib import Path

import pytest

from tests.conftest import ASSETS
from tests.system.conftest import CHROMIUM, wait_for_card, wait_for_drawing

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed "
                                "(make browser-deps installs it as root)")

TABS = [  # tab title, tab id, example image
    ("Pose", "pose", "astronaut.jpg"),
    ("Body parts", "segment", "grace_hopper.jpg"),
    ("Normals", "normals", "grace_hopper.jpg"),
    ("Depth & 3D", "pointmap", "astronaut.jpg"),
    ("Matting", "matting", "grace_hopper.jpg"),
    ("All tasks", "all", "astronaut.jpg"),
]


def screenshots(tmp_path_factory) -> Path:
    shots = Path(os.environ.get("SAPIENS2_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    shots.mkdir(parents=True, exist_ok=True)
    return shots


@pytest.mark.parametrize("title,tab_id,example", TABS, ids=[t[1] for t in TABS])
def test_tab_runs_in_a_browser(page, title, tab_id, example, tmp_path_factory):
    page.get_by_role("tab", name=title, exact=True).click()
    panel = page.locator(f"#tab-{tab_id}")
    panel.locator("input[type=file]").first.set_input_files(str(ASSETS / example))
    panel.locator("button.primary, button.lg.primary").first.click()
    # the rendered output image and at least one download link appear
    output = page.locator(f"#{tab_id}-output img").first
    output.wait_for(state="visible", timeout=180_000)
    link = page.locator(f"#{tab_id}-files a").first
    link.wait_for(state="visible", timeout=60_000)
    assert "gradio_api/file=" in (link.get_attribute("href") or "")
    assert page.locator(".toast-body.error").count() == 0
    if tab_id == "all":  # every render and its caption in view: the gallery does not scroll (gradio caps it)
        grid = page.locator("#all-output .grid-wrap").first
        assert grid.evaluate("g => g.scrollHeight - g.clientHeight") <= 1
    page.screenshot(path=str(screenshots(tmp_path_factory) / f"{tab_id}.png"), full_page=True)


def test_pose_lifted_to_3d_shows_the_skeleton_viewer(page, monkeypatch):
    """Tick "Lift to 3D": the follow-up event (hidden from the API) shows pose_3d.glb in the 3D skeleton viewer."""
    import functools

    import numpy as np

    from sapiens2_demo.pose import lift

    # the tiny random models' scores and depths fail the lift's reliability tests (the app runs in this process)
    monkeypatch.setattr(lift, "lift_keypoints", functools.partial(lift.lift_keypoints, min_score=-np.inf,
                                                                   max_spread=np.inf))
    page.get_by_role("tab", name="Pose", exact=True).click()
    card, card_href = wait_for_card(page, "pose-viewer")  # the earlier pose run was not lifted
    panel = page.locator("#tab-pose")
    panel.locator("input[type=file]").first.set_input_files(str(ASSETS / "astronaut.jpg"))
    panel.get_by_label("Lift to 3D (also runs the depth and body-part models)").check()
    panel.get_by_role("button", name="Estimate pose").click()
    page.locator('#pose-files a[href*="pose_3d.glb"]').first.wait_for(state="visible", timeout=120_000)
    wait_for_drawing(page, "pose-viewer", "pose_3d.glb", card_href, card)  # the skeleton, drawn
    assert page.locator(".toast-body.error").count() == 0


VIDEO_TASKS = [("Pose", "pose"), ("Body parts", "segment"), ("Normals", "normals"), ("Depth", "pointmap"),
               ("Matting", "matting"), ("All tasks (grid)", "all")]
RIGHT_STRIP_WHITE = """(v) => {
    const c = document.createElement('canvas'); c.width = v.videoWidth; c.height = v.videoHeight;
    const g = c.getContext('2d'); g.drawImage(v, 0, 0);
    const d = g.getImageData(v.videoWidth - 24, 0, 24, v.videoHeight).data;
    let white = 0;
    for (let i = 0; i < d.length; i += 4) if (d[i] > 230 && d[i + 1] > 230 && d[i + 2] > 230) white++;
    return white / (d.length / 4);
}"""
PLAY_AND_PROBE = """async (el) => {
    const v = el; v.muted = true;
    await v.play().catch(() => {});
    await new Promise(r => setTimeout(r, 1500));
    return {duration: v.duration, width: v.videoWidth, audioBytes: v.webkitAudioDecodedByteCount,
            videoBytes: v.webkitVideoDecodedByteCount, error: v.error ? v.error.code : null};
}"""


@pytest.fixture(scope="module")
def browser_clip(tmp_path_factory):
    from tests.videos import make_video

    return make_video(tmp_path_factory.mktemp("browser-video") / "dance.mp4", frames=12, size=(160, 120), fps=12)


@pytest.mark.parametrize("label,task", VIDEO_TASKS, ids=[t[1] for t in VIDEO_TASKS])
def test_video_tab_plays_the_result_with_its_audio(page, label, task, browser_clip, tmp_path_factory):
    """Upload a clip, run the task: the result plays in the browser with sound (the audio track decodes)."""
    page.get_by_role("tab", name="Video", exact=True).click()
    panel = page.locator("#tab-video")
    upload = panel.locator("#video-input input[type=file]")
    if upload.count():  # the first test uploads; the clip stays in the input for the next tasks
        upload.first.set_input_files(str(browser_clip))
    panel.get_by_label(label, exact=True).check()
    previous = page.locator("#video-output video").first.get_attribute("src") \
        if page.locator("#video-output video").count() else None
    panel.get_by_role("button", name="Process video").click()
    page.wait_for_function(
        "prev => { const v = document.querySelector('#video-output video'); return v && v.src && v.src !== prev; }",
        arg=previous, timeout=180_000)
    probe = page.locator("#video-output video").first.evaluate(PLAY_AND_PROBE)
    assert probe["error"] is None, probe
    assert probe["duration"] == pytest.approx(1.0, abs=0.15), probe
    assert probe["videoBytes"] > 0 and probe["audioBytes"] > 0, probe
    if task == "pointmap":  # the depth has its colour bar (on by default): a white strip with the scale, right
        from sapiens2_demo.render.depth import DepthBounds, depth_colorbar

        bar = depth_colorbar(DepthBounds(1.0, 2.0), 120).shape[1]  # its width depends on the height only
        assert probe["width"] == 160 + bar + bar % 2, probe
        assert page.locator("#video-output video").first.evaluate(RIGHT_STRIP_WHITE) > 0.6
        page.locator("#video-output").screenshot(path=str(screenshots(tmp_path_factory) / "video_depth.png"))
    else:  # the others as wide as the clip; the grid three half-size tiles
        assert probe["width"] == (240 if task == "all" else 160), probe
    assert page.locator("#video-files a").count() >= 1
    assert page.locator(".toast-body.error").count() == 0


def test_video_3d_motion_shows_motion_glb_in_the_viewer(page, browser_clip, monkeypatch, tmp_path_factory):
    """Tick "3D motion" (Pose options): the BVH and motion.glb are among the downloads and the follow-up event
    (hidden from the API) puts motion.glb in the tab's 3D viewer. The tiny random models place no skeleton, so a
    person box on every frame and a lift that places a synthetic walker stand in (the app runs in this process)."""
    import numpy as np

    from sapiens2_demo.pipelines import pose as pipeline
    from sapiens2_demo.pose import lift
    from sapiens2_demo.pose.lift import Pose3DResult
    from tests.unit.test_mocap_export import walking_keypoints

    box, score = np.array([[20, 10, 140, 115]], np.float32), np.array([0.9], np.float32)
    monkeypatch.setattr(pipeline, "find_people", lambda image, *a, **k: (box.copy(), score.copy(), []))
    walker, calls = walking_keypoints(12, 12).astype(np.float32), []

    def walk(pose, pointmap, mask=None, **_):
        calls.append(1)
        points = walker[(len(calls) - 1) % len(walker)][None].repeat(pose.num_people, 0)
        return Pose3DResult(points=points, scores=pose.keypoint_scores, available=np.isfinite(points).all(2))

    monkeypatch.setattr(lift, "lift_keypoints", walk)
    page.get_by_role("tab", name="Video", exact=True).click()
    card, card_href = wait_for_card(page, "video-motion")  # the earlier runs made no motion
    panel = page.locator("#tab-video")
    upload = panel.locator("#video-input input[type=file]")
    if upload.count():
        upload.first.set_input_files(str(browser_clip))
    panel.get_by_label("Pose", exact=True).check()
    panel.get_by_text("Pose options").click()
    page.locator("#video-motion-3d input[type=checkbox]").check()
    panel.get_by_role("button", name="Process video").click()
    page.locator('#video-files a[href*="motion.glb"]').first.wait_for(state="visible", timeout=180_000)
    assert page.locator('#video-files a[href*=".bvh"]').count() == 1
    wait_for_drawing(page, "video-motion", "motion.glb", card_href, card)  # the animated skeleton, drawn
    notes = page.locator("#video-notes").inner_text()
    assert "motion_<id>.bvh each and motion.glb (metres, Y up; positions in the camera's frame)." in notes, notes
    page.locator("#video-notes").screenshot(path=str(screenshots(tmp_path_factory) / "video_motion_notes.png"))
    page.locator("#video-motion-3d input[type=checkbox]").uncheck()  # the next test runs plain pose
    assert page.locator(".toast-body.error").count() == 0


def test_video_example_runs_in_a_browser(page):
    """A first-time visitor without a clip: click the pose example under the video input, process it, the result
    plays. Last in this file: the example replaces the clip the tests above share."""
    page.get_by_role("tab", name="Video", exact=True).click()
    panel = page.locator("#tab-video")
    previous = page.locator("#video-output video").first.get_attribute("src") \
        if page.locator("#video-output video").count() else None
    panel.locator("#video-examples").get_by_text("Astronaut, slow pan (pose)").click()
    page.locator("#video-input video").first.wait_for(state="attached", timeout=30_000)
    page.wait_for_function("() => document.querySelector('#video-input video')?.src?.includes('astronaut_pan')",
                           timeout=30_000)
    assert panel.get_by_label("Pose", exact=True).is_checked()
    panel.get_by_role("button", name="Process video").click()
    page.wait_for_function(
        "prev => { const v = document.querySelector('#video-output video'); return v && v.src && v.src !== prev; }",
        arg=previous, timeout=120_000)
    probe = page.locator("#video-output video").first.evaluate(PLAY_AND_PROBE)
    assert probe["error"] is None and probe["videoBytes"] > 0, probe
    assert probe["duration"] == pytest.approx(4.0, abs=0.2), probe  # the whole 4 s clip
    assert page.locator("#video-files a").count() >= 1
    assert page.locator(".toast-body.error").count() == 0


def test_images_of_extreme_aspect_keep_a_usable_size(page, tmp_path):
    """A 3000x40 upload is shown in a box at least 200 px high (it was an 8 px strip under its own buttons), a
    60x4000 one at most 75 % of the window high (it made the page 4000 px long)."""
    from PIL import Image

    page.get_by_role("tab", name="Features", exact=True).click()
    panel = page.locator("#tab-features")
    for name, size in (("wide.png", (3000, 40)), ("tall.png", (60, 4000))):
        Image.new("RGB", size, (200, 120, 40)).save(tmp_path / name)
        panel.locator("input[type=file]").first.set_input_files(str(tmp_path / name))
        frame = panel.locator(".image-frame img").first
        frame.wait_for(state="visible", timeout=30_000)
        page.wait_for_timeout(500)
        box = panel.locator(".upload-container").first.bounding_box()
        shown = frame.bounding_box()
        window = page.viewport_size["height"]
        assert 200 <= box["height"] and shown["height"] <= 0.75 * window + 1, (name, box, shown, window)

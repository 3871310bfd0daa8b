"""What a visitor sees, in a real browser (Debian's Chromium via Playwright, WebGL through SwiftShader): the 3D
viewers show a card that says what will appear before a run and draw their model after every run, download lists
are outputs only, controls show when they apply, and a failed run leaves the outputs as they were.

Screenshots go to $SAPIENS2_SCREENSHOTS (default: tests' tmp dir).
"""

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import ASSETS
from tests.system.conftest import CARD, CHROMIUM, drawn, wait_for_card, wait_for_drawing

pytestmark = pytest.mark.skipif(not Path(CHROMIUM).exists(), reason="Debian's chromium is not installed "
                                "(make browser-deps installs it as root)")


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    folder = Path(os.environ.get("SAPIENS2_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def visible_errors(page) -> list[str]:
    """The red toasts a visitor sees (the page hides gradio's own "Video not playable" ones: ui/app.py)."""
    return page.locator(".toast-body.error").filter(visible=True).all_inner_texts()


def close_toasts(page) -> None:
    close = page.locator('[data-testid="toast-close"]').filter(visible=True)
    for _ in range(20):
        if not close.count():
            return
        try:
            close.first.click(timeout=2000)
        except Exception:  # noqa: BLE001 - it went by itself
            pass
        page.wait_for_timeout(300)


def run_tab(page, tab_id: str, image: str, button: str) -> None:
    panel = page.locator(f"#tab-{tab_id}")
    panel.locator("input[type=file]").first.set_input_files(str(ASSETS / image))
    page.locator(f"#tab-{tab_id} [data-testid=image] img").first.wait_for(state="visible", timeout=30_000)
    panel.get_by_role("button", name=button).click()


def assert_downloads_are_outputs_only(page) -> None:
    boxes = page.locator('[id$="-files"]').filter(visible=True)
    assert boxes.count() >= 1
    for i in range(boxes.count()):
        box = boxes.nth(i)
        name = box.get_attribute("id")
        assert box.locator("input[type=file]").count() == 0, f"{name} offers an upload"
        assert "upload" not in box.inner_text().lower(), f"{name} offers an upload"
        clear = box.locator("button.label-clear-button")
        assert all(not clear.nth(j).is_visible() for j in range(clear.count())), f"{name} has remove buttons"


def test_no_downloads_box_offers_an_upload(page):
    """Before any run: no tab's downloads box takes a file."""
    for title in ("Pose", "Body parts", "Normals", "Depth & 3D", "Matting", "All tasks", "Video", "Features"):
        page.get_by_role("tab", name=title, exact=True).click()
        assert_downloads_are_outputs_only(page)


def test_a_run_without_an_image_says_what_to_do(page, shots):
    """Run with no image: no run and no red "Error" toast; the image box itself says what to do, and where the
    examples are: at the bottom of the tab, under both columns, off the first screen ("click an example below"
    sent a visitor looking under the image)."""
    page.get_by_role("tab", name="Matting", exact=True).click()
    panel = page.locator("#tab-matting")
    assert panel.locator("[data-testid=image] img").count() == 0  # nothing uploaded in this tab yet
    panel.get_by_role("button", name="Cut out the people").click()
    panel.get_by_text("Upload an image first: drop a file here, or pick an example at the bottom of this tab.").wait_for(
        state="visible", timeout=30_000)
    examples = panel.get_by_text("Examples", exact=True).first.bounding_box()
    columns = panel.locator(".row").first.bounding_box()
    assert examples["y"] >= columns["y"] + columns["height"] - 1, (examples, columns)  # under both columns
    page.wait_for_timeout(1000)  # a run would have failed by now
    assert page.locator(".toast-body.error").count() == 0
    page.screenshot(path=str(shots / "empty_run.png"))
    assert page.locator("#matting-files a").count() == 0


def assert_framed(picture: np.ndarray, viewer: str) -> None:
    """The model's drawing stays off the canvas's bottom, left and right edges (the top carries the label and the
    buttons, drawn over the canvas; the outer 2 px are the block's border): it is framed whole, not cut."""
    inside = picture[40:-2, 2:-2].astype(int)  # below the overlays, inside the border
    drawn_mask = np.abs(inside - inside[-2, 2]).max(axis=2) > 12
    rows, cols = np.nonzero(drawn_mask)
    height, width = drawn_mask.shape
    assert rows.size, f"{viewer}: nothing drawn"
    assert rows.max() < height - 4 and cols.min() > 3 and cols.max() < width - 4, (
        f"{viewer}: drawn to rows ..{rows.max()}, columns {cols.min()}..{cols.max()} of {height}x{width} (below "
        "the overlays, inside the border)")


def test_depth_viewer_draws_the_mesh_after_every_run(page, shots):
    page.get_by_role("tab", name="Depth & 3D", exact=True).click()
    card, card_href = wait_for_card(page, "pointmap-viewer")  # before a run: what will appear there
    page.screenshot(path=str(shots / "depth_3d_before.png"), full_page=True)
    run_tab(page, "pointmap", "astronaut.jpg", "Estimate depth & 3D")
    first, href = wait_for_drawing(page, "pointmap-viewer", "person_mesh.glb", card_href, card)
    page.screenshot(path=str(shots / "depth_3d_first.png"), full_page=True)
    run_tab(page, "pointmap", "grace_hopper.jpg", "Estimate depth & 3D")  # another image: another mesh
    second, _ = wait_for_drawing(page, "pointmap-viewer", "person_mesh.glb", href, first)
    page.screenshot(path=str(shots / "depth_3d_second.png"), full_page=True)
    Image.fromarray(second).save(shots / "depth_3d_viewer.png")
    assert drawn(first) and drawn(second)
    assert_framed(first, "pointmap-viewer") and assert_framed(second, "pointmap-viewer")
    assert_downloads_are_outputs_only(page)  # with files listed too
    assert page.locator(".toast-body.error").count() == 0


def on_a_wall(real_lift):
    """lift_keypoints on a stand-in pointmap, a flat wall 2 m away: the tiny random models' keypoint scores and
    noise depths fail the lift's reliability tests (or scatter the joints over 30 m), so the skeleton is the 2D
    drawing stood up in 3D (the app runs in this process)."""
    import dataclasses

    def lift(pose, pointmap, mask=None, **options):
        height, width = pointmap.points.shape[:2]
        ys, xs = np.mgrid[0:height, 0:width].astype(np.float32)
        wall = np.dstack([(xs - width / 2) / width, (ys - height / 2) / width, np.full_like(xs, 2.0)])
        return real_lift(pose, dataclasses.replace(pointmap, points=wall, mask=None), np.ones_like(xs, bool),
                         min_score=-np.inf)

    return lift


def test_pose_viewer_draws_the_skeleton_after_every_run(page, shots, monkeypatch):
    from sapiens2_demo.pose import lift

    monkeypatch.setattr(lift, "lift_keypoints", on_a_wall(lift.lift_keypoints))
    page.get_by_role("tab", name="Pose", exact=True).click()
    card, card_href = wait_for_card(page, "pose-viewer")
    page.screenshot(path=str(shots / "pose_before.png"), full_page=True)
    page.locator("#tab-pose").get_by_label("Lift to 3D (also runs the depth and body-part models)").check()
    run_tab(page, "pose", "astronaut.jpg", "Estimate pose")
    first, href = wait_for_drawing(page, "pose-viewer", "pose_3d.glb", card_href, card)
    Image.fromarray(first).save(shots / "pose-viewer-first.png")
    run_tab(page, "pose", "grace_hopper.jpg", "Estimate pose")
    second, _ = wait_for_drawing(page, "pose-viewer", "pose_3d.glb", href, first)
    page.screenshot(path=str(shots / "pose_3d.png"), full_page=True)
    assert drawn(first) and drawn(second)
    # without the lift there is no 3D skeleton: the card comes back (not the last run's skeleton)
    page.locator("#tab-pose").get_by_label("Lift to 3D (also runs the depth and body-part models)").uncheck()
    page.locator("#tab-pose").get_by_role("button", name="Estimate pose").click()
    again, _ = wait_for_drawing(page, "pose-viewer", CARD, href, second)
    assert drawn(again)
    assert not page.locator('#pose-viewer a[data-testid="model3d-download-link"]').first.is_visible()


def test_matting_shows_the_background_control_of_the_choice(page):
    page.get_by_role("tab", name="Matting", exact=True).click()
    panel = page.locator("#tab-matting")
    colour, picture = panel.get_by_label("Background colour"), panel.get_by_text("Background image", exact=True)
    assert colour.is_visible() and not picture.is_visible()
    panel.get_by_label("transparent", exact=True).check()
    colour.wait_for(state="hidden")
    assert not picture.is_visible()
    panel.get_by_label("image", exact=True).check()
    picture.wait_for(state="visible")
    assert not colour.is_visible()
    panel.get_by_label("colour", exact=True).check()
    colour.wait_for(state="visible")


def test_features_shows_the_second_results_only_with_a_second_image(page):
    page.get_by_role("tab", name="Features", exact=True).click()
    assert not page.locator("#features-output2").is_visible()
    assert not page.locator("#features-similarity").is_visible()
    page.locator("#tab-features input[type=file]").nth(1).set_input_files(str(ASSETS / "camera.jpg"))
    page.locator("#features-output2").wait_for(state="visible", timeout=30_000)
    page.locator("#features-similarity").wait_for(state="visible", timeout=30_000)


def test_bad_upload_is_refused_on_upload_and_a_failed_run_keeps_the_outputs(page, tmp_path):
    """A text file named .jpg: cleared at once with a warning that says why. Then a size this server lacks: the
    toast names the task and what to do, and the previous outputs stay, with no red badge over them."""
    page.get_by_role("tab", name="Normals", exact=True).click()
    panel = page.locator("#tab-normals")
    bogus = tmp_path / "photo.jpg"
    bogus.write_text("this is not an image\n" * 10)
    panel.locator("input[type=file]").first.set_input_files(str(bogus))
    warning = page.locator(".toast-body.warning")
    warning.wait_for(state="visible", timeout=30_000)
    assert "not a supported image" in warning.inner_text()
    assert panel.locator("[data-testid=image] img").count() == 0  # no broken picture left in the input

    run_tab(page, "normals", "grace_hopper.jpg", "Estimate normals")
    page.locator("#normals-files a").first.wait_for(state="visible", timeout=90_000)
    shown = page.locator("#normals-output img").first.get_attribute("src")
    panel.get_by_label("Model size").click()
    page.get_by_role("option", name="0.8b (not on this server)").click()
    panel.get_by_role("button", name="Estimate normals").click()
    error = page.locator(".toast-body.error")
    error.wait_for(state="visible", timeout=30_000)
    text = error.inner_text()
    # (normals removes the background with the body-part model, which is missing first)
    assert "Normals: This server does not have the 0.8b Body parts model" in text and "choose another size" in text
    assert "--" not in text and "Error:" not in text and "<DIR>" not in text
    assert page.locator("#normals-output img").first.get_attribute("src") == shown  # the outputs as they were
    assert page.locator("#normals-files a").count() >= 1
    assert page.locator('[data-testid="status-tracker"] .error').filter(visible=True).count() == 0


def test_video_options_are_the_chosen_tasks(page):
    """Pose options with pose, the depth's colour bar and background with depth, matting's with matting."""
    page.get_by_role("tab", name="Video", exact=True).click()
    panel = page.locator("#tab-video")
    dense = panel.get_by_text("Depth options", exact=True)  # the box named for the chosen task
    panel.get_by_label("Body parts", exact=True).check()
    panel.get_by_text("Pose options").wait_for(state="hidden")
    assert not panel.get_by_text("Normals, depth and matting options").is_visible()
    panel.get_by_label("Depth", exact=True).check()
    dense.wait_for(state="visible")
    dense.click()
    page.locator("#video-colour-bar").wait_for(state="visible")
    assert not panel.get_by_text("Matting background", exact=True).is_visible()
    assert not panel.get_by_text("Also export the raw normal maps", exact=False).is_visible()
    panel.get_by_label("Pose", exact=True).check()
    panel.get_by_text("Pose options").wait_for(state="visible")
    assert not dense.is_visible()


def test_a_bad_video_is_refused_on_upload(page, tmp_path, shots):
    """A text file named .mp4 in the Video tab: cleared at once with a warning that says why, before any run."""
    page.get_by_role("tab", name="Video", exact=True).click()
    close_toasts(page)  # the earlier tests'
    bogus = tmp_path / "clip.mp4"
    bogus.write_text("this is not a video\n" * 10)
    page.locator("#video-input input[type=file]").set_input_files(str(bogus))
    warning = page.locator(".toast-body.warning").filter(has_text="could not be read as a video")
    warning.wait_for(state="visible", timeout=30_000)
    page.locator("#video-input input[type=file]").wait_for(state="attached", timeout=30_000)  # the drop zone again
    assert page.locator("#video-input video").count() == 0
    page.wait_for_timeout(1000)  # gradio's own red "Video not playable" toast is hidden: the warning says it
    assert not visible_errors(page)
    page.screenshot(path=str(shots / "video_bad_upload.png"))


STOP_IS = """disabled => [...document.querySelectorAll('#tab-video button')]
    .some(b => b.textContent.trim() === 'Stop' && b.disabled === disabled)"""


def test_video_stop_is_on_only_while_a_video_runs(page, tmp_path, shots):
    """No clip: no run, the video box says what to do, Stop stays off. A refused run (a size this server lacks)
    turns Stop off again; Stop during a run cancels it and says so."""
    from tests.videos import make_video

    page.get_by_role("tab", name="Video", exact=True).click()
    panel = page.locator("#tab-video")
    stop, run = panel.get_by_role("button", name="Stop"), panel.get_by_role("button", name="Process video")
    close_toasts(page)  # the earlier tests'
    if not panel.locator("#video-input video").count():
        run.click()
        panel.get_by_text("Upload a video first").wait_for(state="visible", timeout=30_000)
        page.wait_for_timeout(1000)
        assert not stop.is_enabled() and not visible_errors(page)
        page.screenshot(path=str(shots / "video_empty_run.png"))
    clip = make_video(tmp_path / "long.mp4", frames=96, size=(160, 120), fps=12, audio=False)
    panel.locator("#video-input input[type=file]").set_input_files(str(clip))
    panel.locator("#video-input video").first.wait_for(state="attached", timeout=30_000)
    panel.get_by_label("Pose", exact=True).check()
    panel.get_by_label("Model size (a task with one size always uses it)").click()
    page.get_by_role("option", name="0.8b (not on this server)").click()
    run.click()
    page.locator(".toast-body.error").filter(has_text="Video: This server does not have").wait_for(
        state="visible", timeout=60_000)
    page.wait_for_function(STOP_IS, arg=True, timeout=30_000)  # off again after the refusal
    page.screenshot(path=str(shots / "video_refused.png"))
    close_toasts(page)
    panel.get_by_label("Model size (a task with one size always uses it)").click()
    page.get_by_role("option", name="0.4b", exact=True).click()
    run.click()
    page.wait_for_function(STOP_IS, arg=False, timeout=30_000)  # on while the video runs
    stop.click()
    panel.get_by_text("Stopped: the run was cancelled and its partial files removed.").wait_for(
        state="visible", timeout=30_000)
    assert not stop.is_enabled() and not visible_errors(page)
    page.screenshot(path=str(shots / "video_stopped.png"), full_page=True)
    # the job's reader and writer threads end (the app runs in this process; a thread still decoding or encoding
    # when the tests end would take the interpreter down with it)
    deadline = time.monotonic() + 60
    while any(t.name in ("video-decode", "video-encode") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "the cancelled video job is still running"
        page.wait_for_timeout(250)

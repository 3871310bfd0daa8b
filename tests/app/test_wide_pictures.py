"""Pictures of extreme shape through the API (issue 38): All tasks and Pose draw a wide strip (1920x300, 4000x60),
and a failure out of a library is logged at ERROR with its traceback while the visitor reads a plain message."""

import logging

import numpy as np
import pytest
from PIL import Image

from tests.app.test_visitor_errors import assert_for_visitors

WIDE = [(1920, 300), (4000, 60)]


def strip(tmp_path, width: int, height: int) -> str:
    """A person photo squeezed to `width` x `height` (the wide pictures a visitor tried)."""
    from tests.conftest import ASSETS

    path = tmp_path / f"wide_{width}x{height}.jpg"
    Image.open(ASSETS / "astronaut.jpg").convert("RGB").resize((width, height)).save(path, quality=85)
    return str(path)


@pytest.mark.parametrize("width,height", WIDE, ids=[f"{w}x{h}" for w, h in WIDE])
def test_all_tasks_draws_a_wide_picture(client, tmp_path, width, height):
    """Every task's render comes back (the depth tile's colour bar sized its labels from the width: "Number of
    samples, -60, must be non-negative.")."""
    from gradio_client import handle_file

    gallery, archive, notes = client.predict(handle_file(strip(tmp_path, width, height)), api_name="/all")
    assert len(gallery) == 6 and archive  # the input and five renders, and the downloads
    for tile in gallery:
        shape = np.asarray(Image.open(tile["image"])).shape
        assert shape[1] >= shape[0] > 0, (tile["caption"], shape)  # each as wide as it is, or wider (the bar)


@pytest.mark.parametrize("width,height", WIDE, ids=[f"{w}x{h}" for w, h in WIDE])
def test_pose_draws_a_wide_picture(client, tmp_path, width, height):
    from gradio_client import handle_file

    drawing, files, notes = client.predict(handle_file(strip(tmp_path, width, height)), flip_test=False,
                                           api_name="/pose")
    shape = np.asarray(Image.open(drawing)).shape
    assert shape[1] / shape[0] == pytest.approx(width / height, rel=0.05) and files


def test_a_library_failure_is_logged_as_an_error_with_its_traceback(client, tmp_path, caplog, monkeypatch):
    """A ValueError from inside a library is a defect of ours, not a refused request: ERROR with the traceback in
    the log (it was one INFO line), a plain message for the visitor (it was numpy's words)."""
    from gradio_client import handle_file

    from sapiens2_demo.render import depth

    def broken(*args, **kwargs):
        return np.linspace(0, 1, -60)  # numpy: "Number of samples, -60, must be non-negative."

    monkeypatch.setattr(depth, "attach_colorbar", broken)  # the app runs in this process
    caplog.set_level(logging.INFO, logger="sapiens2_demo")
    with pytest.raises(Exception) as info:
        client.predict(handle_file(strip(tmp_path, 320, 240)), api_name="/all")
    message = str(info.value)
    assert "All tasks: Something went wrong on the server; it has been logged." in message, message
    assert "Number of samples" not in message
    assert_for_visitors(message)
    failures = [record for record in caplog.records if record.getMessage() == "All tasks failed"]
    assert failures and failures[0].levelno == logging.ERROR and failures[0].exc_info[0] is ValueError


def test_a_wide_pictures_3d_notes_agree(client, tmp_path, monkeypatch):
    """4000x60 lifted to 3D placed two face points, and the notes said "2 of 308 keypoints placed", then "No body
    keypoint could be placed in 3D": the second note now says why those two make no skeleton."""
    from gradio_client import handle_file

    from sapiens2_demo.pose import lift
    from sapiens2_demo.pose.meta import FACE_START, NUM_KEYPOINTS

    face = [FACE_START, FACE_START + 1]  # two face points: pose_3d.json has them; the 3D skeleton has no bones there

    def two_face_points(pose, pointmap, *args, **kwargs):  # the app runs in this process
        people = pose.num_people
        points = np.full((people, NUM_KEYPOINTS, 3), np.nan, np.float32)
        points[:, face] = [0.0, 0.0, 2.0]
        available = np.zeros((people, NUM_KEYPOINTS), bool)
        available[:, face] = True
        return lift.Pose3DResult(points, np.ones((people, NUM_KEYPOINTS), np.float32), available)

    monkeypatch.setattr(lift, "lift_keypoints", two_face_points)
    _, files, notes = client.predict(handle_file(strip(tmp_path, 4000, 60)), flip_test=False, lift_3d=True,
                                     api_name="/pose")
    assert "2 of 308 keypoints placed" in notes, notes
    assert "none of the 2 keypoints placed in 3D is one of its joints" in notes and "could be placed" not in notes
    assert any(f.endswith("pose_3d.json") for f in files) and not any(f.endswith("pose_3d.glb") for f in files)

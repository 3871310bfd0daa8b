"""The camera's rotation per frame from the background (pose/camera_rotation.py), on rendered frames
(tests/camera_frames.py): a textured panorama seen through a pan, a tilt and a hand-held shake, a person stand-in
moving across it, a still camera, and a camera carried through a room."""

import numpy as np
import pytest

from sapiens2_demo.pose.camera_rotation import RotationTracker
from tests import camera_frames as frames

FPS = 24.0


@pytest.mark.parametrize("motion", ["pan", "tilt", "shake"])
def test_a_turning_camera_is_followed_within_a_degree_a_frame(motion):
    truth = {"pan": frames.pan(120, 45.0), "tilt": frames.tilt(96, 20.0),
             "shake": frames.shake(120, FPS, degrees=3.0, hertz=3.0)}[motion]
    found = frames.estimate(frames.render_turning(truth))
    assert found.turned, found.note
    error = frames.errors(found.to_first, truth)
    assert error["per_frame"] <= 1.0 and error["drift"] <= 2.0, error


def test_a_pan_to_the_right_turns_the_view_to_the_right():
    found = frames.estimate(frames.render_turning(frames.pan(48, 30.0), person=False))
    forward = found.to_first[-1] @ [0.0, 0.0, 1.0]  # the last view's direction in the first view's frame
    assert np.degrees(np.arctan2(forward[0], forward[2])) == pytest.approx(30.0, abs=0.5)
    assert found.note == "camera panned 30 degrees to the right"


def test_a_still_camera_is_exactly_still():
    found = frames.estimate(frames.render_turning(frames.still(72), seed=2))
    assert found.still and not found.turned and found.note == "camera still"
    assert np.array_equal(found.to_first, np.repeat(np.eye(3)[None], 72, 0))


def test_an_unmasked_person_is_left_out_by_the_rotation_fit():
    truth = frames.pan(72, 30.0)
    found = frames.estimate(frames.render_turning(truth), mask=False)
    assert frames.errors(found.to_first, truth)["per_frame"] <= 1.0


def test_the_people_s_boxes_stand_in_for_the_segmentation():
    truth = frames.shake(48, FPS)
    tracker = RotationTracker()
    for frame, _ in frames.render_turning(truth):
        tracker.add(frame, boxes=np.array([[150.0, 45.0, 330.0, 270.0]]))
    found = tracker.solve(frames.focal(480))
    assert frames.errors(found.to_first, truth)["per_frame"] <= 1.0


def test_a_camera_carried_along_is_refused_with_a_reason():
    found = frames.estimate(frames.render_walking(48, FPS))
    assert found.to_first is None and not found.turned
    assert "does not move as a turning camera's" in found.note and "still camera assumed" in found.note


def test_too_little_background_is_refused_with_a_reason():
    tracker = RotationTracker()
    for frame, background in frames.render_turning(frames.pan(24, 10.0)):
        background[30:] = background[:, 30:] = False  # a person filling all but a corner
        tracker.add(frame, background)
    found = tracker.solve(frames.focal(480))
    assert found.to_first is None and "too little background or texture" in found.note


def test_bad_input_says_what_is_wrong():
    tracker = RotationTracker()
    tracker.add(np.zeros((90, 160, 3), np.uint8))
    with pytest.raises(ValueError, match="differs from the clip's"):
        tracker.add(np.zeros((100, 160, 3), np.uint8))
    tracker.add(np.zeros((90, 160, 3), np.uint8))
    with pytest.raises(ValueError, match="positive number of pixels"):
        tracker.solve(float("nan"))


def test_the_benchmark_writes_each_motion_s_figures(tmp_path):
    from benchmarks import harness
    from benchmarks.mocap import camera

    with harness.Run("camera", "python -m benchmarks camera", results=tmp_path) as run:
        camera(["--seconds", "1", "--timing-frames", "3", "--size", "320x180"], run)
    figures = run.figures
    assert figures["pan 45 degrees"]["per_frame_deg"] <= 1.0 and figures["still"]["still_total_deg"] == 0.0
    assert figures["carried along"]["refused"] and figures["ms_per_frame_720p"] > 0
    assert len(run.tables["camera"]["rows"]) == 7 and (tmp_path / run.path().name).exists()


def test_the_turn_is_told_in_words():
    from sapiens2_demo.pose.camera_rotation import describe

    up = np.array([0.0, -1.0, 0.0])
    assert describe(frames.pan(10, -35.0), up) == "panned 35 degrees to the left"
    assert describe(frames.tilt(11, 12.0), up) == "tilted 12 degrees down"
    assert describe(np.stack([frames.turn(0, 0, 0), frames.turn(0.4, 0.3, 0)]), up) == "turned up to 0.5 degrees"
    assert describe(np.stack([frames.turn(0, 0, 0), frames.turn(-3, 2, 6)]), up) == (
        "panned 3 degrees to the left, tilted 2 degrees up and rolled 6 degrees clockwise")

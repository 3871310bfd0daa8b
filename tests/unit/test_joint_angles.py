"""Joint angles (pose/joint_angles.py) against known geometry: the motion harness's body (tests/motion_clips.py)
posed with chosen joint angles, and its clips' truth against the fitted motion; the CSV and plot files."""

import numpy as np
import pytest

from sapiens2_demo.export.joint_angles_files import read_angles_csv, write_angles_csv, write_angles_plot
from sapiens2_demo.pose.joint_angles import CAMERA_UP, angle_names, joint_angles
from tests.motion_clips import TO_CAMERA, _standing, body, make_clip
from tests.motion_truth import run

FRAMES = 5


def posed(**degrees) -> np.ndarray:
    """(T, 308, 3) Y-up keypoints of the harness's standing body with the named joint angles (degrees; upright,
    arms in the sagittal plane unless told), the root gliding along x at 1.5 m/s."""
    t = np.arange(FRAMES) / 10.0
    p = _standing(t, [0.0, 0.9, 3.0])
    p["root"] = p["root"] + np.outer(t, [1.5, 0.0, 0.0])
    for name, value in {"lean": 0, "left_abduct": 0, "right_abduct": 0, **degrees}.items():
        p[name] = np.full(FRAMES, np.radians(value))
    return body(p, FRAMES)


def test_each_angle_is_the_pose_it_was_given():
    angles = joint_angles(posed(left_knee=40, right_knee=5, left_hip_flex=30, right_hip_flex=-10, left_elbow=90,
                                right_elbow=20, left_flex=60, right_flex=150),
                          np.arange(FRAMES) / 10.0)
    assert list(angles) == angle_names()
    expected = {"left_knee_deg": 40, "right_knee_deg": 5, "left_hip_deg": 30, "right_hip_deg": -10,
                "left_elbow_deg": 90, "right_elbow_deg": 20, "left_shoulder_deg": 60, "right_shoulder_deg": 150,
                "trunk_lean_deg": 0, "root_speed_mps": 1.5}
    for name, value in expected.items():
        assert angles[name] == pytest.approx(np.full(FRAMES, value), abs=1e-6), name


def test_trunk_lean_and_the_camera_frame():
    """A lean forward reads the same in the Y-up frame and, with the camera's up, in the camera frame."""
    points = posed(lean=20)
    up = joint_angles(points, np.arange(FRAMES) / 10.0)
    camera = joint_angles(points @ TO_CAMERA.T, np.arange(FRAMES) / 10.0, up=CAMERA_UP)
    assert up["trunk_lean_deg"] == pytest.approx(np.full(FRAMES, 20.0), abs=1e-6)
    for name in angle_names():
        assert camera[name] == pytest.approx(up[name], abs=1e-6), name


def test_an_unknown_keypoint_leaves_its_angles_unknown():
    points = posed(left_knee=40)
    points[2, 13] = np.nan  # the left ankle on frame 2
    angles = joint_angles(points, np.arange(FRAMES) / 10.0)
    assert np.isnan(angles["left_knee_deg"][2]) and np.isfinite(angles["left_knee_deg"][[0, 1, 3, 4]]).all()
    assert np.isfinite(angles["right_knee_deg"]).all()


@pytest.mark.parametrize("name", ["walk", "sit", "arms"])
def test_the_fitted_motions_angles_follow_the_truths(tmp_path, name):
    """On clean input (no noise, no faults) every angle of the fitted motion within 5 degrees of the truth's."""
    clip = make_clip(name, noise=False, faults=False)
    _, _, export = run(clip, tmp_path)
    (track,) = export.fitted
    times = np.arange(clip.frames) / clip.fps
    fitted = joint_angles(track.points, times, up=CAMERA_UP)
    truth = joint_angles(clip.truth[0], times, up=CAMERA_UP)
    for series in angle_names()[:-1]:
        error = np.abs(fitted[series] - truth[series])[track.present]
        assert np.nanmax(error) < 5.0, (series, float(np.nanmax(error)))


def test_the_csv_reads_back_and_the_plot_is_a_png(tmp_path):
    times = np.arange(FRAMES) / 10.0
    angles = joint_angles(posed(left_knee=40), times)
    angles["left_elbow_deg"][1] = np.nan
    path = write_angles_csv(angles, times, tmp_path / "joint_angles_1.csv")
    read_times, read = read_angles_csv(path)
    assert read_times == pytest.approx(times) and list(read) == angle_names()
    for series, values in angles.items():
        assert read[series] == pytest.approx(values, abs=0.006, nan_ok=True), series
    plot = write_angles_plot(angles, times, tmp_path / "joint_angles_1.png", "person 1")
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and plot.stat().st_size > 5000

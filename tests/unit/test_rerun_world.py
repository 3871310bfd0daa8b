"""The recording's 3D in the world frame the feet give (pose/world.py), when the motion found a floor: the skeleton
mapped into it, Y up, the camera placed by its pose; the joint angles' trunk lean against gravity."""

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sapiens2_demo.pose.motion import TrackMotion
from sapiens2_demo.pose.world import World
from tests.rrd import column, read_rrd
from tests.unit.test_mocap_export import walking_keypoints

pytest.importorskip("rerun")
FRAMES = 6


def test_a_found_floor_puts_the_skeleton_and_the_camera_in_its_frame(tmp_path):
    from sapiens2_demo.export.rerun_recording import METRE_STEP, VideoRecording

    tilt = np.radians(10)  # the camera looks 10 degrees down: gravity's up is not the image's
    up = np.array([0.0, -np.cos(tilt), -np.sin(tilt)])
    forward = np.cross([1.0, 0.0, 0.0], up)
    rotation = np.stack([[1.0, 0.0, 0.0], up, forward])  # rows: the world's x, y (up), z in the camera frame
    world = World(rotation=rotation, origin=np.array([0.0, 1.5, 4.0]), up=up, height=1.5, pitch=10.0, roll=0.0,
                  on_floor=20, off_floor=0)
    points = walking_keypoints(FRAMES, 10.0)[:, :70].astype(np.float32)
    track = TrackMotion(1, points, np.ones((FRAMES, 70), bool), np.ones(FRAMES, bool), 0, np.zeros(70), 10.0)
    info = SimpleNamespace(path=Path("clip.webm"), width=64, height=48, rotation=0, video_codec="vp9")
    recording = VideoRecording(tmp_path, video_info=info, fps=10.0, dense=False)
    for f in range(FRAMES):
        recording.add(f, f / 10.0, np.zeros((48, 64, 3), np.uint8), {})
    motion = SimpleNamespace(fitted=[track], world=world, recorder=SimpleNamespace(times=list(np.arange(FRAMES) / 10)))
    recording.close(motion)
    rrd = read_rrd(tmp_path / "recording.rrd")
    skeleton = rrd["world/people/1/skeleton"]
    (ids,) = column(skeleton, "Points3D:keypoint_ids")
    placed = column([row for row in skeleton if row.get("time") is not None], "Points3D:positions")
    assert len(placed) == FRAMES
    for positions, frame in zip(placed, points):
        assert np.array(positions) == pytest.approx(world.to_world(frame[ids]), abs=METRE_STEP / 2 + 1e-6)
    assert [[3, 1, 6]] in column(rrd["world"], "ViewCoordinates:xyz")  # RIGHT_HAND_Y_UP: right, up, back
    translation = column(rrd["world/camera"], "Transform3D:translation")
    assert translation[0][0] == pytest.approx(world.camera_position, abs=1e-5)
    lean = column(rrd["angles/trunk/1/value"], "Scalars:scalars")
    from sapiens2_demo.pose.joint_angles import joint_angles

    assert np.ravel(lean) == pytest.approx(joint_angles(world.to_world(points), np.arange(FRAMES) / 10.0)
                                           ["trunk_lean_deg"], abs=0.005)  # to the CSV's 0.01


def test_a_turning_camera_is_placed_by_each_frame_s_rotation(tmp_path):
    from dataclasses import replace

    from sapiens2_demo.export.rerun_recording import VideoRecording
    from tests.camera_frames import pan

    turns = pan(FRAMES, 30.0)
    world = World(rotation=np.diag([1.0, -1.0, -1.0]), origin=np.array([0.0, 1.0, 0.0]), up=np.array([0.0, -1, 0]),
                  height=1.0, pitch=0.0, roll=0.0, on_floor=20, off_floor=0)
    world = replace(world, turns=turns, turning="panned 30 degrees to the right")
    points = walking_keypoints(FRAMES, 10.0)[:, :70].astype(np.float32)
    track = TrackMotion(1, points, np.ones((FRAMES, 70), bool), np.ones(FRAMES, bool), 0, np.zeros(70), 10.0)
    info = SimpleNamespace(path=Path("clip.webm"), width=64, height=48, rotation=0, video_codec="vp9")
    recording = VideoRecording(tmp_path, video_info=info, fps=10.0, dense=False)
    for f in range(FRAMES):
        recording.add(f, f / 10.0, np.zeros((48, 64, 3), np.uint8), {})
    motion = SimpleNamespace(fitted=[track], world=world, recorder=SimpleNamespace(times=list(np.arange(FRAMES) / 10)))
    recording.close(motion)
    logged = column(read_rrd(tmp_path / "recording.rrd")["world/camera"], "Transform3D:mat3x3")
    assert len(logged) == FRAMES
    for matrix, turn in zip(logged, turns):  # rerun keeps a 3 x 3 column by column
        assert np.reshape(matrix, (3, 3)).T == pytest.approx(world.rotation @ turn, abs=1e-5)

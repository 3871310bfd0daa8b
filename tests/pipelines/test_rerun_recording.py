"""A video job's Rerun recording (export/rerun_recording.py), read back with rerun-sdk: the video asset and a frame
reference per processed frame, each frame's 2D keypoints and box per track id, the fitted 3D skeleton, the joint
angles equal to their CSV; the dense maps; frames as images for a file the web viewer cannot decode; and a job
without rerun-sdk installed (a note, no recording, rerun never imported)."""

import json
import sys

import numpy as np
import pytest

from sapiens2_demo.export.joint_angles_files import read_angles_csv
from sapiens2_demo.export.rerun_layout import RECORDED_KEYPOINTS
from sapiens2_demo.export.rerun_recording import PIXEL_STEP
from sapiens2_demo.jobs.video import process_video
from tests.pipelines.test_video_mocap import FPS, FRAMES, clip  # noqa: F401 - the fixture
from tests.rrd import column, read_rrd
from tests.unit.test_mocap_export import walking_keypoints
from tests.videos import make_video

pytest.importorskip("rerun")

POSE = dict(flip_test=False, detect_every=1, smoothing=False, batch_size=2, chunk_size=4)


def walker_lift(patch) -> np.ndarray:
    """One person box on every frame and a lift that places the synthetic walker of that frame (as
    test_video_mocap's one_walker, every frame lifted); returns the walker's (T, 308, 3) keypoints."""
    from sapiens2_demo.pipelines import pose as pipeline
    from sapiens2_demo.pose import lift
    from sapiens2_demo.pose.lift import Pose3DResult

    box, score = np.array([[20, 10, 140, 115]], np.float32), np.array([0.9], np.float32)
    patch.setattr(pipeline, "find_people", lambda image, *a, **k: (box.copy(), score.copy(), []))
    walker = walking_keypoints(FRAMES, FPS).astype(np.float32)
    calls = []

    def fake_lift(pose, pointmap, mask=None, **_):
        calls.append(len(calls))
        points = walker[len(calls) - 1][None].repeat(pose.num_people, 0)
        return Pose3DResult(points=points, scores=pose.keypoint_scores, available=np.isfinite(points).all(2))

    patch.setattr(lift, "lift_keypoints", fake_lift)
    return walker


@pytest.fixture(scope="module")
def recorded(clip, tiny_dir, tmp_path_factory):  # noqa: F811 - the clip fixture
    """The pose job with 3D motion and the recording, on the walker: (output, folder, the .rrd read, walker)."""
    from sapiens2_demo import gpu
    from sapiens2_demo.models.manager import ModelManager

    manager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32",
                           detector=str(tiny_dir / "yolov8n-random.pt"))
    folder = tmp_path_factory.mktemp("recorded")
    with pytest.MonkeyPatch.context() as patch:
        walker = walker_lift(patch)
        out = process_video(clip, "pose", gpu.register(manager), folder, motion_3d=True, rerun=True, **POSE)
    return out, folder, read_rrd(folder / "recording.rrd"), walker


def test_the_downloads_hold_the_recording_and_the_angle_files(recorded):
    out, folder, *_ = recorded
    names = {path.name for path in out.files}
    assert {"recording.rrd", "joint_angles_1.csv", "joint_angles_1.png", "motion_1.bvh"} <= names
    assert not list(folder.glob(".*.partial"))


def test_the_video_is_an_asset_with_a_reference_per_frame(recorded, clip):  # noqa: F811
    _, _, rrd, _ = recorded
    image = rrd["world/camera/image"]
    blobs = column(image, "AssetVideo:blob")
    assert len(blobs) == 1 and bytes(blobs[0][0]) == clip.read_bytes()  # the input's bytes, once
    references = [row for row in image if row.get("VideoFrameReference:timestamp") is not None]
    assert [row["frame"] for row in references] == list(range(FRAMES))
    nanos = [row["VideoFrameReference:timestamp"][0] for row in references]
    assert np.diff(nanos) == pytest.approx(np.full(FRAMES - 1, 1e9 / FPS), rel=1e-3)


def test_each_frames_keypoints_and_box_are_logged_per_track_id(recorded):
    _, folder, rrd, _ = recorded
    lines = [json.loads(line) for line in open(folder / "pose_frames.jsonl")]
    rows = rrd["world/camera/image/people/1/keypoints"]
    assert [row["frame"] for row in rows] == [line["frame"] for line in lines]
    for row, line in zip(rows, lines):
        (person,) = line["people"]
        sure = [k for k in RECORDED_KEYPOINTS if person["keypoint_scores"][k] >= 0.3]  # body, feet, wrists
        assert row["Points2D:keypoint_ids"] == sure and row["Points2D:class_ids"] == [0]
        assert row["Points2D:show_labels"] in (False, [False])  # 30 names over one small body hid it
        assert np.array(row["Points2D:positions"]) == pytest.approx(np.array(person["keypoints"])[sure],
                                                                    abs=PIXEL_STEP / 2 + 0.01)  # the grid, JSON's
    boxes = column(rrd["world/camera/image/people/1/box"], "Boxes2D:labels")
    assert boxes == [["id 1"]] * FRAMES
    (person,) = column(rrd[""], "AnnotationContext:context")[0][0]
    person = person["class_description"]
    names = {info["id"]: info["label"] for info in person["keypoint_annotations"]}
    assert sorted(names) == list(RECORDED_KEYPOINTS) and names[5] == "left_shoulder" and names[41] == "right_wrist"
    assert [13, 11] in [list(link.values()) for link in person["keypoint_connections"]]


def test_the_3d_skeleton_is_the_fitted_motion(recorded):
    _, _, rrd, walker = recorded
    rows = rrd["world/people/1/skeleton"]
    (ids,) = column(rows, "Points3D:keypoint_ids")  # once, static: the same keypoints placed on every frame
    assert set(ids) <= set(RECORDED_KEYPOINTS) and {9, 13, 17, 41, 62} <= set(ids)  # body, feet, wrists; no fingers
    positions = [row["Points3D:positions"] for row in rows if row.get("time") is not None]
    assert [row["frame"] for row in rows if row.get("time") is not None] == list(range(FRAMES))
    for placed, truth in zip(positions, walker):
        assert np.abs(np.array(placed) - truth[ids]).max() < 0.1  # metres: the fit follows the walker it was given
    pinhole = column(rrd["world/camera"], "Pinhole:image_from_camera")
    assert pinhole and pinhole[0][0][0] > 0  # fx, from the lift (the tiny model and the walker disagree)


def test_the_angle_series_equal_the_csv(recorded):
    _, folder, rrd, _ = recorded
    times, angles = read_angles_csv(folder / "joint_angles_1.csv")
    assert len(times) == FRAMES
    knee = rrd["angles/knee/1/left"]
    assert [row["time"] for row in knee] == pytest.approx(times[np.isfinite(angles["left_knee_deg"])])
    assert np.ravel(column(knee, "Scalars:scalars")) == pytest.approx(
        angles["left_knee_deg"][np.isfinite(angles["left_knee_deg"])], abs=0.006)
    speed = column(rrd["angles/speed/1/value"], "Scalars:scalars")
    assert np.ravel(speed) == pytest.approx(angles["root_speed_mps"][np.isfinite(angles["root_speed_mps"])],
                                            abs=0.006)


def test_dense_maps_and_frames_as_images(tmp_path, key):
    """A WebM (VP9) clip: frames as JPEGs (a note says why); the body parts at DENSE_PER_SECOND a second with the
    29 classes' context."""
    clip_webm = make_video(tmp_path / "clip.webm", frames=8, size=(160, 120), fps=4, codec="vp9")
    out = process_video(clip_webm, "segment", key, tmp_path / "out", rerun=True, batch_size=2)
    assert any("JPEG images (a .webm file" in note for note in out.notes)
    rrd = read_rrd(tmp_path / "out" / "recording.rrd")
    frames = column(rrd["world/camera/image"], "EncodedImage:blob")
    assert len(frames) == 8 and bytes(frames[0][0])[:2] == b"\xff\xd8"
    maps = rrd["world/maps/body_parts"]
    labels = [row for row in maps if row.get("SegmentationImage:buffer") is not None]
    assert [row["time"] for row in labels] == pytest.approx([0.0, 0.5, 1.0, 1.5])
    classes = column(maps, "AnnotationContext:context")[0][0]
    assert [c["class_id"] for c in classes] == list(range(29))
    assert classes[0]["class_description"]["info"]["label"] == "Background"


def test_without_rerun_the_job_runs_and_says_the_viewer_is_off(clip, key, tmp_path, monkeypatch):  # noqa: F811
    for name in [m for m in sys.modules if m == "rerun" or m.startswith(("rerun.", "rerun_bindings"))]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "rerun", None)  # any import of it now fails
    out = process_video(clip, "pose", key, tmp_path, rerun=True, **POSE)
    assert "recording.rrd" not in {path.name for path in out.files} and not list(tmp_path.glob("*.rrd*"))
    assert any(note.startswith("Rerun recording: off") for note in out.notes)


def test_the_cli_asks_for_the_recording_and_refuses_it_without_rerun(monkeypatch, capsys):
    from sapiens2_demo.batch.work import video_options
    from sapiens2_demo.cli import options_from, parse_args
    from sapiens2_demo.export import rerun_recording

    options = options_from(parse_args(["-i", "clip.mp4", "-o", "out", "--tasks", "pose", "--rerun"]))
    assert video_options("pose", options)["rerun"] and "recording.rrd" in options.required_video_files("pose")
    assert not video_options("pose", options_from(parse_args(["-i", "clip.mp4", "-o", "out"])))["rerun"]
    monkeypatch.setattr(rerun_recording, "available", lambda: False)
    with pytest.raises(SystemExit):
        parse_args(["-i", "clip.mp4", "-o", "out", "--rerun"])
    assert "--rerun needs rerun-sdk" in capsys.readouterr().err

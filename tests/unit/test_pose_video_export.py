"""A video's pose downloads (export/video.py) from keypoints decoded off a degenerate heatmap."""

import json

import numpy as np

from sapiens2_demo.export.video import PoseVideoExport, pose_frame_document
from sapiens2_demo.pose.decode import decode_heatmaps
from sapiens2_demo.pose.smoothing import KeypointSmoother
from sapiens2_demo.results import PoseResult
from tests.heatmaps import singular_map

K, FPS = 308, 30.0


def _heatmaps(frame: int) -> np.ndarray:
    """(1, K, 64, 48): Gaussian peaks drifting with the frame; keypoint 5 nearly flat (where transformers'
    DARK-UDP gives inf / nan, tests/heatmaps.py) on frames 2 and 3, keypoint 9 all NaN on frame 3."""
    yy, xx = np.mgrid[0:64, 0:48]
    centres = np.random.default_rng(0).uniform(8, 40, (K, 2)) + 0.3 * frame
    maps = np.exp(-((xx - centres[:, 0, None, None]) ** 2 + (yy - centres[:, 1, None, None]) ** 2) / 8)
    maps = maps[None].astype(np.float32)
    if frame in (2, 3):
        maps[0, 5] = singular_map()
    if frame == 3:
        maps[0, 9] = np.nan
    return maps


def _pose_results(frames: int = 6, smooth: bool = True):
    """Decoded and (as the video job does) smoothed PoseResults of one tracked person."""
    boxes = np.array([[10, 20, 110, 300]], np.float32)
    smoother = KeypointSmoother()
    for frame in range(frames):
        keypoints, scores = decode_heatmaps(_heatmaps(frame), boxes, (256, 192))
        result = PoseResult(image_size=(320, 240), boxes=boxes, box_scores=np.ones(1, np.float32),
                            keypoints=keypoints, keypoint_scores=scores, track_ids=np.array([0]))
        if smooth:
            result.keypoints = smoother.smooth(result.track_ids, result.keypoints, frame / FPS, result.keypoint_scores)
        yield frame, result


def test_frame_document_of_a_degenerate_keypoint_is_valid_json():
    for frame, result in _pose_results(smooth=False):  # as decoded
        document = json.loads(json.dumps(pose_frame_document(frame, frame / FPS, result), allow_nan=False))
        person = document["people"][0]
        assert len(person["keypoints"]) == K
        if frame in (2, 3):
            assert person["keypoint_scores"][5] == 0.0  # not visible
        if frame == 3:
            assert person["keypoint_scores"][9] == 0.0


def test_pose_video_export_writes_valid_json_lines(tmp_path):
    export = PoseVideoExport(tmp_path, keypoint_threshold=0.3)
    for frame, result in _pose_results():
        export.add(frame, frame / FPS, None, result)
    paths = export.close()
    assert sorted(p.name for p in paths) == ["pose_coco17.jsonl", "pose_coco_wholebody.jsonl", "pose_frames.jsonl"]
    for path in paths:
        lines = path.read_text().splitlines()
        assert len(lines) == 6
        documents = [json.loads(line, parse_constant=_refuse_constant) for line in lines]
        assert [d["frame"] for d in documents] == list(range(6))
    frames = [json.loads(line) for line in (tmp_path / "pose_frames.jsonl").read_text().splitlines()]
    keypoints = np.array([f["people"][0]["keypoints"] for f in frames])
    assert keypoints.shape == (6, K, 2) and np.isfinite(keypoints).all()


def _refuse_constant(name):
    raise AssertionError(f"{name} in a JSON line")

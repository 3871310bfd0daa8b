"""recording.rrd's size (export/rerun_recording.py): a minute of one person's 2D keypoints, box, 3D skeleton and
joint angles adds at most 1 MB to the input video's bytes (the issue's target, per person-minute)."""

import types

import numpy as np
import pytest

from tests.videos import make_video

pytest.importorskip("rerun")

FPS, FRAMES = 24, 24 * 60  # a minute


def test_a_person_minute_adds_at_most_1_mb(tmp_path):
    from sapiens2_demo.export.rerun_recording import VideoRecording
    from sapiens2_demo.media.video import probe
    from sapiens2_demo.results import PoseResult

    clip = make_video(tmp_path / "clip.mp4", frames=12, size=(64, 48), fps=FPS)  # references past its end are dropped
    recording = VideoRecording(tmp_path, video_info=probe(clip), fps=FPS, dense=False)
    rng = np.random.default_rng(0)
    start = rng.uniform(5, 60, (308, 2))
    keypoints = start + rng.normal(0, 0.3, (FRAMES, 308, 2)).cumsum(0)  # a person moving about, every point sure
    frame = np.zeros((48, 64, 3), np.uint8)
    for index in range(FRAMES):
        pose = PoseResult(image_size=(48, 64), boxes=np.array([[5, 5, 60, 45]], np.float32),
                          box_scores=np.ones(1, np.float32), keypoints=keypoints[index][None].astype(np.float32),
                          keypoint_scores=np.ones((1, 308), np.float32), track_ids=np.array([1]))
        recording.add(index, index / FPS, frame, {"pose": pose})
    points = rng.normal(0, 0.3, (70, 3)) + rng.normal(0, 0.003, (FRAMES, 70, 3)).cumsum(0) + [0, 0, 3]
    track = types.SimpleNamespace(track_id=1, points=points, present=np.ones(FRAMES, bool))
    motion = types.SimpleNamespace(fitted=[track], world=None,
                                   recorder=types.SimpleNamespace(times=np.arange(FRAMES) / FPS))
    rrd = recording.close(motion)[0]
    added = rrd.stat().st_size - clip.stat().st_size
    assert added <= 2**20, f"{added / 2**20:.2f} MB beyond the video for one person-minute"

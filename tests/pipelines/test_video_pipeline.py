"""The video path below the UI: stable track ids, exports that open, cancel and failure leave no file."""

import json
import zipfile

import numpy as np
import pytest

from sapiens2_demo import gpu
from sapiens2_demo.jobs.video import VideoJob, process_video
from tests.videos import count_frames, decode_rgba_vp9, make_video


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return make_video(tmp_path_factory.mktemp("clip") / "clip.mp4", frames=10, size=(160, 120), fps=10)


def test_static_scene_keeps_stable_track_ids(clip, key, tmp_path, monkeypatch):
    """Two people standing still (fixed boxes from a stand-in detector): the same two ids on every frame."""
    from sapiens2_demo.pipelines import pose as pipeline

    boxes = np.array([[10, 10, 70, 110], [90, 15, 150, 115]], np.float32)
    scores = np.array([0.9, 0.8], np.float32)
    monkeypatch.setattr(pipeline, "find_people", lambda image, *a, **k: (boxes.copy(), scores.copy(), []))
    # every frame detected: the boxes are the stand-in's (followed boxes would come from random keypoints)
    out = process_video(clip, "pose", key, tmp_path, flip_test=False, detect_every=1)
    lines = [json.loads(line) for line in open(tmp_path / "pose_frames.jsonl")]
    assert len(lines) == 10
    ids = [[p["track_id"] for p in line["people"]] for line in lines]
    assert ids[0] == [1, 2] and all(frame_ids == ids[0] for frame_ids in ids)
    assert out.frames == 10


def test_pose_detects_every_nth_frame_of_the_clip_across_batches_and_gpu_calls(clip, key, tmp_path, detector_frames):
    """10 frames, detect_every=4, batches of 2 frames, GPU calls of 4: the detector on frames 0, 4 and 8 only;
    the cadence and the people followed carry over each batch and call (it used to restart every batch)."""
    out = process_video(clip, "pose", key, tmp_path, flip_test=False, detect_every=4, batch_size=2, chunk_size=4)
    assert out.frames == 10 and sum(detector_frames) == 3
    lines = [json.loads(line) for line in open(tmp_path / "pose_frames.jsonl")]
    assert [len(line["people"]) for line in lines] == [len(lines[0]["people"])] * 10


def test_matting_exports_open_with_alpha(clip, key, tmp_path):
    out = process_video(clip, "matting", key, tmp_path, frame_exports=True)
    names = {p.name for p in out.files}
    assert {"matting_alpha.mp4", "matting_transparent.webm"} <= names
    assert count_frames(tmp_path / "matting_alpha.mp4") == 10
    rgba = decode_rgba_vp9(tmp_path / "matting_transparent.webm")
    assert len(rgba) == 10 and rgba[0].shape == (120, 160, 4)


def test_cancel_midway_leaves_no_file(clip, key, tmp_path):
    steps = VideoJob(clip, "segment", key, tmp_path, batch_size=2, chunk_size=2).run()
    progress = next(steps)
    assert 0 < progress.done < 10
    steps.close()  # what a Stop in the UI does
    assert [p.name for p in tmp_path.iterdir()] == []


def test_a_failure_midway_leaves_no_file(clip, key, tmp_path, monkeypatch):
    from sapiens2_demo.render import parts

    calls = []

    def failing(self, frame, result):
        calls.append(1)
        if len(calls) == 5:
            raise RuntimeError("renderer broke")
        return frame

    monkeypatch.setattr(parts.PartsAnnotator, "annotate", failing)
    with pytest.raises(RuntimeError, match="renderer broke"):
        process_video(clip, "segment", key, tmp_path, batch_size=2)
    assert [p.name for p in tmp_path.iterdir()] == []


def test_depth_frames_are_millimetres_of_the_pointmap(clip, key, tmp_path, manager):
    from PIL import Image

    from sapiens2_demo.media.video import read_frames
    from sapiens2_demo.pipelines import dense

    process_video(clip, "pointmap", key, tmp_path, remove_background=False, frame_exports=True)
    first = next(read_frames(clip)).rgb
    expected = dense.estimate_pointmap(first, manager).depth
    with zipfile.ZipFile(tmp_path / "depth_mm.zip") as zf:
        assert len(zf.namelist()) == 10
        mm = np.asarray(Image.open(zf.open("frame_000000.png"))).astype(np.float64)
    valid = (expected > 0) & (mm > 0)
    assert valid.mean() > 0.5
    np.testing.assert_allclose(mm[valid] / 1000, expected[valid], atol=0.0006 + 1e-4 * np.abs(expected).max())


def test_pose_video_writes_coco_wholebody_lines_with_track_ids(clip, key, tmp_path, monkeypatch):
    from sapiens2_demo.pipelines import pose as pipeline

    boxes = np.array([[10, 10, 70, 110], [90, 15, 150, 115]], np.float32)
    monkeypatch.setattr(pipeline, "find_people",
                        lambda image, *a, **k: (boxes.copy(), np.array([0.9, 0.8], np.float32), []))
    out = process_video(clip, "pose", key, tmp_path, flip_test=False)
    assert "pose_coco_wholebody.jsonl" in {p.name for p in out.files}
    lines = [json.loads(line) for line in open(tmp_path / "pose_coco_wholebody.jsonl")]
    coco17 = [json.loads(line) for line in open(tmp_path / "pose_coco17.jsonl")]
    assert [line["frame"] for line in lines] == list(range(10))
    assert lines[1]["time"] == pytest.approx(0.1, abs=1e-3)
    parts = ("keypoints", "foot_kpts", "face_kpts", "lefthand_kpts", "righthand_kpts")
    for line, body in zip(lines, coco17, strict=True):
        assert [a["track_id"] for a in line["annotations"]] == [1, 2]
        for annotation, same in zip(line["annotations"], body["annotations"], strict=True):
            assert sum(len(annotation[part]) for part in parts) == 133 * 3  # 133 triples per person
            assert annotation["keypoints"] == same["keypoints"]  # the body 17 are the COCO-17 export's
    assert len(lines[0]["categories"][0]["wholebody_keypoints"]) == 133


def test_the_chunks_grow_and_taper_where_the_model_runs_in_this_process(tmp_path, key, monkeypatch):
    """A streamed video's chunks double from one forward's frames (the first progress after one forward) and halve
    towards the container's frame count, so what is drawn and encoded after the last forward is a couple of frames
    (2, 4, 8, 16, 10, 4, 2, 2 for 48), a call a chunk in this process too (pose); on ZeroGPU, where each call is a
    worker and a GPU asked for, whole chunks; a container that says too few goes on at full chunks."""
    from sapiens2_demo.jobs.video_threads import tapered

    def plan(n, expected, size=16, smallest=2):
        sizes, handed = [], 0
        while handed < n:
            size_now = min(tapered(size, expected - handed, smallest) if expected else size, smallest << len(sizes))
            sizes.append(min(size_now, n - handed))
            handed += sizes[-1]
        return sizes

    assert plan(48, 48) == [2, 4, 8, 16, 10, 4, 2, 2] and plan(48, 0) == [2, 4, 8, 16, 16, 2]
    assert plan(80, 40) == [2, 4, 8, 14, 6, 4, 2, 16, 16, 8] and plan(17, 17) == [2, 4, 6, 4, 1]
    clip = make_video(tmp_path / "clip48.mp4", frames=48, size=(64, 48), fps=24, audio=False)
    chunks = []
    stream = gpu.stream
    monkeypatch.setattr(gpu, "stream", lambda key, chunked, *a, **k: stream(
        key, (chunks.append(len(c)) or c for c in chunked), *a, **k))
    out = process_video(clip, "segment", key, tmp_path / "streamed", batch_size=2, chunk_size=16)
    assert out.frames == 48 and chunks == [2, 4, 8, 16, 10, 4, 2, 2]
    assert count_frames(out.video) == 48
    calls = []
    answers = gpu.answers
    monkeypatch.setattr(gpu, "answers", lambda key, frames, *a, **k: (calls.append(len(frames)),
                                                                      answers(key, frames, *a, **k))[1])
    monkeypatch.setattr(gpu, "streams", lambda *a: False)  # a call a chunk (pose), in this process: the same sizes
    process_video(clip, "segment", key, tmp_path / "calls", batch_size=2, chunk_size=16)
    assert calls == [2, 4, 8, 16, 10, 4, 2, 2]
    calls.clear()
    monkeypatch.setattr(gpu, "CROSSES_PROCESSES", True)  # ZeroGPU: each call a worker and a GPU asked for
    process_video(clip, "segment", key, tmp_path / "zerogpu", batch_size=2, chunk_size=16)
    assert calls == [16, 16, 16]

"""The Video tab's /video endpoint through gradio_client: every task, audio kept, exports that open, and every
bad input of the issue answered with a clear message while the app keeps serving."""

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from gradio_client import handle_file
from PIL import Image

from tests.videos import audio_duration, count_frames, make_audio_only, make_video, video_duration, video_fps

TASK_FILES = {
    "pose": {"pose_frames.jsonl", "pose_coco17.jsonl"},
    "segment": {"body_parts_labels.zip"},
    "normals": set(),
    "pointmap": {"depth_mm.zip"},
    "matting": {"matting_alpha.mp4", "matting_transparent.webm"},
}
# the rendered video, named as the Video tab names the task (depth's was clip_pointmap.mp4 beside a "Depth" choice)
RENDERED = {"pose": "clip_pose.mp4", "segment": "clip_body_parts.mp4", "normals": "clip_normals.mp4",
            "pointmap": "clip_depth.mp4", "matting": "clip_matting.mp4"}


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return make_video(tmp_path_factory.mktemp("clips") / "clip.mp4", frames=12, size=(160, 120), fps=12, audio=True)


def _video(client, path, task, **kwargs):
    return client.predict(handle_file(str(path)), task, api_name="/video", **kwargs)


@pytest.mark.parametrize("task", list(TASK_FILES))
def test_every_task_comes_back_rendered_with_its_audio(client, clip, task):
    rendered, files, notes = _video(client, clip, task, max_people=2, frame_exports=True)
    path = rendered["video"] if isinstance(rendered, dict) else rendered
    assert count_frames(path) == 12
    assert video_fps(path) == pytest.approx(12, rel=1e-3)
    assert video_duration(path) == pytest.approx(1.0, abs=1 / 12)
    assert audio_duration(path) == pytest.approx(video_duration(path), abs=1 / 12)
    names = {p.split("/")[-1] for p in files}
    assert TASK_FILES[task] | {RENDERED[task]} <= names, names
    assert Path(path).name == RENDERED[task]
    assert "12 frames" in notes


def test_pose_exports_have_one_line_per_frame_with_track_ids(client, clip):
    _, files, _ = _video(client, clip, "pose", max_people=2)
    lines = [json.loads(line) for line in open(next(p for p in files if p.endswith("pose_frames.jsonl")))]
    assert [line["frame"] for line in lines] == list(range(12))
    assert lines[1]["time"] == pytest.approx(1 / 12, abs=1e-3)
    person = lines[0]["people"][0]
    assert len(person["keypoints"]) == 308 and len(person["keypoint_scores"]) == 308
    assert {p["track_id"] for line in lines for p in line["people"]} == {1}  # the whole-image box: one track


def test_motion_3d_and_steady_options_through_the_api(client, clip):
    """`motion_3d` adds pose_3d.jsonl (a line per frame) and says what it made of the random-weight people;
    `temporal_smoothing` keeps depth's per-frame exports (one PNG per frame)."""
    _, files, notes = _video(client, clip, "pose", max_people=2, motion_3d=True)
    lines = open(next(p for p in files if p.endswith("pose_3d.jsonl"))).read().splitlines()
    assert len(lines) == 12 and "3D motion:" in notes
    _, files, notes = _video(client, clip, "pointmap", frame_exports=True, temporal_smoothing=True)
    with zipfile.ZipFile(next(p for p in files if p.endswith("depth_mm.zip"))) as zf:
        assert len(zf.namelist()) == 12


def test_label_and_depth_zips_are_lossless_per_frame(client, clip):
    _, files, _ = _video(client, clip, "segment", frame_exports=True)
    with zipfile.ZipFile(next(p for p in files if p.endswith("body_parts_labels.zip"))) as zf:
        assert len(zf.namelist()) == 12
        labels = np.asarray(Image.open(zf.open(zf.namelist()[0])))
    assert labels.shape == (120, 160) and labels.dtype == np.uint8 and labels.max() <= 28
    _, files, _ = _video(client, clip, "pointmap", frame_exports=True)
    with zipfile.ZipFile(next(p for p in files if p.endswith("depth_mm.zip"))) as zf:
        depth = np.asarray(Image.open(zf.open(zf.namelist()[0])))
    assert depth.dtype == np.uint16 and depth.shape == (120, 160)


def test_heavy_frame_exports_are_on_request(client, clip):
    _, files, _ = _video(client, clip, "segment")
    assert [p.split("/")[-1] for p in files if not p.endswith(".mp4")] == []  # the labels zip only when asked
    _, files, _ = _video(client, clip, "pose")
    assert {"pose_frames.jsonl", "pose_coco17.jsonl"} <= {p.split("/")[-1] for p in files}  # light: always


def test_all_tasks_grid(client, clip):
    rendered, files, _ = _video(client, clip, "all", max_people=1, frame_exports=True)
    path = rendered["video"] if isinstance(rendered, dict) else rendered
    assert count_frames(path) == 12
    assert len(files) >= 6


@pytest.fixture(scope="module")
def bad_inputs(tmp_path_factory, clip):
    root = tmp_path_factory.mktemp("bad")
    corrupt = root / "corrupt.mp4"
    corrupt.write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    truncated = root / "truncated.mp4"
    truncated.write_bytes(make_video(root / "long.mp4", frames=48, faststart=False).read_bytes()[:6000])
    empty = root / "empty.mp4"
    empty.write_bytes(b"")
    image = root / "photo.mp4"
    Image.new("RGB", (64, 48), (200, 10, 10)).save(image, format="JPEG")
    audio = make_audio_only(root / "sound.m4a")
    return {"corrupt bytes": corrupt, "truncated": truncated, "0-byte": empty, "image renamed": image,
            "audio only": audio}


@pytest.mark.parametrize("case, words", [("corrupt bytes", "video"), ("truncated", "video"), ("0-byte", "empty"),
                                         ("image renamed", "image"), ("audio only", "sound")])
def test_bad_video_gets_a_clear_message_and_the_app_keeps_serving(client, bad_inputs, clip, case, words):
    with pytest.raises(Exception) as info:
        _video(client, bad_inputs[case], "segment")
    message = str(info.value)
    assert words in message.lower(), message
    assert "Traceback" not in message
    rendered, _, _ = _video(client, clip, "segment", stride=4)  # still serving
    assert count_frames(rendered["video"] if isinstance(rendered, dict) else rendered) == 3


@pytest.mark.parametrize("kind", ["rotated", "vfr", "odd", "4k", "no audio", "too long"])
def test_awkward_videos_give_correct_output(client, tmp_path, kind, monkeypatch):
    if kind == "rotated":
        src = Path(__file__).resolve().parents[1] / "data" / "rotated90.mp4"
    elif kind == "vfr":
        src = make_video(tmp_path / "vfr.mp4", frames=8, fps=12, vfr=True)
    elif kind == "odd":
        src = make_video(tmp_path / "odd.mp4", frames=4, size=(641, 359), codec="mpeg4")
    elif kind == "4k":
        src = make_video(tmp_path / "4k.mp4", frames=2, size=(3840, 2160), audio=False)
    elif kind == "no audio":
        src = make_video(tmp_path / "silent.mp4", frames=6, audio=False)
    else:
        monkeypatch.setenv("SAPIENS2_VIDEO_MAX_SECONDS", "0.5")
        src = make_video(tmp_path / "long.mp4", frames=24, fps=24)
    rendered, files, notes = _video(client, src, "segment")
    path = rendered["video"] if isinstance(rendered, dict) else rendered
    import av

    with av.open(path) as container:
        stream = container.streams.video[0]
        width, height = stream.codec_context.width, stream.codec_context.height
    assert width % 2 == 0 and height % 2 == 0
    if kind == "rotated":
        assert height > width  # upright
    if kind == "odd":
        assert (width, height) == (642, 360)
    if kind == "vfr":
        from tests.videos import frame_times, vfr_times

        assert frame_times(path) == pytest.approx(vfr_times(8, 12), abs=1e-3)
    if kind == "4k":
        assert max(width, height) <= 1280 and "downscaled" in notes
    if kind == "no audio":
        assert audio_duration(path) is None and "no audio" in notes
    if kind == "too long":
        assert count_frames(path) == 12 and "first 0.5 s" in notes
        assert audio_duration(path) == pytest.approx(0.5, abs=1 / 24)

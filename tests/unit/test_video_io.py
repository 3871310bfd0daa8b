"""sapiens2_demo.media.video: probe / read_frames / VideoSink on tiny clips made by tests/videos.py."""

import logging
from pathlib import Path

import av
import numpy as np
import pytest

from sapiens2_demo.media.video import VideoError, VideoSink, even_size, probe, read_frames
from tests.videos import (
    MARKER,
    audio_info,
    count_frames,
    decode_rgb,
    decode_rgba_vp9,
    frame_times,
    make_audio_only,
    make_video,
    pattern_frame,
    video_duration,
    video_fps,
)

DATA = Path(__file__).resolve().parents[1] / "data"
FPS = 24
FRAME = 1 / FPS


@pytest.fixture(scope="module")
def clip(tmp_path_factory) -> Path:
    """24 frames of 320x240 at 24 fps (1.0 s) with a 1 s AAC sine; shared, never modified."""
    return make_video(tmp_path_factory.mktemp("clip") / "clip.mp4")


def transcode(src, dst, *, read=None, **sink):
    """read_frames(src) -> VideoSink(dst) with the source's audio, as the video pipeline does."""
    read = read or {}
    sink.setdefault("fps", probe(src).fps)
    with VideoSink(dst, audio_from=src, **sink) as out:
        for frame in read_frames(src, **read):
            out.write(frame.rgb, frame.time)
    return Path(dst)


def corner_with_marker(rgb: np.ndarray) -> str:
    h, w = rgb.shape[:2]
    corners = {"top-left": rgb[1, 1], "top-right": rgb[1, w - 2], "bottom-left": rgb[h - 2, 1],
               "bottom-right": rgb[h - 2, w - 2]}
    found = [name for name, px in corners.items() if np.abs(px.astype(int) - MARKER).max() < 40]
    assert len(found) == 1, found
    return found[0]


# ---- probing and reading --------------------------------------------------------------------------------------

def test_probe_reports_the_clip(clip):
    info = probe(clip)
    assert (info.width, info.height, info.rotation) == (320, 240, 0)
    assert info.fps == pytest.approx(24) and info.frame_count == 24 and info.duration == pytest.approx(1.0, abs=1e-3)
    assert (info.video_codec, info.has_audio, info.audio_codec) == ("h264", True, "aac")


def test_read_frames_gives_upright_rgb_with_index_and_time(clip):
    frames = list(read_frames(clip))
    assert [f.index for f in frames] == list(range(24))
    assert [f.time for f in frames] == pytest.approx([i / FPS for i in range(24)], abs=1e-6)
    assert frames[0].rgb.shape == (240, 320, 3) and frames[0].rgb.dtype == np.uint8
    for i in (0, 11, 23):  # the right picture: matches the pattern that was drawn (lossy codec: small error)
        assert np.abs(frames[i].rgb.astype(int) - pattern_frame(i, 24, 320, 240)).mean() < 3


def test_stride_and_max_frames(clip):
    assert [f.index for f in read_frames(clip, stride=3)] == [0, 3, 6, 9, 12, 15, 18, 21]
    frames = list(read_frames(clip, stride=2, max_frames=3))
    assert [f.index for f in frames] == [0, 2, 4]
    assert [f.time for f in frames] == pytest.approx([0, 2 * FRAME, 4 * FRAME], abs=1e-6)


def test_4k_input_is_downscaled_to_max_side(tmp_path):
    src = make_video(tmp_path / "4k.mp4", frames=2, size=(3840, 2160), audio=False, pattern="static")
    assert (probe(src).width, probe(src).height) == (3840, 2160)
    frames = list(read_frames(src, max_side=1280))
    assert len(frames) == 2 and all(f.rgb.shape == (720, 1280, 3) for f in frames)
    import cv2

    expected = cv2.resize(pattern_frame(0, 2, 3840, 2160, "static"), (1280, 720), interpolation=cv2.INTER_AREA)
    assert np.abs(frames[0].rgb.astype(int) - expected).mean() < 3


def test_rotated_phone_clip_decodes_upright():
    """tests/data/rotated90.mp4: 64x48 stored, display matrix 90 (written by ffmpeg -metadata:s:v rotate=90).
    Debian's ffmpeg 5.1, which auto-rotates, showed it 48x64 with the red marker at the bottom-left."""
    src = DATA / "rotated90.mp4"
    info = probe(src)
    assert (info.rotation, info.width, info.height) == (90, 48, 64)
    frames = list(read_frames(src))
    assert len(frames) == 6 and frames[0].rgb.shape == (64, 48, 3)
    assert corner_with_marker(frames[0].rgb) == "bottom-left"


@pytest.mark.parametrize("rotation, corner", [(90, "bottom-left"), (180, "bottom-right"), (270, "top-right")])
def test_rotation_written_by_pyav_is_applied(tmp_path, rotation, corner):
    src = make_video(tmp_path / "r.mp4", frames=2, size=(64, 48), audio=False, rotation=rotation)
    info = probe(src)
    assert info.rotation == rotation
    rgb = next(read_frames(src)).rgb
    assert rgb.shape[:2] == (info.height, info.width) == ((64, 48) if rotation != 180 else (48, 64))
    assert corner_with_marker(rgb) == corner


def test_rotated_input_gives_upright_output_with_audio(tmp_path):
    out = transcode(DATA / "rotated90.mp4", tmp_path / "out.mp4")
    info = probe(out)
    assert (info.width, info.height, info.rotation, info.frame_count) == (48, 64, 0, 6)
    assert corner_with_marker(decode_rgb(out)[0]) == "bottom-left"
    assert audio_info(out)["packets"] == audio_info(DATA / "rotated90.mp4")["packets"]


# ---- writing --------------------------------------------------------------------------------------------------

def test_round_trip_keeps_count_fps_duration_and_copies_audio(clip, tmp_path):
    out = transcode(clip, tmp_path / "out.mp4")
    assert count_frames(out) == 24 and video_fps(out) == pytest.approx(24)
    assert video_duration(out) == pytest.approx(1.0, abs=1e-3)
    source, copied = audio_info(clip), audio_info(out)
    assert copied["codec"] == "aac" and copied["packets"] == source["packets"]  # remuxed, not re-encoded
    assert abs(copied["duration"] - video_duration(out)) <= FRAME
    for a, b in zip(decode_rgb(clip), decode_rgb(out)):
        assert np.abs(a.astype(int) - b).mean() < 3
    with av.open(str(out)) as container:  # what browsers want: H.264 4:2:0, tagged BT.709, index first
        stream = container.streams.video[0]
        assert (stream.codec_context.name, stream.codec_context.pix_fmt) == ("h264", "yuv420p")
        assert stream.codec_context.colorspace == 1
    head = out.read_bytes()[:4096]
    assert head.find(b"moov") < head.find(b"mdat") or b"mdat" not in head


def test_the_encoder_runs_superfast_with_the_macroblock_tree(clip, tmp_path):
    """x264 writes the options it ran with into the stream: the speed preset chosen by measured speed, and the rate
    control superfast alone turns off (without it the files were 1.5-1.65x larger, docs/host.md); a caller's own
    preset gets no options of ours."""
    out = transcode(clip, tmp_path / "out.mp4")
    used = out.read_bytes()
    assert b"x264 - core" in used
    assert b" mbtree=1 " in used and b" rc_lookahead=10 " in used and b" subme=1 " in used  # superfast's search
    with VideoSink(tmp_path / "slow.mp4", fps=24, preset="slow") as sink:
        for frame in decode_rgb(clip)[:3]:
            sink.write(frame)
    slow = (tmp_path / "slow.mp4").read_bytes()
    assert b" rc_lookahead=50 " in slow and b" subme=8 " in slow  # x264's own slow preset, untouched


def test_cut_at_max_duration_cuts_audio_too(clip, tmp_path):
    out = transcode(clip, tmp_path / "cut.mp4", read={"max_duration": 0.5}, audio_until=0.5)
    assert count_frames(out) == 12
    assert video_duration(out) == pytest.approx(0.5, abs=1e-3)
    assert abs(audio_info(out)["duration"] - 0.5) <= FRAME


def test_stride_output_lasts_as_long_as_the_input(clip, tmp_path):
    out = transcode(clip, tmp_path / "stride.mp4", read={"stride": 3}, fps=8)
    assert count_frames(out) == 8 and video_fps(out) == pytest.approx(8)
    assert frame_times(out) == pytest.approx([i * 3 / FPS for i in range(8)], abs=1e-3)
    assert video_duration(out) == pytest.approx(1.0, abs=1e-3)


def test_variable_frame_rate_timing_is_kept(tmp_path):
    src = make_video(tmp_path / "vfr.mp4", vfr=True)
    times_in = frame_times(src)
    assert len({round(b - a, 3) for a, b in zip(times_in, times_in[1:])}) >= 3  # really irregular
    out = transcode(src, tmp_path / "out.mp4")
    assert frame_times(out) == pytest.approx(times_in, abs=1e-3)


def test_audio_is_interleaved_with_the_video(tmp_path):
    """Audio goes in as the video is written, so the file alternates; past FFmpeg's 10 s interleaving buffer a
    writer that added all audio at the end would leave a long run of video with no sound to stream along."""
    src = make_video(tmp_path / "long.mp4", frames=55, fps=5, size=(32, 32))  # 11 s
    out = transcode(src, tmp_path / "out.mp4")
    with av.open(str(out)) as container:
        times = [float(p.dts * p.time_base) for p in container.demux() if p.size]  # decode order
    lag = max(max(times[: i + 1]) - t for i, t in enumerate(times))  # how far a packet comes after later ones
    assert lag < 0.5
    assert abs(audio_info(out)["duration"] - 11.0) <= 1 / 5


def test_no_audio_input_gives_silent_output(tmp_path):
    src = make_video(tmp_path / "silent.mp4", frames=6, audio=False)
    out = transcode(src, tmp_path / "out.mp4")
    assert audio_info(out) is None and not probe(out).has_audio and count_frames(out) == 6


def test_odd_dimensions_are_padded_to_even(tmp_path):
    assert even_size(359, 641) == (360, 642) and even_size(360, 642) == (360, 642)
    images = [pattern_frame(i, 3, 641, 359) for i in range(3)]
    with VideoSink(tmp_path / "odd.mp4", fps=FPS) as sink:
        for image in images:
            sink.write(image)
    info = probe(tmp_path / "odd.mp4")
    assert (info.width, info.height, info.frame_count) == (642, 360, 3)
    decoded = decode_rgb(tmp_path / "odd.mp4")[0].astype(int)
    assert np.abs(decoded[:359, :641] - images[0]).mean() < 3
    assert np.abs(decoded[:, 641] - decoded[:, 640]).mean() < 3 and np.abs(decoded[359] - decoded[358]).mean() < 3


def test_vp9_alpha_round_trip_keeps_transparency(clip, tmp_path):
    rgba = np.zeros((48, 64, 4), np.uint8)
    rgba[..., :3] = (200, 60, 20)
    rgba[8:40, 16:48, 3] = 255   # opaque box
    rgba[:, :8, 3] = 128         # half-transparent strip; the rest is fully transparent
    out = tmp_path / "alpha.webm"
    with VideoSink(out, fps=FPS, codec="vp9-alpha", audio_from=clip) as sink:
        for _ in range(3):
            sink.write(rgba)
    assert probe(out).video_codec == "vp9"
    frames = decode_rgba_vp9(out)
    assert len(frames) == 3
    alpha = frames[0][..., 3].astype(int)
    assert abs(alpha[24, 32] - 255) <= 8 and abs(alpha[24, 4] - 128) <= 8 and alpha[2, 60] <= 8
    assert np.abs(frames[0][24, 32, :3].astype(int) - (200, 60, 20)).max() <= 8
    # AAC cannot go in WebM: re-encoded to Opus, cut to the source's length
    assert audio_info(out)["codec"] == "opus" and abs(audio_info(out)["duration"] - 1.0) <= FRAME


@pytest.mark.parametrize("codec, dtype", [("ffv1-gray", np.uint8), ("ffv1-gray16", np.uint16)])
def test_ffv1_gray_round_trips_bit_exact(tmp_path, codec, dtype):
    rng = np.random.default_rng(0)
    images = [rng.integers(0, np.iinfo(dtype).max, (37, 51), dtype=dtype, endpoint=True) for _ in range(3)]
    out = tmp_path / "ids.mkv"
    with VideoSink(out, fps=10, codec=codec) as sink:
        for image in images:
            sink.write(image)
    with av.open(str(out)) as container:
        decoded = [f.to_ndarray() for f in container.decode(video=0)]
    assert len(decoded) == 3
    for a, b in zip(images, decoded):
        assert b.dtype == dtype and np.array_equal(a, b)


def test_failed_run_leaves_no_file(clip, tmp_path):
    target = tmp_path / "out.mp4"
    with pytest.raises(RuntimeError, match="cancelled"):
        with VideoSink(target, fps=FPS, audio_from=clip) as sink:
            sink.write(np.zeros((48, 64, 3), np.uint8))
            sink.write(np.zeros((48, 64, 3), np.uint8))
            assert sink.frames_written == 2
            partial = [p.name for p in tmp_path.iterdir()]
            assert len(partial) == 1 and partial[0].startswith(".out.") and partial[0].endswith(".partial.mp4")
            raise RuntimeError("cancelled")
    assert list(tmp_path.iterdir()) == []

    target.write_bytes(b"previous result")  # an abort leaves an earlier file at `path` as it was
    sink = VideoSink(target, fps=FPS)
    sink.write(np.zeros((48, 64, 3), np.uint8))
    sink.abort()
    assert [p.name for p in tmp_path.iterdir()] == ["out.mp4"] and target.read_bytes() == b"previous result"


def test_sink_refuses_wrong_input(tmp_path):
    with pytest.raises(ValueError, match=".mp4"):
        VideoSink(tmp_path / "out.webm", fps=FPS)
    with pytest.raises(ValueError, match="codec must be one of"):
        VideoSink(tmp_path / "out.mp4", fps=FPS, codec="gif")
    with pytest.raises(ValueError, match="uint16"):
        with VideoSink(tmp_path / "d.mkv", fps=FPS, codec="ffv1-gray16") as sink:
            sink.write(np.zeros((8, 8), np.uint8))
    with pytest.raises(ValueError, match="every frame must be 64x48"):
        with VideoSink(tmp_path / "out.mp4", fps=FPS) as sink:
            sink.write(np.zeros((48, 64, 3), np.uint8))
            sink.write(np.zeros((40, 64, 3), np.uint8))
    with pytest.raises(VideoError, match="No frames"):
        with VideoSink(tmp_path / "out.mp4", fps=FPS):
            pass
    assert list(tmp_path.iterdir()) == []


# ---- bad input ------------------------------------------------------------------------------------------------

def _corrupt(d):
    (d / "x.mp4").write_bytes(np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    return d / "x.mp4"


def _truncated(d):
    data = make_video(d / "full.mp4", frames=12).read_bytes()  # index at the end, as most cameras write it
    (d / "x.mp4").write_bytes(data[: len(data) // 2])
    return d / "x.mp4"


def _empty(d):
    (d / "x.mp4").touch()
    return d / "x.mp4"


def _image(fmt):
    def make(d):
        from PIL import Image

        Image.fromarray(np.zeros((20, 30, 3), np.uint8)).save(d / "x.mp4", format=fmt)
        return d / "x.mp4"
    return make


def _no_decodable_frame(d):
    """A Matroska file whose H.264 track holds only garbage packets: FFmpeg opens it and finds no picture."""
    from fractions import Fraction

    with av.open(str(d / "x.mkv"), "w", format="matroska") as out:
        stream = out.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = 64, 48, "yuv420p"
        for i in range(4):
            packet = av.Packet(bytes(range(200)))
            packet.pts = packet.dts = i
            packet.time_base, packet.stream = Fraction(1, 24), stream
            out.mux(packet)
    return d / "x.mkv"


BAD_INPUTS = {
    "corrupt bytes": (_corrupt, "could not be read as a video"),
    "truncated mp4": (_truncated, "incomplete"),
    "0-byte file": (_empty, "empty"),
    "JPEG renamed .mp4": (_image("JPEG"), "image, not a video"),
    "PNG renamed .mp4": (_image("PNG"), "image, not a video"),
    "audio only": (lambda d: make_audio_only(d / "x.m4a"), "only sound"),
    "no decodable frame": (_no_decodable_frame, "no picture that can be decoded"),
    "missing file": (lambda d: d / "nothere.mp4", "not found"),
}


@pytest.mark.parametrize("case", list(BAD_INPUTS))
def test_bad_input_gives_a_plain_sentence(tmp_path, case):
    make, expected = BAD_INPUTS[case]
    path = make(tmp_path)
    for call in (probe, lambda p: list(read_frames(p))):
        with pytest.raises(VideoError, match=expected) as error:
            call(path)
        message = str(error.value)
        assert isinstance(error.value, ValueError) and message.endswith(".")
        assert "Errno" not in message and "Traceback" not in message and str(tmp_path) not in message


def test_too_big_is_refused(clip):
    with pytest.raises(VideoError, match="more than the 0.001 MB limit"):
        probe(clip, max_bytes=1024)
    assert probe(clip, max_bytes=clip.stat().st_size).frame_count == 24


def test_truncated_file_with_index_first_gives_its_frames_and_a_warning(tmp_path, caplog):
    """PyAV 18's FFmpeg ends the cut stream early, PyAV 17's raises on the damaged packet: the same warning either way."""
    data = make_video(tmp_path / "full.mp4", faststart=True).read_bytes()
    (tmp_path / "cut.mp4").write_bytes(data[: len(data) // 2])
    with caplog.at_level(logging.WARNING, logger="sapiens2_demo.media.video"):
        frames = list(read_frames(tmp_path / "cut.mp4"))
    assert 0 < len(frames) < 24 and [f.index for f in frames] == list(range(len(frames)))
    assert "truncated" in caplog.text

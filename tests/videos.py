"""Small test clips written with PyAV, and read-back helpers (frame count, times, fps, durations, audio).

`make_video` draws a coloured square that moves across a dark background (so frames differ and the top-left
corner is always told apart from the others, which rotation checks rely on), optionally with a 440 Hz sine
audio track of the same duration. Everything here is tiny so tests stay fast.
"""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import av
import numpy as np

AUDIO_RATE = 48_000
MARKER = (255, 0, 0)   # red block always in the stored frame's top-left corner
_CODECS = {  # codec -> (container format, video encoder, pixel format, audio encoder)
    "h264": ("mp4", "libx264", "yuv420p", "aac"),
    "vp9": ("webm", "libvpx-vp9", "yuv420p", "libopus"),
    "mpeg4": ("mp4", "mpeg4", "yuv420p", "aac"),
}


def vfr_times(frames: int, fps: float) -> list[float]:
    """Irregular frame start times in whole milliseconds (gaps cycle 0.5x, 1.5x, 1x, 2x the nominal)."""
    gaps = [0.5, 1.5, 1.0, 2.0]
    times, t = [], 0
    for i in range(frames):
        times.append(t / 1000)
        t += round(1000 * gaps[i % len(gaps)] / fps)
    return times


def pattern_frame(i: int, frames: int, width: int, height: int, pattern: str = "moving") -> np.ndarray:
    """Frame `i` of the test pattern as (H, W, 3) uint8."""
    img = np.zeros((height, width, 3), np.uint8)
    img[..., 2] = np.linspace(40, 120, width, dtype=np.uint8)[None, :]  # horizontal blue ramp
    side = max(2, min(width, height) // 4)
    if pattern == "moving":
        x = round((width - side) * i / max(1, frames - 1))
        y = round((height - side) * i / max(1, frames - 1))
        img[y:y + side, x:x + side] = (40 + (i * 37) % 200, 220, 60)
    elif pattern != "static":
        raise ValueError(f"unknown pattern {pattern!r}")
    m = max(2, min(width, height) // 6)
    img[:m, :m] = MARKER
    return img


def make_video(path, *, frames: int = 24, size: tuple[int, int] = (320, 240), fps: float = 24, audio: bool = True,
               codec: str = "h264", vfr: bool = False, pattern="moving", faststart: bool = False,
               rotation: int = 0) -> Path:
    """Write a clip of `frames` frames of `size` (w, h) and return its path.

    vfr=True stamps the frames with irregular times (see vfr_times) in a 1/1000 s time base. faststart=True puts
    the mp4 index first (so a truncated copy still opens). rotation sets the display matrix (counter-clockwise
    degrees, as `VideoFrame.rotation` reads it back). `pattern`: a pattern_frame name, or frame i's RGB as a function.
    """
    path = Path(path)
    fmt, encoder, pix_fmt, audio_encoder = _CODECS[codec]
    width, height = size
    if encoder == "libx264" and (width % 2 or height % 2):
        raise ValueError(f"libx264 needs even sizes, got {width}x{height}; use codec='vp9' for odd ones")
    rate = Fraction(fps).limit_denominator(1001)
    # CFR: one tick per frame, so times are exact; VFR: whole milliseconds.
    time_base = Fraction(1, 1000) if vfr else 1 / rate
    ticks = [round(t * 1000) for t in vfr_times(frames, fps)] if vfr else list(range(frames))
    duration = float((ticks[-1] + (ticks[-1] - ticks[-2] if vfr and frames > 1 else 1)) * time_base)
    options = {"movflags": "+faststart"} if faststart and fmt == "mp4" else {}
    with av.open(str(path), "w", format=fmt, options=options) as out:
        video = out.add_stream(encoder, rate=rate)
        video.width, video.height, video.pix_fmt = width, height, pix_fmt
        video.codec_context.time_base = time_base
        video.options = {"libx264": {"preset": "ultrafast"},  # test clips: speed over size
                         "libvpx-vp9": {"deadline": "realtime", "cpu-used": "8"}}.get(encoder, {})
        if rotation:
            video.set_display_rotation(rotation)
        astream = None
        if audio:
            astream = out.add_stream(audio_encoder, rate=AUDIO_RATE, layout="mono")
        for i in range(frames):
            picture = pattern(i) if callable(pattern) else pattern_frame(i, frames, width, height, pattern)
            frame = av.VideoFrame.from_ndarray(picture, format="rgb24")
            frame.pts, frame.time_base = ticks[i], time_base
            out.mux(video.encode(frame))
        out.mux(video.encode())
        if astream is not None:
            _write_sine(out, astream, duration)
    return path


def write_frames(path, frames, fps: float = 10) -> Path:
    """Frames (H, W, 3) uint8 to an H.264 mp4, near-lossless (crf 0) so the test's noise is what the model sees."""
    path = Path(path)
    with av.open(str(path), "w", format="mp4") as out:
        stream = out.add_stream("libx264", rate=Fraction(fps))
        stream.width, stream.height, stream.pix_fmt = frames[0].shape[1], frames[0].shape[0], "yuv444p"
        stream.options = {"preset": "ultrafast", "crf": "0"}
        for i, rgb in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts = i
            out.mux(stream.encode(frame))
        out.mux(stream.encode())
    return path


def _write_sine(out, stream, duration: float, hz: float = 440.0) -> None:
    total = round(duration * AUDIO_RATE)
    chunk = 960 if stream.codec_context.name == "libopus" else 1024
    for start in range(0, total, chunk):
        n = min(chunk, total - start)
        t = (start + np.arange(n)) / AUDIO_RATE
        samples = (0.3 * np.sin(2 * np.pi * hz * t)).astype(np.float32)[None, :]
        frame = av.AudioFrame.from_ndarray(samples, format="flt", layout="mono")
        frame.sample_rate, frame.pts, frame.time_base = AUDIO_RATE, start, Fraction(1, AUDIO_RATE)
        out.mux(stream.encode(frame))
    out.mux(stream.encode())


def make_audio_only(path, *, seconds: float = 0.5) -> Path:
    """An .m4a with one AAC track and no video."""
    path = Path(path)
    with av.open(str(path), "w", format="ipod") as out:
        _write_sine(out, out.add_stream("aac", rate=AUDIO_RATE, layout="mono"), seconds)
    return path


# ---- reading back -------------------------------------------------------------------------------------------

def frame_times(path) -> list[float]:
    """Presentation time (s) of every decoded video frame, from the first frame, in display order."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        pts = [f.pts for f in container.decode(stream)]
    return [float((p - pts[0]) * stream.time_base) for p in pts]


def count_frames(path) -> int:
    return len(frame_times(path))


def video_fps(path) -> float:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        return float(stream.average_rate or stream.guessed_rate)


def video_duration(path) -> float:
    """Seconds the video track lasts: last frame's time plus its duration, from the first frame."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = list(container.decode(stream))
    last = frames[-1]
    step = last.duration or (frames[-1].pts - frames[-2].pts if len(frames) > 1 else 0)
    return float((last.pts + step - frames[0].pts) * stream.time_base)


def audio_info(path) -> dict | None:
    """{'codec', 'duration' (decoded samples / rate), 'packets' (bytes of each packet)} or None without audio."""
    with av.open(str(path)) as container:
        if not container.streams.audio:
            return None
        stream = container.streams.audio[0]
        packets = [bytes(p) for p in container.demux(stream) if p.size]
    with av.open(str(path)) as container:
        stream = container.streams.audio[0]
        samples = sum(f.samples for f in container.decode(stream))
        rate = stream.codec_context.sample_rate
    return {"codec": stream.codec_context.name, "duration": samples / rate, "packets": packets}


def audio_duration(path) -> float | None:
    info = audio_info(path)
    return None if info is None else info["duration"]


def decode_rgb(path) -> list[np.ndarray]:
    """Every frame as stored (no rotation applied), (H, W, 3) uint8."""
    with av.open(str(path)) as container:
        return [f.to_ndarray(format="rgb24") for f in container.decode(video=0)]


def decode_rgba_vp9(path) -> list[np.ndarray]:
    """Every frame of a VP9 WebM as (H, W, 4) uint8 with its alpha plane.

    FFmpeg's native vp9 decoder ignores the alpha side channel (frames come out yuv420p); libvpx's decoder
    reads it from the packets' BlockAdditional side data and gives yuva420p.
    """
    with av.open(str(path)) as container:
        decoder = av.CodecContext.create("libvpx-vp9", "r")
        frames = []
        for packet in container.demux(video=0):  # the last, empty packet flushes the decoder
            frames.extend(decoder.decode(packet))
    assert all(f.format.name == "yuva420p" for f in frames), [f.format.name for f in frames]
    return [f.to_ndarray(format="rgba") for f in frames]

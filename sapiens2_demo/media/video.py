"""Video in and out with PyAV: `probe` a user's file, `read_frames` from it, write results with `VideoSink`.

Decisions:
* Frames come out upright (the display matrix's rotation applied, as players do) and as RGB uint8; each keeps
  its source index and presentation time, so a writer can keep the input's timing, variable frame rate too.
* Bad input raises `VideoError` (a ValueError) with one plain sentence: missing, empty, too big, not a media
  file, an image renamed to a video name, audio only, no decodable frame. A file that ends early (a partial
  upload) gives the frames it has and a logged warning, so the user still gets a result.
* `VideoSink` is the one way outputs are written: H.264 yuv420p .mp4 with the index first (browsers play it
  without gradio converting it), VP9 with alpha .webm, and lossless FFV1 .mkv for class ids and 16-bit depth.
  Audio is copied packet by packet from the source (re-encoded only when the container cannot hold the codec)
  and interleaved with the video as it is written. Files appear atomically: a hidden temporary file next to
  the target is renamed at the end, and removed on an error or abort.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np

from ..util import fit_longest_side

__all__ = ["VideoError", "VideoInfo", "Frame", "probe", "read_frames", "VideoSink", "even_size",
           "CODECS", "DEFAULT_CODEC", "DEFAULT_CRF", "DEFAULT_PRESET", "PRESET_PARAMS"]

log = logging.getLogger(__name__)

DEFAULT_CODEC = "h264"
DEFAULT_CRF = 20            # x264/VP9 constant quality: visually lossless for overlays, small files
DEFAULT_PRESET = "superfast"  # x264's speed preset, with PRESET_PARAMS on top
# x264 options on top of a preset: superfast's search with the rate control that superfast turns off (the macroblock
# tree over 10 frames ahead, as veryfast's). On drawn 720p frames of four tasks: 0.56-0.75x veryfast's CPU, files
# 1.06-1.18x its size (superfast alone: 1.51-1.65x), PSNR 0.2-0.6 dB lower at CRF 20 (docs/host.md)
PRESET_PARAMS = {"superfast": "mbtree=1:rc-lookahead=10"}
TIME_BASE = Fraction(1, 90000)  # output tick: 1/90000 s keeps input timing to ~11 us (MPEG's own clock)
_IMAGE_DEMUXERS = ("image2", "gif", "ico", "apng")  # plus every "*_pipe" (jpeg_pipe, png_pipe, webp_pipe ...)
# swscale's threads for a frame's colour conversion (RGB <-> YUV), on one converter kept for a whole video: PyAV makes a
# new converter for every frame it is not given one for, and on a 16-core GPU machine that cost 6.7 ms a 720p frame,
# as much as x264's encode (docs/gpu.md)
SCALE_THREADS = min(os.cpu_count() or 1, 8)


class VideoError(ValueError):
    """The input cannot be used as a video; str(error) is a plain sentence for the user."""


@dataclass
class VideoInfo:
    path: Path
    width: int          # displayed size, i.e. after rotation
    height: int
    fps: float          # average frame rate
    frame_count: int    # exact when the container says, else duration * fps
    duration: float     # seconds
    rotation: int       # 0/90/180/270: counter-clockwise turn applied to stored frames to show them upright
    has_audio: bool
    audio_codec: str | None
    video_codec: str


@dataclass
class Frame:
    index: int          # index in the source, 0-based, before any stride
    time: float         # presentation time in seconds from the first frame
    rgb: np.ndarray     # (H, W, 3) uint8, upright, downscaled when asked


def even_size(h: int, w: int) -> tuple[int, int]:
    """The smallest even (h, w) that holds an h x w image (H.264 4:2:0 needs even sides)."""
    return h + h % 2, w + w % 2


# ---- reading --------------------------------------------------------------------------------------------------

def _megabytes(n: int) -> str:
    return f"{n / 2**20:.{1 if n >= 2**20 else 3}f} MB"


def _open_video(path, max_bytes: int | None = None):
    """(container, video stream) or VideoError saying what is wrong with the file."""
    import av

    if path is None:
        raise VideoError("No video was provided.")
    path = Path(path)
    if not path.is_file():
        raise VideoError(f"The video file {path.name!r} was not found.")
    size = path.stat().st_size
    if size == 0:
        raise VideoError("The video file is empty (0 bytes); the upload may have failed, please try again.")
    if max_bytes is not None and size > max_bytes:
        raise VideoError(f"The video is {_megabytes(size)}, more than the {_megabytes(max_bytes)} limit; "
                         "please upload a shorter or smaller clip.")
    try:
        container = av.open(str(path))
    except av.FFmpegError:
        raise VideoError("This file could not be read as a video: it is damaged, incomplete (for example a partial "
                         "upload) or not a video file.") from None
    fmt = container.format.name
    if fmt in _IMAGE_DEMUXERS or fmt.endswith("_pipe"):
        container.close()
        raise VideoError("This file is an image, not a video; please use the image tabs for it.")
    if not container.streams.video:
        has_audio = bool(container.streams.audio)
        container.close()
        if has_audio:
            raise VideoError("This file has only sound and no picture; please upload a video.")
        raise VideoError("This file has no video track.")
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"  # frame + slice threads: several times faster on 1080p/4K
    return container, stream


def _rotation(frame) -> int:
    """The frame's counter-clockwise display rotation snapped to 0/90/180/270."""
    return (round((frame.rotation or 0) / 90) * 90) % 360


def probe(path, *, max_bytes: int | None = None) -> VideoInfo:
    """What the file holds, after checking that its first frame decodes."""
    container, stream = _open_video(path, max_bytes)
    with container:
        frame = next(_decoded(container, stream, Path(path).name))
        rotation = _rotation(frame)
        width, height = (frame.height, frame.width) if rotation in (90, 270) else (frame.width, frame.height)
        rate = stream.average_rate or stream.guessed_rate or stream.base_rate
        if stream.duration is not None:
            duration = float(stream.duration * stream.time_base)
        elif container.duration is not None:
            duration = container.duration / 1_000_000  # AV_TIME_BASE
        else:
            duration = 0.0
        fps = float(rate) if rate else (stream.frames / duration if stream.frames and duration else 0.0)
        frame_count = stream.frames or max(1, round(duration * fps))
        if not fps:  # neither a rate nor a frame count: assume the common 25 so times stay sensible
            fps = 25.0
        audio = container.streams.audio[0] if container.streams.audio else None
        return VideoInfo(path=Path(path), width=width, height=height, fps=fps, frame_count=frame_count,
                         duration=duration, rotation=rotation, has_audio=audio is not None,
                         audio_codec=audio.codec_context.name if audio is not None else None,
                         video_codec=stream.codec_context.name)


def _decoded(container, stream, name: str):
    """The stream's frames in order; damaged data after the first frame ends it with a warning, not an error."""
    import av

    frames, count = container.decode(stream), 0
    while True:
        try:
            frame = next(frames)
        except StopIteration:
            break
        except av.FFmpegError as error:
            if not count:
                break
            # FFmpeg builds differ in where damaged data ends the stream (an error here, or an early end below)
            log.warning("Stopped reading %s after %d frames: the file looks truncated or damaged (%s).", name, count,
                        error)
            return
        count += 1
        yield frame
    if not count:
        raise VideoError("The video track has no picture that can be decoded; the file may be damaged.")
    if stream.frames and count < stream.frames:
        log.warning("%s ended after %d of its %d frames; the file looks truncated.", name, count, stream.frames)


def read_frames(path, *, stride: int = 1, max_frames: int | None = None, max_duration: float | None = None,
                max_side: int | None = None) -> Iterator[Frame]:
    """Decode in order, keeping every `stride`-th frame, at most `max_frames` of them, and only frames that
    start before `max_duration` seconds; each upright, with its longest side at most `max_side`."""
    if stride < 1 or (max_frames is not None and max_frames < 1):
        raise ValueError(f"stride and max_frames must be >= 1, got {stride} and {max_frames}")
    from av.video.reformatter import VideoReformatter

    container, stream = _open_video(path)
    to_rgb = VideoReformatter()
    with container:
        fps = float(stream.average_rate or stream.guessed_rate or 25)
        first_pts, kept = None, 0
        for index, frame in enumerate(_decoded(container, stream, Path(path).name)):
            if frame.pts is None:
                time = index / fps
            else:
                first_pts = frame.pts if first_pts is None else first_pts
                time = float((frame.pts - first_pts) * stream.time_base)
            if max_duration is not None and time >= max_duration:
                break
            if index % stride:
                continue
            # full-range (JPEG) sources say so in color_range; swscale assumes limited range otherwise
            rgb = to_rgb.reformat(frame, format="rgb24", src_color_range=frame.color_range, threads=SCALE_THREADS)
            rgb = fit_longest_side(rgb.to_ndarray(), max_side)
            k = _rotation(frame) // 90
            yield Frame(index=index, time=time, rgb=np.ascontiguousarray(np.rot90(rgb, k)) if k else rgb)
            kept += 1
            if max_frames is not None and kept >= max_frames:
                break


# ---- writing --------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Codec:
    suffix: str
    muxer: str
    encoder: str
    pix_fmt: str
    input_format: str          # what write() takes, as a PyAV frame format
    audio_copy: frozenset      # audio codecs the container holds as they are
    audio_encoder: str         # what other audio is re-encoded to


_MKV_AUDIO = frozenset({"aac", "mp3", "opus", "vorbis", "flac", "alac", "ac3"})
CODECS = {
    "h264": _Codec(".mp4", "mp4", "libx264", "yuv420p", "rgb24", frozenset({"aac", "mp3", "alac", "opus"}), "aac"),
    "vp9-alpha": _Codec(".webm", "webm", "libvpx-vp9", "yuva420p", "rgba", frozenset({"opus", "vorbis"}),
                        "libopus"),
    "ffv1-gray": _Codec(".mkv", "matroska", "ffv1", "gray", "gray", _MKV_AUDIO, "aac"),
    "ffv1-gray16": _Codec(".mkv", "matroska", "ffv1", "gray16le", "gray16le", _MKV_AUDIO, "aac"),
}
_INPUT_SHAPES = {"rgb24": (3, np.uint8), "rgba": (4, np.uint8), "gray": (None, np.uint8),
                 "gray16le": (None, np.uint16)}


class VideoSink:
    """Write frames (and the source's audio) to `path` atomically; use as a context manager."""

    def __init__(self, path, *, fps: float, codec: str = DEFAULT_CODEC, audio_from=None,
                 audio_until: float | None = None, crf: int = DEFAULT_CRF, preset: str = DEFAULT_PRESET):
        if codec not in CODECS:
            raise ValueError(f"codec must be one of {sorted(CODECS)}, got {codec!r}")
        self.path = Path(path)
        self.spec = CODECS[codec]
        if self.path.suffix.lower() != self.spec.suffix:
            raise ValueError(f"codec {codec!r} writes {self.spec.suffix} files, got {self.path.name!r}")
        if not (fps > 0 and math.isfinite(fps)):
            raise ValueError(f"fps must be a positive number, got {fps}")
        self.fps = fps
        self.audio_from = Path(audio_from) if audio_from is not None else None
        self.audio_until = audio_until
        self.crf, self.preset = crf, preset
        self._out = self._video = self._audio = None
        self._to_yuv = None  # one converter for the whole video (see SCALE_THREADS)
        self._tmp: Path | None = None
        self._size: tuple[int, int] | None = None   # (h, w) of the frames given
        self._frames = 0
        self._last_pts = -1

    @property
    def frames_written(self) -> int:
        return self._frames

    def __enter__(self) -> VideoSink:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    # -- frames

    def write(self, image: np.ndarray, time: float | None = None) -> None:
        """Add one frame shown from `time` seconds (default: frame number / fps)."""
        import av

        image = self._check(image)
        if self._out is None:
            self._start(image.shape[0], image.shape[1])
        if self.spec.encoder == "libx264" and image.shape[:2] != even_size(*image.shape[:2]):
            h, w = image.shape[:2]
            image = np.pad(image, ((0, h % 2), (0, w % 2), (0, 0)), mode="edge")  # repeat last row/column
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format=self.spec.input_format)
        if self.spec.pix_fmt.startswith("yuv"):  # BT.709 limited range, tagged: what browsers assume for HD
            frame = self._to_yuv.reformat(frame, format=self.spec.pix_fmt, dst_colorspace="ITU709",
                                          dst_color_range="MPEG", threads=SCALE_THREADS)
        seconds = self._frames / self.fps if time is None else float(time)
        pts = max(round(seconds / TIME_BASE), self._last_pts + 1)  # strictly increasing, as encoders need
        frame.pts, frame.time_base = pts, TIME_BASE
        frame.duration = round(1 / (self.fps * TIME_BASE))  # what the last frame lasts; others end at the next
        self._out.mux(self._video.encode(frame))
        self._last_pts = pts
        self._frames += 1
        if self._audio is not None:
            self._audio.mux_until(float(pts * TIME_BASE))

    def _check(self, image) -> np.ndarray:
        channels, dtype = _INPUT_SHAPES[self.spec.input_format]
        image = np.asarray(image)
        shape_ok = image.ndim == 2 if channels is None else (image.ndim == 3 and image.shape[2] == channels)
        if not shape_ok or image.dtype != dtype:
            want = "(H, W)" if channels is None else f"(H, W, {channels})"
            raise ValueError(f"{self.spec.encoder} sink takes {want} {np.dtype(dtype).name} images, "
                             f"got {image.shape} {image.dtype}")
        if self._size is not None and image.shape[:2] != self._size:
            raise ValueError(f"every frame must be {self._size[1]}x{self._size[0]}, got "
                             f"{image.shape[1]}x{image.shape[0]}")
        return image

    def _start(self, h: int, w: int) -> None:
        import av
        from av.video.reformatter import VideoReformatter

        self._size = (h, w)
        self._to_yuv = VideoReformatter()
        # hidden, unique (two runs may target one path) and next to `path`, so the final rename is atomic
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.stem}.",
                                   suffix=f".partial{self.path.suffix}")
        os.close(fd)
        self._tmp = Path(tmp)
        options = {"movflags": "+faststart"} if self.spec.muxer == "mp4" else {}
        self._out = av.open(str(self._tmp), "w", format=self.spec.muxer, options=options)
        codec_options = {}
        if self.spec.encoder == "libx264":
            codec_options = {"crf": str(self.crf), "preset": self.preset}
            if self.preset in PRESET_PARAMS:
                codec_options["x264-params"] = PRESET_PARAMS[self.preset]
        elif self.spec.encoder == "libvpx-vp9":  # constant quality; realtime speed, since VP9 is slow otherwise
            codec_options = {"crf": str(self.crf), "b": "0", "deadline": "realtime", "cpu-used": "8",
                             "row-mt": "1"}
        rate = Fraction(self.fps).limit_denominator(1001)
        video = self._out.add_stream(self.spec.encoder, rate=rate, options=codec_options)
        # frame and slice threads (PyAV's default for an encoder is slices only): x264 at 720p 17 against 25 ms a
        # frame on 2 cores; on a GPU machine the encoder, not the model, bounds a video (docs/gpu.md)
        video.thread_type = "AUTO"
        video.height, video.width = even_size(h, w) if self.spec.encoder == "libx264" else (h, w)
        video.pix_fmt = self.spec.pix_fmt
        video.codec_context.time_base = TIME_BASE
        if self.spec.pix_fmt.startswith("yuv"):
            cc = video.codec_context
            cc.colorspace = cc.color_primaries = cc.color_trc = cc.color_range = 1  # BT.709 / limited (MPEG)
        self._video = video
        if self.audio_from is not None:
            from .audio import open_audio_copy

            self._audio = open_audio_copy(self.audio_from, self._out, self.spec, self.audio_until)

    # -- finishing

    def close(self) -> None:
        """Finish the file and move it to `path`; raises VideoError when no frame was written."""
        if self._out is None:
            if self._tmp is None:
                raise VideoError("No frames were written, so no video was made.")
            return  # already closed or aborted
        try:
            self._out.mux(self._video.encode())  # flush the encoder's delayed frames
            if self._audio is not None:
                self._audio.finish()
            self._release()
            os.replace(self._tmp, self.path)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        """Stop and delete the partial file; `path` is left untouched."""
        try:
            self._release()
        except Exception:  # the file goes anyway; a half-written container may not close cleanly
            pass
        if self._tmp is not None:
            self._tmp.unlink(missing_ok=True)

    def _release(self) -> None:
        out, audio = self._out, self._audio
        self._out = self._audio = None
        try:
            if audio is not None:
                audio.close()
        finally:
            if out is not None:
                out.close()

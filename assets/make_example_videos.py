"""Example clips for the Video tab, made from this folder's two public-domain photos.

    astronaut_pan.mp4       4 s, 25 fps, 640x360, silent: a slow pan and zoom out (Ken Burns) across the NASA
                            portrait of astronaut Eileen Collins (astronaut.jpg, public domain, NASA)
    grace_hopper_zoom.mp4   4 s, 24 fps, 480x640, with a quiet 440 Hz tone (AAC): a slow zoom into the US Navy
                            portrait of Rear Admiral Grace Hopper (grace_hopper.jpg, public domain, US Navy)

Each frame is a crop of the still photo, moved and scaled a little each frame (smooth easing) so the person
moves in the frame, encoded as H.264 yuv420p .mp4 with the index first (faststart), each under 1 MB. They are
synthetic: no real motion, just the camera moving over a photo. Regenerate them with

    .venv/bin/python assets/make_example_videos.py
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import av
import cv2
import numpy as np
from PIL import Image

ASSETS = Path(__file__).resolve().parent
AUDIO_RATE = 48_000
TONE_AMPLITUDE = 0.05  # quiet: the tone only shows the audio track is carried through


@dataclass(frozen=True)
class Clip:
    source: str  # photo in assets/
    size: tuple[int, int]  # output (width, height)
    fps: int
    seconds: float
    start: tuple[float, float, float]  # crop (x, y, width) in photo pixels; height follows the output's aspect
    end: tuple[float, float, float]
    tone_hz: float | None = None  # a sine tone track (AAC), or None for a silent clip


CLIPS = {
    # from the shuttle, with the astronaut at the left edge, back to her whole portrait: she moves to the middle
    "astronaut_pan": Clip("astronaut.jpg", (640, 360), 25, 4.0, start=(130, 40, 360), end=(0, 30, 512)),
    # from the whole portrait to head and shoulders
    "grace_hopper_zoom": Clip("grace_hopper.jpg", (480, 640), 24, 4.0, start=(31, 0, 450), end=(120, 40, 330),
                              tone_hz=440.0),
}


def _ease(t: float) -> float:
    """Smoothstep: the camera starts and stops gently instead of jerking."""
    return t * t * (3 - 2 * t)


def _frames(photo: np.ndarray, clip: Clip):
    """The clip's RGB frames: each an affine warp of the photo (sub-pixel, so slow motion does not judder)."""
    width, height = clip.size
    count = round(clip.seconds * clip.fps)
    for i in range(count):
        t = _ease(i / (count - 1))
        x, y, w = (a + (b - a) * t for a, b in zip(clip.start, clip.end, strict=True))
        scale = width / w
        matrix = np.float32([[scale, 0, -x * scale], [0, scale, -y * scale]])
        yield cv2.warpAffine(photo, matrix, (width, height), flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REFLECT)


def _tone(clip: Clip) -> np.ndarray:
    """(1, samples) float32 sine at TONE_AMPLITUDE with 0.2 s fades, as long as the video."""
    samples = round(clip.seconds * AUDIO_RATE)
    t = np.arange(samples) / AUDIO_RATE
    fade = np.clip(np.minimum(t, clip.seconds - t) / 0.2, 0, 1)
    return (TONE_AMPLITUDE * fade * np.sin(2 * np.pi * clip.tone_hz * t)).astype(np.float32)[None]


def make_clip(name: str, output: str | Path | None = None, crf: int = 23) -> Path:
    """Write the clip `name` (a key of CLIPS) to `output` (default: assets/<name>.mp4); returns the path."""
    clip = CLIPS[name]
    output = Path(output) if output else ASSETS / f"{name}.mp4"
    output.parent.mkdir(parents=True, exist_ok=True)
    photo = np.asarray(Image.open(ASSETS / clip.source).convert("RGB"))
    partial = output.with_name(output.name + ".partial")
    with av.open(str(partial), "w", format="mp4", options={"movflags": "+faststart"}) as container:
        video = container.add_stream("libx264", rate=clip.fps)
        video.width, video.height = clip.size
        video.pix_fmt = "yuv420p"
        video.options = {"crf": str(crf), "preset": "slow"}
        audio = container.add_stream("aac", rate=AUDIO_RATE, layout="mono") if clip.tone_hz else None
        tone = _tone(clip) if audio else None
        chunk = 1024  # AAC frame size
        written = 0  # audio samples muxed so far
        for i, rgb in enumerate(_frames(photo, clip)):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, clip.fps)
            container.mux(video.encode(frame))
            while audio is not None and written < tone.shape[1] and written / AUDIO_RATE <= (i + 1) / clip.fps:
                samples = tone[:, written:written + chunk]  # interleave audio with the video as time goes
                piece = av.AudioFrame.from_ndarray(np.ascontiguousarray(samples), format="fltp", layout="mono")
                piece.sample_rate, piece.pts, piece.time_base = AUDIO_RATE, written, Fraction(1, AUDIO_RATE)
                container.mux(audio.encode(piece))
                written += samples.shape[1]
        container.mux(video.encode())
        if audio is not None:
            container.mux(audio.encode())
    partial.replace(output)
    return output


def main() -> None:
    for name in CLIPS:
        path = make_clip(name)
        print(f"{path.name}: {path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()

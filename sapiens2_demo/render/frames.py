"""Annotators for moving pictures (video, webcam) and the grid of every task: each takes its options once and
then `annotate(frame, result)` per frame, like the image annotators.

`SteadyDepthAnnotator` keeps what must stay steady from frame to frame: the depth colour scale follows the
per-frame bounds slowly (an exponential moving average), so the colours do not flicker.
"""

from __future__ import annotations

import cv2
import numpy as np

from ..results import DrawnFrame
from .depth import DepthAnnotator, DepthBounds, attach_colorbar, depth_bounds
from .skeleton import SkeletonAnnotator

DEPTH_SMOOTHING = 0.2  # weight of the new frame's bounds in the running colour scale


def picture(annotator, frame: np.ndarray, result) -> np.ndarray:
    """A frame's picture: drawn already where the model ran (a DrawnFrame, `TaskSpec.draw`), or drawn here."""
    return result.image if isinstance(result, DrawnFrame) else annotator.annotate(frame, result)


class PoseAnnotator:
    """SkeletonAnnotator with its drawing options fixed at construction."""

    def __init__(self, keypoint_threshold: float = 0.3, show_face: bool = True, show_boxes: bool = True):
        self.skeleton = SkeletonAnnotator()
        self.options = dict(keypoint_threshold=keypoint_threshold, show_face=show_face, show_boxes=show_boxes)

    def annotate(self, frame: np.ndarray, result) -> np.ndarray:
        return self.skeleton.annotate(frame, result, **self.options)


class SteadyDepthAnnotator:
    """`colour_bar`: each picture with the colour scale in metres of its frame on the right (the image tab's bar),
    so the video is wider by the bar."""

    def __init__(self, colour_bar: bool = False):
        self.depth = DepthAnnotator()
        self.bounds: DepthBounds | None = None
        self.device_bounds = None  # drawing on the device (render/on_device.py): the same scale, kept there
        self.colour_bar = bool(colour_bar)

    def follow(self, new: DepthBounds) -> DepthBounds:
        """The running colour scale once a frame whose own bounds are `new` is drawn."""
        if self.bounds is None:
            self.bounds = new
        else:
            a = DEPTH_SMOOTHING
            self.bounds = DepthBounds(near=(1 - a) * self.bounds.near + a * new.near,
                                      far=(1 - a) * self.bounds.far + a * new.far)
        return self.bounds

    @property
    def state(self) -> DepthBounds | None:
        """What the next frame's drawing starts from (carried across GPU calls when drawn on the device)."""
        return self.bounds

    @state.setter
    def state(self, bounds: DepthBounds | None) -> None:
        self.bounds, self.device_bounds = bounds, None

    def annotate(self, frame: np.ndarray, result) -> np.ndarray:
        bounds = self.follow(depth_bounds(result, result.mask))
        return self.with_bar(self.depth.annotate(frame, result, bounds=bounds), bounds)

    def with_bar(self, picture: np.ndarray, bounds: DepthBounds) -> np.ndarray:
        """The picture, with the scale of `bounds` beside it when asked (pictures drawn on the device too)."""
        return attach_colorbar(picture, bounds) if self.colour_bar else picture


def grid(frame: np.ndarray, tiles: list[tuple[str, np.ndarray]]) -> np.ndarray:
    """The input and up to five pictures as a 2 x 3 grid of half-size tiles, each titled (after the downscale,
    so a title is readable at the grid's size)."""
    h, w = frame.shape[:2]
    th, tw = max(2, h // 2), max(2, w // 2)
    tiles = [_titled(cv2.resize(np.ascontiguousarray(t[..., :3]), (tw, th), interpolation=cv2.INTER_AREA), title)
             for title, t in [("Input", frame), *tiles]]
    tiles += [np.zeros((th, tw, 3), np.uint8)] * (6 - len(tiles))
    return np.vstack([np.hstack(tiles[:3]), np.hstack(tiles[3:6])])


def _titled(image: np.ndarray, title: str) -> np.ndarray:
    out = np.ascontiguousarray(image[..., :3]).copy()
    scale = max(min(out.shape[:2]) / 200.0, 0.5)  # ~1/9 of a 180 px tile's height (a 640x360 clip's grid)
    thickness = max(1, round(scale * 2))
    cv2.putText(out, title, (8, int(24 * scale) + 4), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), thickness + 2,
                cv2.LINE_AA)
    cv2.putText(out, title, (8, int(24 * scale) + 4), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), thickness,
                cv2.LINE_AA)
    return out

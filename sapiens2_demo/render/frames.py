"""Per-frame rendering for moving pictures (video, webcam): one `FrameRenderer` per clip and task.

It wraps the image annotators and keeps what must stay steady from frame to frame: the depth colour scale
follows the per-frame bounds slowly (an exponential moving average), so the colours do not flicker.
"""

from __future__ import annotations

import cv2
import numpy as np

from .depth import DepthAnnotator, DepthBounds, depth_bounds
from .matting import MattingAnnotator
from .normals import NormalsAnnotator
from .parts import PartsAnnotator
from .skeleton import SkeletonAnnotator

GRID_TITLES = {"input": "Input", "pose": "Pose", "seg": "Body parts", "normal": "Normals", "pointmap": "Depth",
               "matting": "Matting"}
DEPTH_SMOOTHING = 0.2  # weight of the new frame's bounds in the running colour scale


class FrameRenderer:
    def __init__(self, task: str, *, keypoint_threshold: float = 0.3, show_face: bool = True,
                 show_boxes: bool = True, opacity: float = 0.5, normals_background: str = "black",
                 matting_background: str = "colour", colour: str = "#00b140",
                 background_image: np.ndarray | None = None):
        self.task = task
        self.pose_options = dict(keypoint_threshold=keypoint_threshold, show_face=show_face, show_boxes=show_boxes)
        self.skeleton = SkeletonAnnotator()
        self.parts = PartsAnnotator(opacity=opacity)
        self.normals = NormalsAnnotator(background=normals_background)
        self.depth = DepthAnnotator()
        # a video has no alpha: "transparent" shows the cut-out over grey here (the WebM export keeps the alpha)
        mode = "colour" if matting_background == "transparent" else matting_background
        self.matting = MattingAnnotator(background=mode, colour=colour if mode == matting_background else "#808080",
                                        image=background_image)
        self.bounds: DepthBounds | None = None

    def render(self, frame: np.ndarray, result, task: str | None = None) -> np.ndarray:
        """The RGB uint8 picture of `result` for `frame` (same size as the frame)."""
        task = task or self.task
        if task == "pose":
            return self.skeleton.annotate(frame, result, **self.pose_options)
        if task == "seg":
            return self.parts.annotate(frame, result)
        if task == "normal":
            return self.normals.annotate(frame, result)
        if task == "pointmap":
            return self.depth.annotate(frame, result, bounds=self._steady_bounds(result))
        if task == "matting":
            return self.matting.annotate(frame, result)
        raise ValueError(f"Cannot render task {task!r}")

    def render_grid(self, frame: np.ndarray, results: dict[str, object]) -> np.ndarray:
        """All tasks as a 2 x 3 grid of half-size tiles (input first), each titled."""
        tiles = [_titled(frame, GRID_TITLES["input"])]
        tiles += [_titled(self.render(frame, result, task), GRID_TITLES[task]) for task, result in results.items()]
        h, w = frame.shape[:2]
        th, tw = max(2, h // 2), max(2, w // 2)
        tiles = [cv2.resize(t, (tw, th), interpolation=cv2.INTER_AREA) for t in tiles]
        tiles += [np.zeros((th, tw, 3), np.uint8)] * (6 - len(tiles))
        return np.vstack([np.hstack(tiles[:3]), np.hstack(tiles[3:6])])

    def _steady_bounds(self, result) -> DepthBounds:
        new = depth_bounds(result, result.mask)
        if self.bounds is None:
            self.bounds = new
        else:
            a = DEPTH_SMOOTHING
            self.bounds = DepthBounds(near=(1 - a) * self.bounds.near + a * new.near,
                                      far=(1 - a) * self.bounds.far + a * new.far)
        return self.bounds


def _titled(image: np.ndarray, title: str) -> np.ndarray:
    out = np.ascontiguousarray(image[..., :3]).copy()
    scale = max(min(out.shape[:2]) / 400.0, 0.4)
    thickness = max(1, round(scale * 2))
    cv2.putText(out, title, (8, int(24 * scale) + 4), cv2.FONT_HERSHEY_SIMPLEX, scale, (0, 0, 0), thickness + 2,
                cv2.LINE_AA)
    cv2.putText(out, title, (8, int(24 * scale) + 4), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), thickness,
                cv2.LINE_AA)
    return out

"""Person ids across video frames: ultralytics' ByteTrack (or BoT-SORT without ReID) fed with our detections.

One PersonTracker per video, so videos processed side by side never share tracker state. (The detector's
own `YOLO.track(persist=True)` would keep that state on the shared, cached detector model.)
"""

from __future__ import annotations

import numpy as np

TRACK_METHODS = ("bytetrack", "botsort")
REFERENCE_FPS = 30.0  # the frame rate ultralytics' track_buffer (in frames) is written for


class TrackingError(ValueError):
    """Bad tracker settings or detections, said in a plain sentence."""


class PersonTracker:
    """Stable person ids for one video.

    `update(boxes_xyxy, scores, image_hw)` takes one frame's detections (any order) and returns an int64 id
    per box, aligned with the input rows; -1 for a detection the tracker has not confirmed yet (a new
    person is confirmed on their second frame, except on the video's first frame). Keyword `overrides`
    replace entries of ultralytics' `<method>.yaml` (e.g. `match_thresh=0.7`, `track_buffer=60`).
    """

    def __init__(self, frame_rate: float, method: str = "bytetrack", **overrides):
        from ultralytics.trackers.bot_sort import BOTSORT
        from ultralytics.trackers.byte_tracker import BYTETracker  # imports lap (a requirement), never pip
        from ultralytics.utils import YAML, IterableSimpleNamespace
        from ultralytics.utils.checks import check_yaml

        if not (np.isfinite(frame_rate) and frame_rate > 0):
            raise TrackingError(f"Frame rate must be a positive number, got {frame_rate}.")
        if method not in TRACK_METHODS:
            raise TrackingError(f"Unknown tracking method {method!r}; choose one of {', '.join(TRACK_METHODS)}.")
        cfg = YAML.load(check_yaml(f"{method}.yaml"))  # ultralytics' packaged defaults
        unknown = sorted(set(overrides) - set(cfg))
        if unknown:
            raise TrackingError(f"Unknown {method} setting(s) {', '.join(unknown)}; known: {', '.join(cfg)}.")
        # Our detector has already kept only boxes above the user's detection threshold, so every box is a
        # real detection: put them all in ByteTrack's first (high-score) stage and let each start a track.
        cfg["track_high_thresh"] = 0.0
        cfg["new_track_thresh"] = 0.0
        # With every box in the first stage, fusing the score into the cost (1 - IoU * score <= match_thresh)
        # would make a 0.3-score person need IoU >= 0.67 with their track to keep it; plain IoU instead.
        cfg["fuse_score"] = False
        # Keep lost tracks for the same time (~1 s) at any frame rate; the yaml counts frames at 30 fps.
        cfg["track_buffer"] = max(1, round(cfg["track_buffer"] * frame_rate / REFERENCE_FPS))
        if method == "botsort":
            cfg["with_reid"] = False  # no ReID model: nothing to download, nothing to run
            cfg["gmc_method"] = "none"  # camera-motion compensation needs the frame, which we do not pass
        cfg.update(overrides)
        self.frame_rate = float(frame_rate)
        self.method = method
        self.args = IterableSimpleNamespace(**cfg)
        self._tracker = (BYTETracker if method == "bytetrack" else BOTSORT)(args=self.args)

    @property
    def frame_count(self) -> int:
        """Frames seen so far (with or without detections)."""
        return int(self._tracker.frame_id)

    def update(self, boxes_xyxy: np.ndarray, scores: np.ndarray, image_hw: tuple[int, int]) -> np.ndarray:
        from ultralytics.engine.results import Boxes

        boxes = np.asarray(boxes_xyxy, dtype=np.float32)
        scores = np.asarray(scores, dtype=np.float32)
        if boxes.size == 0:
            boxes = boxes.reshape(0, 4)
        if boxes.ndim != 2 or boxes.shape[1] != 4:
            raise TrackingError(f"Boxes must have shape (N, 4) as x1 y1 x2 y2, got {boxes.shape}.")
        if scores.shape != (len(boxes),):
            raise TrackingError(f"Expected {len(boxes)} scores, one per box, got shape {scores.shape}.")
        if len(image_hw) != 2 or min(image_hw) <= 0:
            raise TrackingError(f"Image size must be (height, width) in pixels, got {image_hw}.")

        track_ids = np.full(len(boxes), -1, dtype=np.int64)
        # Feed only boxes the tracker can use, so its detection indices are plain row numbers of what it got.
        usable = (np.isfinite(boxes).all(axis=1) & np.isfinite(scores)
                  & (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1]))
        fed = np.flatnonzero(usable)
        detections = np.column_stack([boxes[fed], scores[fed], np.zeros(len(fed), np.float32)])  # class 0
        tracks = self._tracker.update(Boxes(detections, tuple(int(v) for v in image_hw)), None)
        if len(tracks):
            # Rows are [x1, y1, x2, y2, track_id, score, cls, detection index], confirmed tracks only.
            track_ids[fed[tracks[:, -1].astype(np.int64)]] = tracks[:, 4].astype(np.int64)
        return track_ids

    def reset(self) -> None:
        """Forget every track (e.g. at a scene cut); ids start again from 1."""
        self._tracker.reset()

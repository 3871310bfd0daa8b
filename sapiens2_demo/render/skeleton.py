"""Draws a PoseResult: skeleton links, then keypoint circles, then person boxes and numbers (cv2, RGB)."""

from __future__ import annotations

import cv2
import numpy as np

from ..pose.meta import DEFAULT_KEYPOINT_THRESHOLD, FACE_START, keypoint_meta
from ..results import PoseResult

_SHIFT = 4  # cv2 fixed-point bits: sub-pixel positions for anti-aliased drawing
_ONE = 1 << _SHIFT
_LIMIT = 1 << 15  # far-off coordinates are skipped (cv2 takes int32, and they would not show anyway)
BOX_COLOR = (255, 255, 255)
LABEL_TEXT = (0, 0, 0)


class SkeletonAnnotator:
    """Reference look: coloured links (the face has none), filled circles, both only where scores pass.

    Sizes scale with the image so a 4K photo and a 512 px one look alike: the unit is min(H, W) / 512.
    Face keypoints (70-307, dense) get smaller dots than the body so they do not blot out the face.
    """

    def __init__(self):
        meta = keypoint_meta()
        self.links = np.asarray(meta["skeleton_links"], dtype=np.int64)
        self.link_pairs = [tuple(pair) for pair in self.links.tolist()]
        self.link_colors = [tuple(int(c) for c in color) for color in meta["skeleton_link_colors"]]
        self.keypoint_colors = [tuple(int(c) for c in color) for color in meta["keypoint_colors"]]

    def annotate(self, image: np.ndarray, result: PoseResult, keypoint_threshold: float = DEFAULT_KEYPOINT_THRESHOLD,
                 show_face: bool = True, show_boxes: bool = True) -> np.ndarray:
        """A new RGB uint8 image with every person drawn on a copy of `image`."""
        canvas = np.ascontiguousarray(np.asarray(image, dtype=np.uint8)[..., :3]).copy()
        height, width = canvas.shape[:2]
        unit = max(min(height, width) / 512.0, 0.5)
        thickness = max(1, round(2 * unit))
        radius = max(1, round(3 * unit))
        face_radius = max(1, round(1.5 * unit))
        num_keypoints = result.keypoints.shape[1] if result.keypoints.ndim == 3 else 0
        for person in range(result.num_people):
            points = np.asarray(result.keypoints[person], dtype=np.float64)
            scores = np.asarray(result.keypoint_scores[person], dtype=np.float64)
            drawable = (scores >= keypoint_threshold) & np.isfinite(points).all(axis=1) \
                & (np.abs(points) < _LIMIT / _ONE).all(axis=1)
            if not show_face:
                drawable[FACE_START:] = False
            # Python ints and tuples made once; points not drawn are 0 (a cast of inf or NaN to int is undefined).
            # (indexing numpy per link and per keypoint cost more than the drawing)
            fixed = [tuple(xy) for xy in np.round(np.where(drawable[:, None], points, 0.0) * _ONE).astype(np.int64).tolist()]
            shown = drawable.tolist()
            for (a, b), color in zip(self.link_pairs, self.link_colors):  # links first, circles on top
                if a < num_keypoints and b < num_keypoints and shown[a] and shown[b]:
                    cv2.line(canvas, fixed[a], fixed[b], color, thickness, cv2.LINE_AA, _SHIFT)
            for k in np.flatnonzero(drawable).tolist():
                r = face_radius if k >= FACE_START else radius
                cv2.circle(canvas, fixed[k], r * _ONE, self.keypoint_colors[k], -1, cv2.LINE_AA, _SHIFT)
        if show_boxes:
            ids = result.track_ids
            for person in range(result.num_people):
                tracked = ids is not None and person < len(ids) and ids[person] >= 0
                label = f"id {int(ids[person])}" if tracked else f"#{person + 1}"  # video: stable track ids
                self._box(canvas, result.boxes[person], label, thickness, unit)
        return canvas

    def _box(self, canvas: np.ndarray, box: np.ndarray, label: str, thickness: int, unit: float) -> None:
        if not np.isfinite(box).all():
            return
        x1, y1, x2, y2 = (int(round(float(v))) for v in box)
        cv2.rectangle(canvas, (x1, y1), (x2, y2), BOX_COLOR, thickness, cv2.LINE_AA)
        scale = 0.5 * unit
        font_thickness = max(1, round(unit))
        (text_w, text_h), baseline = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, scale, font_thickness)
        top = max(y1, text_h + baseline + 2)  # keep the tag inside the image for boxes at the top edge
        cv2.rectangle(canvas, (x1, top - text_h - baseline - 2), (x1 + text_w + 4, top), BOX_COLOR, -1)
        cv2.putText(canvas, label, (x1 + 2, top - baseline - 1), cv2.FONT_HERSHEY_SIMPLEX, scale, LABEL_TEXT,
                    font_thickness, cv2.LINE_AA)

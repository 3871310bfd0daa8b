"""COCO-WholeBody (133 keypoints) export of a PoseResult.

Order: body 17 (COCO), feet 6, face 68, left hand 21, right hand 21. Body and hands reuse the COCO-17 and
OpenPose-hand mappings of export/pose_formats.py; the feet are looked up by name in the 308 set. The 308 set's 238 face
points have no published correspondence to the 68 iBUG points, so the face is written as not labelled
([0, 0, 0] triples, face_valid false), like COCO-WholeBody does for a face nobody annotated.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..pose.meta import DEFAULT_KEYPOINT_THRESHOLD, name_index
from ..results import PoseResult
from .pose_formats import COCO17_NAMES, _num, coco17_indices, hand21_indices, to_coco17

FOOT_NAMES = ["left_big_toe", "left_small_toe", "left_heel", "right_big_toe", "right_small_toe", "right_heel"]
NUM_FACE = 68
FACE_INDEX = -1  # "no source keypoint": written as [0, 0, 0]
_FINGERS = ["thumb", "forefinger", "middle_finger", "ring_finger", "pinky_finger"]


def _hand_names(side: str) -> list[str]:
    return [f"{side}_hand_root"] + [f"{side}_{finger}{joint}" for finger in _FINGERS for joint in range(1, 5)]


# The 133 names as COCO-WholeBody lists them (COCO_WHOLEBODY.md), part by part in the standard order.
PART_NAMES = {
    "keypoints": COCO17_NAMES,
    "foot_kpts": FOOT_NAMES,
    "face_kpts": [f"face-{i}" for i in range(NUM_FACE)],
    "lefthand_kpts": _hand_names("left"),
    "righthand_kpts": _hand_names("right"),
}


def _part_indices() -> dict[str, list[int]]:
    index = name_index()
    return {
        "keypoints": coco17_indices(),
        "foot_kpts": [index[name] for name in FOOT_NAMES],
        "face_kpts": [FACE_INDEX] * NUM_FACE,
        "lefthand_kpts": hand21_indices("left"),  # wrist, then each finger from the palm out (OpenPose's rule)
        "righthand_kpts": hand21_indices("right"),
    }


PART_INDICES = _part_indices()
WHOLEBODY_INDICES: list[int] = [i for indices in PART_INDICES.values() for i in indices]
WHOLEBODY_NAMES: list[str] = [name for names in PART_NAMES.values() for name in names]
if len(WHOLEBODY_INDICES) != 133 or len(WHOLEBODY_NAMES) != 133:
    raise RuntimeError("COCO-WholeBody has 133 keypoints")

# COCO-WholeBody's per-part flags and boxes (x, y, w, h); the body's are COCO's own bbox / num_keypoints.
_PART_FLAGS = {"foot_kpts": ("foot_valid", None), "face_kpts": ("face_valid", "face_box"),
               "lefthand_kpts": ("lefthand_valid", "lefthand_box"),
               "righthand_kpts": ("righthand_valid", "righthand_box")}


def _part_fields(points: np.ndarray, scores: np.ndarray, indices: list[int],
                 threshold: float) -> tuple[list, bool, list]:
    """-> (flat x, y, v triples, valid, box) for one person's part.

    Visibility as in to_coco17: v=2 where the score >= threshold, else v=1 with the predicted location kept.
    Points with no source (the face) are [0, 0, 0], COCO's "not labelled". The part is valid when any of
    its points is confident, and its box is the tight box of those points ([0, 0, 0, 0] otherwise).
    """
    flat, confident = [], []
    for i in indices:
        if i == FACE_INDEX:
            flat += [0, 0, 0]
            continue
        (x, y), score = points[i], scores[i]
        visible = score >= threshold
        flat += [_num(x, 3), _num(y, 3), 2 if visible else 1]
        if visible and np.isfinite(points[i]).all():
            confident.append(points[i])
    if not confident:
        return flat, False, [0, 0, 0, 0]
    low, high = np.min(confident, axis=0), np.max(confident, axis=0)
    return flat, True, [_num(low[0], 2), _num(low[1], 2), _num(high[0] - low[0], 2), _num(high[1] - low[1], 2)]


def to_coco_wholebody(result: PoseResult, keypoint_threshold: float = DEFAULT_KEYPOINT_THRESHOLD) -> dict:
    """A COCO-WholeBody keypoints file: to_coco17's document (same images, categories, body fields, bbox,
    score and num_keypoints, which counts the body's visible points as in COCO) plus, per person, foot_kpts,
    face_kpts, lefthand_kpts, righthand_kpts, the *_valid flags and the face/hand boxes."""
    document = to_coco17(result, keypoint_threshold)
    document["categories"][0]["wholebody_keypoints"] = WHOLEBODY_NAMES  # the 133 names, for readers
    for i, annotation in enumerate(document["annotations"]):
        points, scores = np.asarray(result.keypoints[i]), np.asarray(result.keypoint_scores[i])
        for part, (valid_key, box_key) in _PART_FLAGS.items():
            flat, valid, box = _part_fields(points, scores, PART_INDICES[part], keypoint_threshold)
            annotation[part] = flat
            annotation[valid_key] = valid
            if box_key:
                annotation[box_key] = box
    return document


def write_coco_wholebody(result: PoseResult, folder, keypoint_threshold: float = DEFAULT_KEYPOINT_THRESHOLD,
                         name: str = "pose_coco_wholebody.json") -> Path:
    """Write the document into `folder`; a reader never sees half a file (written aside, then renamed)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(to_coco_wholebody(result, keypoint_threshold), allow_nan=False,
                                  separators=(",", ":")))
    os.replace(partial, path)
    return path

"""PoseResult exports: the official Sapiens2 JSON, COCO-17 and OpenPose (BODY_25 + hands), and readers.

Index mappings into the 308-keypoint set are derived from keypoint names (keypoints308.json), never
typed by hand; tests check them against the reference COCO order and the skeleton's finger chains.
"""

from __future__ import annotations

import json
import math
from functools import lru_cache
from pathlib import Path

import numpy as np

from ..pose.meta import DEFAULT_KEYPOINT_THRESHOLD, keypoint_names, name_index
from ..results import PoseResult

COCO17_NAMES = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
                "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee",
                "right_knee", "left_ankle", "right_ankle"]
COCO17_SKELETON = [[16, 14], [14, 12], [17, 15], [15, 13], [12, 13], [6, 12], [7, 13], [6, 7], [6, 8], [7, 9],
                   [8, 10], [9, 11], [2, 3], [1, 2], [1, 3], [2, 4], [3, 5], [4, 6], [5, 7]]  # 1-based, COCO's
# OpenPose BODY_25 order, written with the 308 names; "mid_hip" is the midpoint of the two hips.
BODY25_NAMES = ["nose", "neck", "right_shoulder", "right_elbow", "right_wrist", "left_shoulder", "left_elbow",
                "left_wrist", "mid_hip", "right_hip", "right_knee", "right_ankle", "left_hip", "left_knee",
                "left_ankle", "right_eye", "left_eye", "right_ear", "left_ear", "left_big_toe", "left_small_toe",
                "left_heel", "right_big_toe", "right_small_toe", "right_heel"]
# OpenPose hand: wrist, then thumb, index, middle, ring, pinky, each from the knuckle nearest the palm to
# the tip. The 308 set names those joints <finger>_third_joint, <finger>2, <finger>3, <finger>4 (tip),
# as its skeleton links wrist -> third_joint -> 2 -> 3 -> 4 confirm.
HAND_FINGERS = ["thumb", "forefinger", "middle_finger", "ring_finger", "pinky_finger"]
HAND_JOINTS = ["_third_joint", "2", "3", "4"]


@lru_cache(maxsize=1)
def coco17_indices() -> list[int]:
    index = name_index()
    return [index[name] for name in COCO17_NAMES]


@lru_cache(maxsize=1)
def body25_indices() -> list[int]:
    """Indices into the 308 set in BODY_25 order; -1 marks mid_hip (computed from both hips)."""
    index = name_index()
    return [-1 if name == "mid_hip" else index[name] for name in BODY25_NAMES]


@lru_cache(maxsize=2)
def hand21_indices(side: str) -> list[int]:
    index = name_index()
    names = [f"{side}_wrist"] + [f"{side}_{finger}{joint}" for finger in HAND_FINGERS for joint in HAND_JOINTS]
    return [index[name] for name in names]


# -- official Sapiens2 JSON ----------------------------------------------------------------------------
def to_official_json(result: PoseResult, keypoint_threshold: float = DEFAULT_KEYPOINT_THRESHOLD) -> dict:
    """The official demo's JSON (all 308 keypoints kept, whatever their score) plus keypoint names."""
    return {
        "image_size": [int(result.image_size[0]), int(result.image_size[1])],
        "num_keypoints": int(result.keypoints.shape[1]) if result.keypoints.ndim == 3 else 0,
        "kpt_thr_used": float(keypoint_threshold),
        "keypoint_names": keypoint_names(),
        "instances": [
            {
                "bbox": [_num(v, 2) for v in result.boxes[i]],
                "bbox_score": _num(result.box_scores[i], 4),
                "keypoints": [[_num(x, 3), _num(y, 3)] for x, y in result.keypoints[i]],
                "keypoint_scores": [_num(s, 4) for s in result.keypoint_scores[i]],
            }
            for i in range(result.num_people)
        ],
    }


def read_official_json(path) -> PoseResult:
    data = json.loads(Path(path).read_text())
    instances = data["instances"]
    k = int(data["num_keypoints"])
    return PoseResult(
        image_size=tuple(int(v) for v in data["image_size"]),
        boxes=_array([inst["bbox"] for inst in instances], (-1, 4)),
        box_scores=_array([inst.get("bbox_score", 1.0) for inst in instances], (-1,)),
        keypoints=_array([inst["keypoints"] for inst in instances], (-1, k, 2)),
        keypoint_scores=_array([inst["keypoint_scores"] for inst in instances], (-1, k)),
    )


# -- COCO-17 --------------------------------------------------------------------------------------------
def to_coco17(result: PoseResult, keypoint_threshold: float = DEFAULT_KEYPOINT_THRESHOLD) -> dict:
    """A COCO keypoints file (one image, one annotation per person) with the 17 COCO keypoints.

    Visibility: v=2 where the score >= threshold, else v=1 with the predicted x, y kept (the model always
    predicts a location; a low score reads as "uncertain/occluded", not "absent"). Raw scores are kept
    in the extra "keypoint_scores" field.
    """
    height, width = result.image_size
    idx = coco17_indices()
    annotations = []
    for i in range(result.num_people):
        x1, y1, x2, y2 = (float(v) for v in result.boxes[i])
        scores = result.keypoint_scores[i, idx]
        vis = np.where(scores >= keypoint_threshold, 2, 1)
        flat = []
        for (x, y), v in zip(result.keypoints[i, idx], vis):
            flat += [_num(x, 3), _num(y, 3), int(v)]
        annotations.append({
            "id": i + 1, "image_id": 1, "category_id": 1, "iscrowd": 0,
            "bbox": [_num(x1, 2), _num(y1, 2), _num(x2 - x1, 2), _num(y2 - y1, 2)],
            "area": _num((x2 - x1) * (y2 - y1), 2),
            "keypoints": flat, "num_keypoints": int((vis == 2).sum()),
            "score": _num(result.box_scores[i], 4),
            "keypoint_scores": [_num(s, 4) for s in scores],
        })
    return {
        "images": [{"id": 1, "width": int(width), "height": int(height)}],
        "categories": [{"id": 1, "name": "person", "supercategory": "person", "keypoints": COCO17_NAMES,
                        "skeleton": COCO17_SKELETON}],
        "annotations": annotations,
    }


def read_coco17(path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """-> keypoints (N, 17, 2), visibility (N, 17) int, boxes (N, 4) x1 y1 x2 y2."""
    data = json.loads(Path(path).read_text())
    triples = _array([a["keypoints"] for a in data["annotations"]], (-1, 17, 3))
    boxes = _array([a["bbox"] for a in data["annotations"]], (-1, 4))
    boxes[:, 2:] += boxes[:, :2]
    return triples[:, :, :2], triples[:, :, 2].astype(np.int64), boxes


# -- OpenPose -------------------------------------------------------------------------------------------
def openpose_arrays(result: PoseResult, keypoint_threshold: float = DEFAULT_KEYPOINT_THRESHOLD) -> dict:
    """(N, 25, 3) body and (N, 21, 3) hands as OpenPose writes them: [x, y, c], c = score clipped to
    [0, 1]; points under the threshold are [0, 0, 0], OpenPose's "not detected"."""
    n, k = result.num_people, len(keypoint_names())
    points = np.concatenate([np.asarray(result.keypoints, np.float32).reshape(n, k, 2),
                             np.asarray(result.keypoint_scores, np.float32).reshape(n, k, 1)], axis=-1)
    body_index = np.array(body25_indices())
    body = points[:, np.where(body_index < 0, 0, body_index)].copy()
    hips = points[:, [name_index()["left_hip"], name_index()["right_hip"]]]
    body[:, body_index < 0, :2] = hips[:, :, :2].mean(axis=1)[:, None]
    body[:, body_index < 0, 2] = hips[:, :, 2].min(axis=1)[:, None]  # only as sure as the weaker hip
    out = {"pose": body,
           "hand_left": points[:, hand21_indices("left")].copy(),
           "hand_right": points[:, hand21_indices("right")].copy()}
    for array in out.values():
        hidden = ~(array[..., 2] >= keypoint_threshold) | ~np.isfinite(array[..., :2]).all(axis=-1)
        array[..., 2] = np.clip(array[..., 2], 0.0, 1.0)
        array[hidden] = 0.0
    return out


def to_openpose(result: PoseResult, keypoint_threshold: float = DEFAULT_KEYPOINT_THRESHOLD) -> dict:
    """OpenPose's JSON (version 1.3 layout) with BODY_25 and 21-point hands; the 308 set's 238 face points
    do not map onto OpenPose's 70, so face_keypoints_2d stays empty."""
    arrays = openpose_arrays(result, keypoint_threshold)
    people = []
    for i in range(result.num_people):
        people.append({
            "person_id": [-1],
            "pose_keypoints_2d": _flat(arrays["pose"][i]),
            "face_keypoints_2d": [],
            "hand_left_keypoints_2d": _flat(arrays["hand_left"][i]),
            "hand_right_keypoints_2d": _flat(arrays["hand_right"][i]),
            "pose_keypoints_3d": [], "face_keypoints_3d": [],
            "hand_left_keypoints_3d": [], "hand_right_keypoints_3d": [],
        })
    height, width = result.image_size
    return {"version": 1.3, "people": people, "canvas_height": int(height), "canvas_width": int(width)}


def read_openpose(path) -> dict:
    """-> {"pose": (N, 25, 3), "hand_left": (N, 21, 3), "hand_right": (N, 21, 3)}."""
    people = json.loads(Path(path).read_text())["people"]
    return {
        "pose": _array([p["pose_keypoints_2d"] for p in people], (-1, 25, 3)),
        "hand_left": _array([p["hand_left_keypoints_2d"] for p in people], (-1, 21, 3)),
        "hand_right": _array([p["hand_right_keypoints_2d"] for p in people], (-1, 21, 3)),
    }


# -- files ----------------------------------------------------------------------------------------------
def write_exports(result: PoseResult, folder, stem: str = "pose",
                  keypoint_threshold: float = DEFAULT_KEYPOINT_THRESHOLD) -> dict[str, Path]:
    """Write the three JSON files into `folder`; returns {"official", "coco17", "openpose"} -> path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    documents = {
        "official": (f"{stem}_sapiens2.json", to_official_json(result, keypoint_threshold)),
        "coco17": (f"{stem}_coco17.json", to_coco17(result, keypoint_threshold)),
        "openpose": (f"{stem}_openpose_keypoints.json", to_openpose(result, keypoint_threshold)),
    }
    paths = {}
    for kind, (name, document) in documents.items():
        path = folder / name
        path.write_text(json.dumps(document, allow_nan=False, separators=(",", ":")))
        paths[kind] = path
    return paths


def _num(value, digits: int):
    """A JSON-safe rounded float; non-finite values (a degenerate heatmap) become null."""
    value = float(value)
    return round(value, digits) if math.isfinite(value) else None


def _flat(array: np.ndarray) -> list[float]:
    return [_num(v, 3) for v in array.reshape(-1)]


def _array(rows, shape) -> np.ndarray:
    """Nested lists -> float32 array of `shape` (-1 = people); nulls become NaN."""
    if len(rows) == 0:
        return np.zeros([0 if s == -1 else s for s in shape], np.float32)
    return np.array(rows, dtype=np.float64).reshape(shape).astype(np.float32)

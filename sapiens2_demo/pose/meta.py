"""The 308-keypoint set: names, flip indices, skeleton links and colours, read once from keypoints308.json."""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

import numpy as np

NUM_KEYPOINTS = 308
FACE_START = 70  # keypoints 70-307 are the face (no links)
DEFAULT_KEYPOINT_THRESHOLD = 0.3  # reference drawing/visibility threshold

_DATA = Path(__file__).resolve().parent.parent / "data" / "keypoints308.json"


@lru_cache(maxsize=1)
def keypoint_meta() -> dict:
    meta = json.loads(_DATA.read_text())
    if len(meta["names"]) != NUM_KEYPOINTS:
        raise ValueError(f"{_DATA} lists {len(meta['names'])} keypoints, expected {NUM_KEYPOINTS}")
    return meta


def keypoint_names() -> list[str]:
    return list(keypoint_meta()["names"])


def name_index() -> dict[str, int]:
    return {name: i for i, name in enumerate(keypoint_meta()["names"])}


def flip_pairs_from_indices() -> np.ndarray:
    """(P, 2) int64 [left, right] pairs from the flip_indices list (each pair once, i < j)."""
    flip = keypoint_meta()["flip_indices"]
    return np.array([[i, j] for i, j in enumerate(flip) if i < j], dtype=np.int64)

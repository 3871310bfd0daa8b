"""Image -> PoseResult: person boxes, batched crops through the pose model (with flip test), DARK-UDP."""

from __future__ import annotations

import time
from contextlib import contextmanager

import numpy as np

from ..inference import forward, input_size, preprocess
from ..registry import checkpoint
from ..results import PoseResult
from .boxes import parse_boxes, xyxy_to_xywh
from .decode import decode_heatmaps
from .detector import PERSON_CLASSES, find_people
from .meta import flip_pairs_from_indices

STAGES = ("load", "detect", "crop", "forward", "decode")


def estimate_pose(image: np.ndarray, manager, size: str = "0.4b", *, boxes=None, flip_test: bool = True,
                  score_threshold: float = 0.3, nms_iou: float = 0.3, max_people: int = 20,
                  batch_size: int = 8, timings: dict | None = None,
                  detector_classes: tuple[int, ...] | None = PERSON_CLASSES) -> PoseResult:
    """308 keypoints for every person in an RGB uint8 image, in image pixels.

    boxes: user boxes ([[x1, y1, x2, y2], ...] or its JSON string) skip the detector; see parse_boxes.
    timings: if given, filled with seconds per stage (load, detect, crop, forward, decode).
    Raises ValueError for a bad image or boxes, CheckpointUnavailable when the pose model is missing;
    a missing detector or no detection falls back to the whole image, with a note in result.notes.
    """
    image = as_rgb_uint8(image)
    size_hw = image.shape[:2]
    timings = {} if timings is None else timings
    for stage in STAGES:
        timings.setdefault(stage, 0.0)
    user_boxes = parse_boxes(boxes, size_hw, max_boxes=max_people)  # validate before any loading

    with _timed(timings, "load"):
        loaded = manager.get(checkpoint("pose", size))
    if user_boxes is not None:
        person_boxes, box_scores, notes = user_boxes, np.ones(len(user_boxes), np.float32), []
    else:
        with _timed(timings, "detect"):
            person_boxes, box_scores, notes = find_people(image, manager, score_threshold, nms_iou,
                                                          max_people, detector_classes)

    flip_pairs = model_flip_pairs(loaded.model) if flip_test else None
    model_input = input_size(loaded.processor)
    keypoints, scores = [], []
    batch_size = max(int(batch_size), 1)
    for start in range(0, len(person_boxes), batch_size):  # bounded memory: heatmaps are 60 MB a person
        chunk = person_boxes[start:start + batch_size]
        with _timed(timings, "crop"):
            pixel_values = preprocess(loaded, image, "pose", xyxy_to_xywh(chunk))
        with _timed(timings, "forward"):
            heatmaps = forward(loaded, pixel_values)["heatmaps"]
            if flip_pairs is not None:
                # The model flips the heatmaps of a mirrored crop back (swapping left/right maps) itself.
                pairs = flip_pairs.to(pixel_values.device)
                heatmaps = (heatmaps + forward(loaded, pixel_values.flip(-1), flip_pairs=pairs)["heatmaps"]) / 2
        with _timed(timings, "decode"):
            chunk_keypoints, chunk_scores = decode_heatmaps(heatmaps, chunk, model_input)
        keypoints.append(chunk_keypoints)
        scores.append(chunk_scores)

    return PoseResult(image_size=(int(size_hw[0]), int(size_hw[1])), boxes=person_boxes.astype(np.float32),
                      box_scores=box_scores.astype(np.float32),
                      keypoints=np.concatenate(keypoints).astype(np.float32),
                      keypoint_scores=np.concatenate(scores).astype(np.float32), notes=list(notes))


def model_flip_pairs(model):
    """(P, 2) long tensor of left/right keypoint pairs: the checkpoint's config, else keypoints308.json."""
    import torch

    pairs = getattr(getattr(model, "config", None), "flip_pairs", None)
    if not pairs:
        pairs = flip_pairs_from_indices()
    return torch.as_tensor(np.asarray(pairs, dtype=np.int64).reshape(-1, 2))


def as_rgb_uint8(image) -> np.ndarray:
    """Accept RGB, RGBA (alpha dropped) or greyscale uint8 arrays; anything else is a ValueError."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise ValueError(f"Expected a uint8 image; got {image.dtype}.")
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    if image.ndim != 3 or image.shape[2] not in (3, 4) or min(image.shape[:2]) < 1:
        raise ValueError(f"Expected an RGB image of shape (H, W, 3); got {image.shape}.")
    image = np.ascontiguousarray(image[:, :, :3])
    return image if image.flags.writeable else image.copy()  # torch warns on read-only arrays


@contextmanager
def _timed(timings: dict, stage: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - start

"""Person boxes from the ultralytics YOLO detector, with the reference's whole-image fallback."""

from __future__ import annotations

import logging

import cv2
import numpy as np

from .. import ledger
from ..models.detector_cpu import threads_kept
from ..models.manager import CheckpointUnavailable
from .boxes import clip_boxes, whole_image_box

log = logging.getLogger(__name__)

DETECTOR_SIDE = 640  # ultralytics' default input size
PERSON_CLASSES = (0,)  # COCO class 0 = person
NO_PERSON_NOTE = "No person detected; used the whole image as one box."


def detect_people(image: np.ndarray, manager, score_threshold: float = 0.3, nms_iou: float = 0.3,
                  max_people: int = 20, classes: tuple[int, ...] | None = PERSON_CLASSES
                  ) -> tuple[np.ndarray, np.ndarray]:
    """RGB uint8 image -> person boxes (N, 4) float32 x1 y1 x2 y2 and scores (N,), best first.

    Keeps boxes scoring above `score_threshold` (the reference keeps score > 0.3), then greedy NMS at
    `nms_iou`, then the `max_people` best. `classes=None` keeps every class (tests with random weights).
    Raises CheckpointUnavailable when the detector cannot be loaded.
    """
    return detect_people_batch([image], manager, score_threshold, nms_iou, max_people, classes)[0]


def detect_people_batch(images: list[np.ndarray], manager, score_threshold: float = 0.3, nms_iou: float = 0.3,
                        max_people: int = 20, classes: tuple[int, ...] | None = PERSON_CLASSES
                        ) -> list[tuple[np.ndarray, np.ndarray]]:
    """`detect_people` of several images in one detector call, their detections copied back in one copy (on a
    GPU each copy back waits for the device)."""
    import torch

    if not images:
        return []
    loaded = manager.get_detector()
    # ultralytics reads numpy images as BGR (cv2 convention); our images are RGB. OpenCV swaps the channels in
    # 0.15 ms at 1080p where numpy's strided copy took 6.8 (the same bytes)
    bgr = [cv2.cvtColor(np.ascontiguousarray(image[..., :3]), cv2.COLOR_RGB2BGR) for image in images]
    predictor = loaded.runner or loaded.model  # on a CPU, the ONNX export under onnxruntime (models/detector_cpu.py)
    with loaded.lock, threads_kept():
        results = predictor.predict(bgr[0] if len(bgr) == 1 else bgr, conf=float(score_threshold), iou=float(nms_iou),
                                   classes=list(classes) if classes is not None else None,
                                   max_det=300, device=loaded.device, verbose=False)
    found = _ledgered([torch.cat([r.boxes.xyxy, r.boxes.conf[:, None], r.boxes.cls[:, None]], 1).float()
                       for r in results], images)
    counts = [int(r.boxes.xyxy.shape[0]) for r in results]
    every = torch.cat(found).cpu()  # the one copy back
    return [_kept(rows, image.shape[:2], score_threshold, nms_iou, max_people, classes)
            for rows, image in zip(every.split(counts), images)]


def _kept(rows, size, score_threshold: float, nms_iou: float, max_people: int,
          classes) -> tuple[np.ndarray, np.ndarray]:
    """One image's detections (N, 6: x1 y1 x2 y2 score class, on the host) -> the people kept, best first."""
    import torch
    from torchvision.ops import nms

    boxes, scores = rows[:, :4], rows[:, 4]
    keep = scores > score_threshold if score_threshold > 0 else torch.ones_like(scores, dtype=torch.bool)
    if classes is not None:
        keep &= torch.isin(rows[:, 5].long(), torch.tensor(list(classes)))
    boxes, scores = boxes[keep], scores[keep]
    # Our own NMS as well: end-to-end (NMS-free) YOLO models ignore iou=, and this pins the reference rule.
    order = nms(boxes, scores, float(nms_iou))[: max(int(max_people), 0)]
    boxes = clip_boxes(boxes[order].numpy().reshape(-1, 4), size).astype(np.float32)
    scores = scores[order].numpy().astype(np.float32)
    nonempty = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    return boxes[nonempty], scores[nonempty]


def _ledgered(outputs: list, images: list):
    """The detections as the transfer ledger sees them: ultralytics' letterboxed uint8 inputs uploaded in one
    pageable copy (of the first image's size: a video's frames share it), one forward, its outputs on the device
    (ultralytics' own waits in its NMS are not looked into)."""
    if ledger.active() is None:
        return outputs
    height, width = images[0].shape[:2]
    scale = DETECTOR_SIDE / max(height, width)
    side = [-(-round(n * scale) // 32) * 32 for n in (height, width)]  # letterboxed to a multiple of the stride
    ledger.record("h2d", "detector", (len(images), *side, 3))  # stacked, then one copy
    return ledger.forward("detector", outputs, batch=False)


def find_people(image: np.ndarray, manager, score_threshold: float = 0.3, nms_iou: float = 0.3,
                max_people: int = 20, classes: tuple[int, ...] | None = PERSON_CLASSES
                ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """detect_people, but never raises for a missing detector or an empty detection: it falls back to
    the whole image as one box (score 1) and says so in the returned notes."""
    try:
        boxes, scores = detect_people(image, manager, score_threshold, nms_iou, max_people, classes)
    except CheckpointUnavailable as error:
        return _unavailable(image, error)
    return (boxes, scores, []) if len(boxes) else _nobody(image)


def _nobody(image: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[str]]:
    return whole_image_box(image.shape[:2]), np.ones(1, np.float32), [NO_PERSON_NOTE]


def _unavailable(image: np.ndarray, error: Exception) -> tuple[np.ndarray, np.ndarray, list[str]]:
    log.warning("person detector unavailable: %s", error)
    note = f"Person detector unavailable ({_first_sentence(error)}); used the whole image as one box."
    return whole_image_box(image.shape[:2]), np.ones(1, np.float32), [note]


def _first_sentence(error: Exception, limit: int = 200) -> str:
    text = str(error).split(". ")[0].strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."

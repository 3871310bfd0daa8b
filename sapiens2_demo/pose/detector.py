"""Person boxes from the ultralytics YOLO detector, with the reference's whole-image fallback."""

from __future__ import annotations

import logging

import numpy as np

from .. import ledger
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
    import torch
    from torchvision.ops import nms

    loaded = manager.get_detector()
    height, width = image.shape[:2]
    # ultralytics reads numpy images as BGR (cv2 convention); our images are RGB.
    bgr = np.ascontiguousarray(image[..., ::-1])
    with loaded.lock:
        result = loaded.model.predict(bgr, conf=float(score_threshold), iou=float(nms_iou),
                                      classes=list(classes) if classes is not None else None,
                                      max_det=300, device=loaded.device, verbose=False)[0]
    xyxy, conf, cls = _ledgered([result.boxes.xyxy, result.boxes.conf, result.boxes.cls], height, width)
    boxes = xyxy.detach().float().cpu()
    scores = conf.detach().float().cpu()
    keep = scores > score_threshold if score_threshold > 0 else torch.ones_like(scores, dtype=torch.bool)
    if classes is not None:
        keep &= torch.isin(cls.detach().cpu().long(), torch.tensor(list(classes)))
    boxes, scores = boxes[keep], scores[keep]
    # Our own NMS as well: end-to-end (NMS-free) YOLO models ignore iou=, and this pins the reference rule.
    order = nms(boxes, scores, float(nms_iou))[: max(int(max_people), 0)]
    boxes = clip_boxes(boxes[order].numpy().reshape(-1, 4), (height, width)).astype(np.float32)
    scores = scores[order].numpy().astype(np.float32)
    nonempty = (boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])
    return boxes[nonempty], scores[nonempty]


def _ledgered(outputs: list, height: int, width: int):
    """The detections (boxes, scores, classes) as the transfer ledger sees them: ultralytics' letterboxed
    uint8 input uploaded (pageable), one forward, its outputs on the device (ultralytics' own waits in its NMS are
    not looked into)."""
    if ledger.active() is None:
        return outputs
    scale = DETECTOR_SIDE / max(height, width)
    side = [-(-round(n * scale) // 32) * 32 for n in (height, width)]  # letterboxed to a multiple of the stride
    ledger.record("h2d", "detector", (*side, 3))
    return ledger.forward("detector", outputs, batch=False)


def find_people(image: np.ndarray, manager, score_threshold: float = 0.3, nms_iou: float = 0.3,
                max_people: int = 20, classes: tuple[int, ...] | None = PERSON_CLASSES
                ) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """detect_people, but never raises for a missing detector or an empty detection: it falls back to
    the whole image as one box (score 1) and says so in the returned notes."""
    size = image.shape[:2]
    try:
        boxes, scores = detect_people(image, manager, score_threshold, nms_iou, max_people, classes)
    except CheckpointUnavailable as error:
        log.warning("person detector unavailable: %s", error)
        note = f"Person detector unavailable ({_first_sentence(error)}); used the whole image as one box."
        return whole_image_box(size), np.ones(1, np.float32), [note]
    if len(boxes) == 0:
        return whole_image_box(size), np.ones(1, np.float32), [NO_PERSON_NOTE]
    return boxes, scores, []


def _first_sentence(error: Exception, limit: int = 200) -> str:
    text = str(error).split(". ")[0].strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."

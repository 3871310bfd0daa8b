"""Person boxes: user input validation, box format conversions and the reference crop geometry."""

from __future__ import annotations

import json
import math

import numpy as np

CROP_PADDING = 1.25  # reference: each box is padded x1.25 before the crop (boxes_to_crop_params)


def parse_boxes(boxes, image_size: tuple[int, int], max_boxes: int | None = None) -> np.ndarray | None:
    """User boxes -> (N, 4) float32 x1 y1 x2 y2 clipped to the image, or None when none were given.

    Accepts a list of [x1, y1, x2, y2] (image pixels), a single such box, an (N, 4) array, or a JSON
    string of either. None, an empty string and an empty list mean "no boxes" (use the detector).
    Anything else that is not a valid box raises ValueError with a message meant for the user.
    """
    if boxes is None:
        return None
    if isinstance(boxes, (bytes, bytearray)):
        boxes = boxes.decode("utf-8", errors="replace")
    if isinstance(boxes, str):
        text = boxes.strip()
        if not text:
            return None
        try:
            boxes = json.loads(text)
        except json.JSONDecodeError as error:
            raise ValueError(
                f"Boxes are not valid JSON ({error.msg} at character {error.pos}); "
                'expected e.g. [[x1, y1, x2, y2], ...] in image pixels.') from None
    if isinstance(boxes, np.ndarray):
        boxes = boxes.tolist()
    if not isinstance(boxes, (list, tuple)):
        raise ValueError(f"Boxes must be a list of [x1, y1, x2, y2]; got {type(boxes).__name__}.")
    if len(boxes) == 0:
        return None
    if all(_is_number(v) for v in boxes):  # one flat box
        boxes = [boxes]
    rows = []
    for i, box in enumerate(boxes, start=1):
        if not isinstance(box, (list, tuple)) or len(box) != 4 or not all(_is_number(v) for v in box):
            raise ValueError(f"Box {i} must be four numbers [x1, y1, x2, y2]; got {_short(box)}.")
        x1, y1, x2, y2 = (float(v) for v in box)
        if not all(math.isfinite(v) for v in (x1, y1, x2, y2)):
            raise ValueError(f"Box {i} has a non-finite coordinate: {_short(box)}.")
        if x2 <= x1 or y2 <= y1:
            raise ValueError(f"Box {i} is empty or inverted (need x2 > x1 and y2 > y1): {_short(box)}.")
        rows.append((x1, y1, x2, y2))
    if max_boxes is not None and len(rows) > max_boxes:
        raise ValueError(f"Too many boxes: {len(rows)} given, at most {max_boxes} people per image.")
    height, width = image_size
    parsed = np.array(rows, dtype=np.float64)
    clipped = clip_boxes(parsed, image_size)
    for i, (box, original) in enumerate(zip(clipped, rows), start=1):
        if box[2] <= box[0] or box[3] <= box[1]:
            raise ValueError(f"Box {i} {_short(list(original))} lies entirely outside the {width}x{height} image.")
    return clipped.astype(np.float32)


def clip_boxes(boxes: np.ndarray, image_size: tuple[int, int]) -> np.ndarray:
    """Clip x1 y1 x2 y2 boxes to the image rectangle [0, W] x [0, H] (pixel edges)."""
    height, width = image_size
    out = np.array(boxes, dtype=np.float64 if np.asarray(boxes).dtype == np.float64 else np.float32)
    out[:, [0, 2]] = out[:, [0, 2]].clip(0, width)
    out[:, [1, 3]] = out[:, [1, 3]].clip(0, height)
    return out


def whole_image_box(image_size: tuple[int, int]) -> np.ndarray:
    height, width = image_size
    return np.array([[0.0, 0.0, float(width), float(height)]], dtype=np.float32)


def xyxy_to_xywh(boxes: np.ndarray) -> np.ndarray:
    """x1 y1 x2 y2 -> top-left x, y, width, height (the processor's COCO box format)."""
    boxes = np.asarray(boxes, dtype=np.float32).reshape(-1, 4)
    return np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], axis=1)


def crop_params(boxes_xyxy: np.ndarray, input_size: tuple[int, int],
                padding: float = CROP_PADDING) -> tuple[np.ndarray, np.ndarray]:
    """Crop centre (N, 2) and size (N, 2) [w, h] in image pixels, as transformers' boxes_to_crop_params:
    the box padded by `padding`, then widened or heightened to the model input's aspect (w/h = 0.75)."""
    xywh = xyxy_to_xywh(boxes_xyxy)
    center = xywh[:, :2] + 0.5 * xywh[:, 2:]
    width, height = xywh[:, 2] * np.float32(padding), xywh[:, 3] * np.float32(padding)
    aspect = input_size[1] / input_size[0]
    wide = width > height * aspect
    scale = np.where(wide[:, None], np.stack([width, width / aspect], 1), np.stack([height * aspect, height], 1))
    return center.astype(np.float32), scale.astype(np.float32)


def _is_number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _short(value, limit: int = 80) -> str:
    try:
        text = json.dumps(value)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."

"""Dense task pipelines: RGB image in, a typed result at the image's own size out.

image -> processor (stretch or keep-aspect pad) -> model -> post-processing -> result
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict

import numpy as np

from .inference import forward, input_size, preprocess
from .manager import ModelManager
from .postprocess import postprocess_matting, postprocess_normals, postprocess_pointmap, upsample_labels
from .registry import checkpoint
from .results import MattingResult, NormalsResult, PointmapResult, SegmentationResult


class SegmentationCache:
    """Bounded LRU of segmentations keyed by image content and checkpoint.

    Normals, depth and the All-tasks view all mask with the body-part segmentation; this makes one
    image cost one segmentation forward however many of them ask.
    """

    def __init__(self, max_items: int = 16):
        self.max_items = max_items
        self._items: OrderedDict[tuple, SegmentationResult] = OrderedDict()
        self._lock = threading.Lock()
        self._key_locks: dict[tuple, threading.Lock] = {}

    @staticmethod
    def key(image: np.ndarray, repo_id: str, revision: str) -> tuple:
        digest = hashlib.blake2b(np.ascontiguousarray(image).data, digest_size=16)
        digest.update(repr(image.shape).encode())
        return digest.hexdigest(), repo_id, revision

    def get_or_compute(self, key: tuple, compute) -> SegmentationResult:
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # two tabs asking at once for one image share one forward
            with self._lock:
                if key in self._items:
                    return self._items[key]
            result = compute()
            with self._lock:
                self._items[key] = result
                while len(self._items) > self.max_items:
                    self._items.popitem(last=False)
                self._key_locks.pop(key, None)
            return result


def segment(image: np.ndarray, manager: ModelManager, size: str = "0.4b",
            cache: SegmentationCache | None = None) -> SegmentationResult:
    ckpt = checkpoint("seg", size)

    def compute() -> SegmentationResult:
        loaded = manager.get(ckpt)
        logits = forward(loaded, preprocess(loaded, image, "seg"))["logits"][0].numpy()
        return SegmentationResult(labels=upsample_labels(logits, image.shape[:2]))

    if cache is None:
        return compute()
    return cache.get_or_compute(SegmentationCache.key(image, ckpt.repo_id, ckpt.revision), compute)


def estimate_normals(image: np.ndarray, manager: ModelManager, size: str = "0.4b",
                     mask: np.ndarray | None = None) -> NormalsResult:
    loaded = manager.get(checkpoint("normal", size))
    raw = forward(loaded, preprocess(loaded, image, "normal"))["normals"][0]
    normals = postprocess_normals(raw, image.shape[:2], input_size(loaded.processor))
    return NormalsResult(normals=normals, mask=mask)


def estimate_pointmap(image: np.ndarray, manager: ModelManager, size: str = "0.4b",
                      mask: np.ndarray | None = None) -> PointmapResult:
    loaded = manager.get(checkpoint("pointmap", size))
    outputs = forward(loaded, preprocess(loaded, image, "pointmap"))
    scales = outputs.get("scales")
    scale = float(scales[0, 0]) if scales is not None else 1.0
    points = postprocess_pointmap(outputs["pointmaps"][0], scale, image.shape[:2], input_size(loaded.processor))
    focal = input_size(loaded.processor)[1] / scale  # fx in model-input pixels (768 / scale)
    return PointmapResult(points=points, scale=scale, focal_length=focal, mask=mask)


def estimate_matting(image: np.ndarray, manager: ModelManager, size: str = "1b") -> MattingResult:
    loaded = manager.get(checkpoint("matting", size))
    outputs = forward(loaded, preprocess(loaded, image, "matting"))
    alpha, foreground = postprocess_matting(outputs["foregrounds"][0], outputs["alphas"][0], image.shape[:2])
    return MattingResult(alpha=alpha, foreground=foreground)

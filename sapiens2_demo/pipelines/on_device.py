"""Dense pipelines whose results stay on the model's device: (3, H, W) uint8 frame tensors in
(`models.inference.upload`), full-size result tensors out, for drawing there (`tasks/drawn.py`, CUDA video).

The same processor, forward and post-processing arithmetic as `dense.py`'s CUDA path (`device_post`), minus
the copy back to the host.
"""

from __future__ import annotations

from ..models.inference import forward, input_size, preprocess
from ..models.registry import checkpoint
from . import device_post


def _sizes(images) -> list[tuple[int, int]]:
    return [tuple(image.shape[-2:]) for image in images]


def labels(images, manager, size: str = "0.4b") -> list:
    """Body-part labels: (H, W) uint8 tensors (label 0 is the background)."""
    loaded = manager.get(checkpoint("seg", size))
    logits = forward(loaded, preprocess(loaded, images, "seg"), on_device=True)["logits"]
    return device_post.segmentation_label_tensors(logits, _sizes(images))


def normals(images, manager, size: str = "0.4b") -> list:
    """Unit normals: (H, W, 3) float32 tensors."""
    loaded = manager.get(checkpoint("normal", size))
    raw = forward(loaded, preprocess(loaded, images, "normal"), on_device=True)["normals"]
    return device_post.normal_tensors(raw, _sizes(images), input_size(loaded.processor))


def matting(images, manager, size: str = "1b") -> list[tuple]:
    """(alpha (H, W), premultiplied foreground (H, W, 3)) float32 tensors in [0, 1]."""
    loaded = manager.get(checkpoint("matting", size))
    outputs = forward(loaded, preprocess(loaded, images, "matting"), on_device=True)
    return device_post.matting_tensors(outputs["foregrounds"], outputs["alphas"], _sizes(images))

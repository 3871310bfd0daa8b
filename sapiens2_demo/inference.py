"""The model step shared by every task: processor pre-processing and a no-grad forward.

Pre-processing is transformers' `Sapiens2ImageProcessor` itself, with the per-task resize rule of the
reference (stretch for seg/matting, keep-aspect centre pad for normal/pointmap, box crops for pose).
"""

from __future__ import annotations

import numpy as np

from .manager import LoadedModel

PADDED_TASKS = ("normal", "pointmap")  # keep aspect, centre zero-pad (processor do_pad=True)


def input_size(processor) -> tuple[int, int]:
    """Model input (height, width) from the checkpoint's processor config (1024x768 for released ones)."""
    return int(processor.size["height"]), int(processor.size["width"])


def preprocess(loaded: LoadedModel, image: np.ndarray, task: str, boxes_xywh=None):
    """RGB uint8 (H, W, 3) -> pixel_values (B, 3, h, w) on the model's device and dtype."""
    kwargs = {"do_pad": task in PADDED_TASKS}
    if boxes_xywh is not None:
        kwargs["boxes"] = [np.asarray(boxes_xywh, dtype=np.float32).tolist()]
    inputs = loaded.processor(images=image, return_tensors="pt", **kwargs)
    return inputs["pixel_values"].to(device=loaded.device, dtype=loaded.dtype)


def forward(loaded: LoadedModel, pixel_values, **kwargs):
    """Run the model without gradients; every floating output comes back as float32 on the CPU."""
    import torch

    with torch.inference_mode():
        outputs = loaded.model(pixel_values=pixel_values, **kwargs)
    return {
        name: value.float().cpu() if torch.is_tensor(value) and value.is_floating_point() else value
        for name, value in outputs.items()
    }

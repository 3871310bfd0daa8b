"""The model step shared by every task: processor pre-processing and a no-grad forward.

Pre-processing is transformers' `Sapiens2ImageProcessor` itself, with the per-task resize rule of the
reference (stretch for seg/matting, keep-aspect centre pad for normal/pointmap, box crops for pose).
"""

from __future__ import annotations

import numpy as np

from .. import ledger
from .manager import LoadedModel

PADDED_TASKS = ("normal", "pointmap")  # keep aspect, centre zero-pad (processor do_pad=True)


def input_size(processor) -> tuple[int, int]:
    """Model input (height, width) from the checkpoint's processor config (1024x768 for released ones)."""
    return int(processor.size["height"]), int(processor.size["width"])


def preprocess(loaded: LoadedModel, images: np.ndarray | list[np.ndarray], task: str, boxes_xywh=None):
    """RGB uint8 (H, W, 3) image, or a list of them (or of `upload`'s (3, H, W) tensors) -> pixel_values
    (B, 3, h, w) on the model's device and dtype (on CUDA the processor itself works there).

    Pose: `boxes_xywh` holds the person boxes, (N, 4) for one image or a list of (N_i, 4) for a list of images;
    the crops of every image come out in order, image by image.
    """
    batch = images if isinstance(images, (list, tuple)) else [images]
    kwargs = {"do_pad": task in PADDED_TASKS}
    if boxes_xywh is not None:
        per_image = boxes_xywh if isinstance(images, (list, tuple)) else [boxes_xywh]
        kwargs["boxes"] = [np.asarray(boxes, dtype=np.float32).reshape(-1, 4).tolist() for boxes in per_image]
    if on_cuda(loaded.device):  # the uint8 frames cross once and are resized and normalised on the GPU
        kwargs["device"] = loaded.device
    book = ledger.active()
    if book is not None:  # numpy frames cross as uint8, pageable; the processor is not looked into
        for image in batch:
            if isinstance(image, np.ndarray):
                ledger.record("h2d", "preprocess", image.shape, str(image.dtype), image.itemsize,
                              source=ledger.address(image))
        batch = ledger.off_device(list(batch))
    inputs = loaded.processor(images=list(batch), return_tensors="pt", **kwargs)
    return ledger.on_device(inputs["pixel_values"].to(device=loaded.device, dtype=loaded.dtype), ledger.batch_mark())


def on_cuda(device) -> bool:
    return str(device).split(":")[0] == "cuda"


def upload(frames: list[np.ndarray], device) -> list:
    """RGB uint8 (H, W, 3) frames -> (3, H, W) uint8 tensors on `device`, one copy each (what `preprocess`
    and the device-side drawing both read). On CUDA through pinned memory without blocking: a copy from
    pageable memory would wait for everything queued on the device (the last batch's forward) first."""
    import torch

    cuda = on_cuda(device)
    tensors = [torch.from_numpy(np.ascontiguousarray(frame[..., :3])) for frame in frames]
    if cuda:
        tensors = [t.pin_memory() for t in tensors]  # torch's pinned-block cache reuses them batch after batch
    book = ledger.active()
    if book is not None:
        for t, frame in zip(tensors, frames):
            book.copy_in(t, "upload", blocking=False, source=ledger.address(frame))  # pinned on CUDA
    return ledger.on_device([t.to(device, non_blocking=cuda).permute(2, 0, 1) for t in tensors], ledger.batch_mark())


def image_size(image) -> tuple[int, int]:
    """(H, W) of an RGB (H, W, 3) array or of `upload`'s (3, H, W) tensor."""
    return tuple(image.shape[:2]) if isinstance(image, np.ndarray) else tuple(image.shape[-2:])


def copy_back(tensor):
    """`tensor` on the host, waiting for it alone: on CUDA an asynchronous copy into pinned memory and a wait on an
    event after it (a copy into pageable memory crawls: 16.9 ms for a batch of eight drawn 720p frames on an H200
    machine, against ~1 ms pinned); elsewhere `.cpu()` (which the ledger counts as the same one copy and one wait)."""
    import torch

    if not tensor.is_cuda:
        return tensor.cpu()
    host = torch.empty(tensor.shape, dtype=tensor.dtype, pin_memory=True)  # torch's pinned-block cache reuses it
    host.copy_(tensor, non_blocking=True)
    done = torch.cuda.Event()
    done.record()  # on this thread's current stream, after the copy
    done.synchronize()
    return host


def forward(loaded: LoadedModel, pixel_values, *, on_device: bool = False, **kwargs):
    """Run the model without gradients; every floating output comes back as float32 on the CPU, or left
    where it is with `on_device` (device-side post-processing on CUDA copies only final-size results)."""
    import torch

    book = ledger.active()
    if book is not None:  # the model is one queued unit: its inputs go in as plain tensors
        for value in [pixel_values, *kwargs.values()]:
            if torch.is_tensor(value) and not isinstance(value, ledger.DEVICE_TENSOR()):
                book.copy_in_once(value, "forward")  # a host tensor handed to the model crosses first
        pixel_values, kwargs = ledger.off_device(pixel_values), ledger.off_device(kwargs)
    with torch.inference_mode():
        outputs = loaded.model(pixel_values=pixel_values, **kwargs)
    if book is not None:  # the flip test's mirrored forward is part of its batch
        outputs = ledger.forward(type(loaded.model).__name__, dict(outputs.items()), batch="flip_pairs" not in kwargs)
    if on_device:
        return dict(outputs.items())
    return {
        name: value.float().cpu() if torch.is_tensor(value) and value.is_floating_point() else value
        for name, value in outputs.items()
    }

"""Person crops for the pose model, cut where the frames are: transformers' `crop_and_resize`, without its waits.

transformers' Sapiens2ImageProcessor cuts the crops itself when given boxes, but on CUDA each image's boxes go up
from pageable memory (a copy that waits for everything queued on the device) and `if mask.any()` / `mask.sum()`
read the device back: about four waits per frame of a batch, which hold the next batch's crops until the last
forward is done. Here the arithmetic is theirs, op for op (the crops are equal, `tests/pipelines/test_crops.py`), but
what they decide on the device is decided on the host from the host's boxes: each crop's interpolation mode, and
its sampling parameters, which go up in one pinned copy per batch. Nothing comes back.
"""

from __future__ import annotations

import weakref

import numpy as np

from .. import ledger
from .inference import image_size, input_size, upload
from .manager import LoadedModel

PADDING = 1.25  # crop_and_resize's default: the box grown by a quarter for context, as the reference does


def crop_people(loaded: LoadedModel, images: list, owners: list[int], boxes_xyxy: np.ndarray):
    """pixel_values (N, 3, h, w) in the model's dtype and device: crop k cut from images[owners[k]] around
    boxes_xyxy[k] (x1 y1 x2 y2, image pixels), resized to the model input and normalised as the processor does.
    images: RGB uint8 (H, W, 3) arrays, or `upload`'s (3, H, W) uint8 tensors on the device."""
    import torch
    import torch.nn.functional as F  # noqa: N812 - torch's own name for it

    out_h, out_w = input_size(loaded.processor)
    params, bilinear = _crop_params(np.asarray(boxes_xyxy, np.float32).reshape(-1, 4), (out_h, out_w))
    device = loaded.device
    params = ledger.to_device(params, device, non_blocking=True)  # (N, 6): one small pinned copy, no wait
    # the sampling positions are separable (x depends on the column only, y on the row): computed per column and
    # per row, (N, 1, w) and (N, h, 1), and spread over the grid once in `_grid` (a dozen full-size float ops
    # were most of a crop's CPU time); the same float32 operations per element as crop_and_resize's meshgrid
    columns, rows = ledger.on_device((torch.arange(out_w, dtype=torch.float32, device=device),
                                      torch.arange(out_h, dtype=torch.float32, device=device)))  # made there
    scale_x, scale_y, center_x, center_y, half_w, half_h = (p[:, None, None] for p in params.unbind(-1))
    in_x = columns[None, None, :] / scale_x + center_x - half_w   # crop_and_resize's order of terms
    in_y = rows[None, :, None] / scale_y + center_y - half_h
    sizes = {image_size(images[i]) for i in set(owners)}
    # frames of one size (a video's): every crop's sampling grid at once, the same float32 steps as one run's
    whole = _grid(in_x, in_y, *sizes.pop()) if len(sizes) == 1 else None
    pixels = []
    for start, stop in _runs(owners, bilinear):  # crops of one frame and one mode, next to each other
        image = _as_chw_float(images[owners[start]], device)
        grid = whole[start:stop] if whole is not None else _grid(in_x[start:stop], in_y[start:stop], *image_size(image))
        pixels.append(F.grid_sample(image[None].expand(stop - start, -1, -1, -1), grid,
                                    mode="bilinear" if bilinear[start] else "bicubic", padding_mode="zeros",
                                    align_corners=True))
    pixels = pixels[0] if len(pixels) == 1 else torch.cat(pixels)
    mean, std = _normalisation(loaded.processor, device)
    return ledger.on_device(pixels.sub_(mean).div_(std).to(dtype=loaded.dtype), ledger.batch_mark())


def _grid(in_x, in_y, h: int, w: int):
    """grid_sample's (N, out_h, out_w, 2) grid from the sampling positions in an (h, w) image's pixels: the
    columns' (N, 1, out_w) and the rows' (N, out_h, 1), normalised, then spread over the grid in one copy."""
    import torch

    x, y = 2.0 * in_x / (w - 1) - 1.0, 2.0 * in_y / (h - 1) - 1.0
    shape = (x.shape[0], y.shape[1], x.shape[2])
    return torch.stack([x.expand(shape), y.expand(shape)], dim=-1)


_NORMALISATION: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # processor -> {device: (mean, std)}


def _normalisation(processor, device):
    """(3, 1, 1) mean and std that take 0-255 pixels to the model's input: the processor's rescale folded into its
    normalisation as transformers folds it (`_fuse_mean_std_and_rescale_factor`), the same float32 values."""
    import torch

    kept = _NORMALISATION.setdefault(processor, {})
    if str(device) not in kept:
        if not (processor.do_rescale and processor.do_normalize):
            raise ValueError("pose crops expect a processor that rescales and normalises (every Sapiens2 checkpoint)")
        mean = torch.tensor(processor.image_mean, dtype=torch.float32) * (1.0 / processor.rescale_factor)
        std = torch.tensor(processor.image_std, dtype=torch.float32) * (1.0 / processor.rescale_factor)
        kept[str(device)] = tuple(ledger.upload_once(t.view(-1, 1, 1), device) for t in (mean, std))
    return kept[str(device)]


def _crop_params(boxes_xyxy: np.ndarray, output_size: tuple[int, int]) -> tuple[np.ndarray, list[bool]]:
    """Per crop (scale_x, scale_y, center_x, center_y, half width, half height) as float32, and whether it is
    downscaled (bilinear) rather than upscaled (bicubic): transformers' boxes_to_crop_params and crop_and_resize's
    arithmetic, in float32 torch ops on the host (IEEE float32 gives the device's values)."""
    import torch
    from transformers.models.sapiens2.image_processing_sapiens2 import box_xywh_to_cxcywh, boxes_to_crop_params

    out_h, out_w = output_size
    xywh = np.concatenate([boxes_xyxy[:, :2], boxes_xyxy[:, 2:] - boxes_xyxy[:, :2]], axis=1)  # the processor's boxes
    boxes = box_xywh_to_cxcywh(torch.from_numpy(np.ascontiguousarray(xywh, np.float32)))
    center, scale = boxes_to_crop_params(boxes, output_size=output_size, padding=PADDING)
    width, height = scale.unbind(-1)
    scale_x, scale_y = (out_w - 1) / width, (out_h - 1) / height
    bilinear = (torch.minimum(scale_x, scale_y) < 1.0).tolist()  # a host tensor: no wait
    params = torch.stack([scale_x, scale_y, *center.unbind(-1), 0.5 * width, 0.5 * height], dim=-1)
    return params.numpy(), bilinear


def _runs(owners: list[int], bilinear: list[bool]):
    """(start, stop) of each run of crops from one frame with one interpolation mode."""
    start = 0
    for k in range(1, len(owners) + 1):
        if k == len(owners) or owners[k] != owners[start] or bilinear[k] != bilinear[start]:
            yield start, k
            start = k


def _as_chw_float(image, device):
    """(3, H, W) float32 on `device` from an RGB (H, W, 3) uint8 array or an uploaded (3, H, W) uint8 tensor."""
    import torch

    if isinstance(image, np.ndarray):  # the CPU road's frames (the device road's are uploaded already)
        [image] = upload([image], device)
    return image.to(torch.float32)

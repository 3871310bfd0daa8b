"""The dense annotators' pictures drawn in torch where the tensors are (CUDA video: `tasks/drawn.py`).

Each function takes an annotator of parts.py, normals.py, matting.py or frames.py (depth) for its settings,
so both paths read one set of options, and repeats its arithmetic: the same float32 steps and rounding, so the
pictures match the numpy/cv2 ones (cv2.addWeighted may differ by one grey level where it rounds a half).
Frames are `models.inference.upload`'s (3, H, W) uint8 tensors; pictures come out (H, W, 3) uint8.
"""

from __future__ import annotations

from collections import OrderedDict
from functools import lru_cache

import numpy as np

from .. import ledger
from ..util import content_digest
from .depth import FAR_LIMIT_M, NEAR_LIMIT_M, PERCENTILES, DepthBounds, colormap_lut
from .frames import DEPTH_SMOOTHING
from .matting import cover_resize
from .parts import palette


# The colour tables and constants below are uploaded once per device from pinned memory (`ledger.upload_once`): a
# copy from pageable memory would wait for everything queued on the device, in a process's first video.
@lru_cache(maxsize=4)
def _palette_lut(device: str):
    lut = np.zeros((256, 3), np.float32)
    lut[:len(palette())] = palette().astype("float32")
    return ledger.upload_once(lut, device)


@lru_cache(maxsize=4)
def _colormap_lut(name: str, device: str):
    return ledger.upload_once(colormap_lut(name).copy(), device)


def _hwc(image):
    return image[:3].permute(1, 2, 0)


def _to_uint8(values):
    import torch

    return values.round_().clamp_(0, 255).to(torch.uint8)


def parts(annotator, image, labels):
    """PartsAnnotator: (1 - opacity) * image + opacity * class colour."""
    import torch

    opacity = annotator.opacity
    colours = _palette_lut(str(labels.device))[labels.long()]
    out = _to_uint8(_hwc(image).float() * (1.0 - opacity) + colours * opacity)
    if annotator.skip_background:
        out = torch.where((labels == 0)[..., None], _hwc(image), out)
    return out


def normals(annotator, image, normals, mask=None):
    """NormalsAnnotator: (n + 1) / 2 * 255; where `mask` is False, black or the image's pixels."""
    import torch

    out = _to_uint8(((normals + 1.0) * 127.5).clamp_(0, 255))
    if mask is None:
        return out
    outside = torch.zeros_like(out) if annotator.background == "black" else _hwc(image)
    return torch.where(mask[..., None], out, outside)


def matting(annotator, alpha, foreground):
    """MattingAnnotator with an opaque background (colour or image): fg + (1 - alpha) * background."""

    background = _background(annotator, tuple(alpha.shape), alpha.device)
    return _to_uint8((foreground + (1.0 - alpha[..., None]) * background).clamp_(0, 1) * 255.0)


_BACKGROUNDS: OrderedDict = OrderedDict()  # (what, size, device) -> the background's uint8 pixels on the device


def _background(annotator, image_hw: tuple[int, int], device):
    """MattingAnnotator.background_for on the device: an image's pixels cross once as uint8, resized to cover,
    and stay for the next frames and GPU calls of the video (kept by content: the last two); divided by 255 here,
    the same float32 division as the host's."""
    if annotator.mode == "transparent":
        raise ValueError("A transparent matte has no opaque picture to draw; draw it on the host.")
    what = annotator.colour if annotator.mode != "image" else content_digest(annotator.image)
    key = (what, tuple(image_hw), str(device), ledger.active() is not None)
    if key not in _BACKGROUNDS:
        pixels = np.asarray(annotator.colour, np.uint8) if annotator.mode != "image" else \
            cover_resize(annotator.image, image_hw)
        _BACKGROUNDS[key] = ledger.to_device(pixels, device, non_blocking=True)  # pinned: waits for no forward
        while len(_BACKGROUNDS) > 2:
            _BACKGROUNDS.popitem(last=False)
    _BACKGROUNDS.move_to_end(key)
    return _BACKGROUNDS[key].float() / 255.0


def depth(annotator, points, mask=None):
    """SteadyDepthAnnotator: inverse depth in the colour map between the running bounds (which take this frame's
    1st/99th percentiles of the valid depth), the background grey. Nothing is read back: the bounds are computed
    and followed where the map is, in float64 as the host's, and kept there (`annotator.device_bounds`, near and
    far); `depth_bounds_bytes` copies them back with the picture."""
    import torch

    z = points[..., 2]
    valid = torch.isfinite(z) & (z > 0)
    if mask is not None:
        valid &= mask
    own = _frame_bounds(z, valid)
    before = _running_bounds(annotator, own.device)
    bounds = own if before is None else (1 - DEPTH_SMOOTHING) * before + DEPTH_SMOOTHING * own  # frames.follow
    annotator.device_bounds = bounds
    inverse = 1.0 / bounds  # 1/near, 1/far, float64 as the host's
    # depth.colour_index's float32 steps: 255 * (1/z - 1/far) / (1/near - 1/far), rounded by + 0.5 and truncation
    scale = (255.0 / (inverse[0] - inverse[1])).float()
    index = torch.reciprocal(z.float()).sub_(inverse[1].float()).mul_(scale).add_(0.5)
    index = torch.nan_to_num_(index.clamp_(0, 255)).to(torch.uint8)
    out = _colormap_lut(annotator.depth.cmap, str(z.device))[index.long()]
    grey = _grey(tuple(annotator.depth.background), str(z.device))
    return torch.where(valid[..., None], out, grey)


def _frame_bounds(z, valid):
    """depth.depth_bounds on the device: (2,) float64 near, far from the valid depth's percentiles (NaN marks the
    others: no count read back), clamped to the limits, equal ones widened; the limits when nothing is valid."""
    import torch

    values = torch.where(valid, z.double(), torch.nan)
    low, high = torch.nanquantile(values.reshape(-1), _quantiles(str(z.device))).clamp(NEAR_LIMIT_M, FAR_LIMIT_M)
    equal = high <= low * (1 + 1e-6)  # depth.clamped_bounds
    near = torch.where(equal, torch.clamp(low / 1.01, min=NEAR_LIMIT_M), low)
    far = torch.where(equal, torch.clamp(high * 1.01, max=FAR_LIMIT_M), high)
    bounds = torch.stack([near, far])
    return torch.where(valid.any(), bounds, _limits(str(z.device)))


def _running_bounds(annotator, device):
    """The scale the next frame follows, on the device: kept there by the last frame drawn, or the host's (a call
    that goes on from the last one, `state`), uploaded once."""
    if annotator.device_bounds is not None or annotator.bounds is None:
        return annotator.device_bounds
    bounds = np.array([annotator.bounds.near, annotator.bounds.far], np.float64)
    return ledger.to_device(bounds, device, non_blocking=True)


def depth_bounds_bytes(annotator):
    """The running bounds as 16 uint8 (two float64), to cross in the pictures' copy (`read_depth_bounds`)."""
    import torch

    return annotator.device_bounds.contiguous().view(torch.uint8)


def read_depth_bounds(raw: np.ndarray) -> DepthBounds:
    near, far = np.ascontiguousarray(raw).view(np.float64)
    return DepthBounds(float(near), float(far))


@lru_cache(maxsize=4)
def _limits(device: str):
    return ledger.upload_once(np.array([NEAR_LIMIT_M, FAR_LIMIT_M], np.float64), device)


@lru_cache(maxsize=4)
def _quantiles(device: str):
    """PERCENTILES / 100 as float64 on the device, uploaded once (not a small pageable copy a frame)."""
    return ledger.upload_once(np.asarray(PERCENTILES, np.float64) / 100, device)


@lru_cache(maxsize=8)
def _grey(colour: tuple, device: str):
    return ledger.upload_once(np.array(colour, np.uint8), device)

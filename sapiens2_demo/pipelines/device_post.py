"""Post-processing in torch on the model's device: only final-size results cross to the CPU, in one copy.

Batch-first twins of `postprocess.py` (same crop arithmetic, bilinear with half-pixel centres and no
antialias, same output layout and dtype), taking model outputs as tensors where they are (CUDA, or the
CPU in tests). Each function ends with one device-to-host copy of everything it returns: results are
laid out contiguously on the device, concatenated, copied, and handed back as views of that buffer.
Heavy imports (torch) happen inside the functions.
"""

from __future__ import annotations

import numpy as np

from .. import ledger
from ..models.inference import copy_back
from ..pose.dark_udp import window_half
from ..pose.decode import heatmap_to_image, heatmap_to_image_on_device
from .postprocess import crop_padding
from .riders import Rider

# Segmentation upsamples this many output values per step at most (64 MB of float32): a class chunk at
# a time, so 29 x 1080 x 1920 logits never exist at full size at once.
CHUNK_ELEMENTS = 1 << 24


def use_device_post(device) -> bool:
    """Whether to post-process with this module rather than the numpy/cv2 path: on CUDA only.

    On the CPU the numpy path won every task (`python -m benchmarks post`, 2-core box, torch 2.14 with 2
    threads, ms per call numpy vs torch, 1080x1920 output from 1024x768 maps): seg 71 vs 985 (the numpy
    path upsamples only candidate classes at part boundaries; torch upsamples all 29), normals 66 vs 248,
    pointmap 9 vs 56, matting 60 vs 80; pose decode from 308x256x192 model-like heatmaps (`python -m benchmarks pose`, same
    process), host road vs pose_keypoints, 1 person 5.6 vs 19.8, 3 people 15.7 vs 37.9 (numpy's argmax is ~5x
    torch's on a CPU). Other accelerators keep the tested path. A recording transfer ledger (ledger/) takes
    this road on any device, to count what would cross on CUDA.
    """
    return ledger.device_road(device)


# -- dense maps ---------------------------------------------------------------------------------

def segmentation_labels(logits, image_sizes) -> list[np.ndarray]:
    """(B, C, h, w) logits -> per image (H, W) uint8 labels: argmax of the bilinear upsample to its size.

    Equal to transformers' post_process_semantic_segmentation (ties to the lowest class, like argmax).
    """
    return to_host(segmentation_label_tensors(logits, image_sizes))


def segmentation_label_tensors(logits, image_sizes) -> list:
    """`segmentation_labels`, left on the device: (H, W) uint8 tensors."""
    import torch

    _check_batch(logits, image_sizes, "logits")
    if logits.shape[1] > 256:
        raise ValueError(f"At most 256 classes fit uint8 labels; got {logits.shape[1]}.")
    with torch.inference_mode():
        return [_upsampled_argmax(item, height, width) for item, (height, width) in zip(logits, _sizes(image_sizes))]


def normals(maps, image_sizes, input_hw) -> list[np.ndarray]:
    """(B, 3, h, w) model normals -> per image (H, W, 3) float32 unit normals: normalise, crop the
    keep-aspect padding, resize, re-normalise (as postprocess.postprocess_normals)."""
    return to_host(normal_tensors(maps, image_sizes, input_hw))


def normal_tensors(maps, image_sizes, input_hw) -> list:
    """`normals`, left on the device: (H, W, 3) float32 tensors."""
    import torch

    _check_batch(maps, image_sizes, "normal maps")
    with torch.inference_mode():
        return [_hwc(_unit(_resize(_unit(_crop(item, size, input_hw).float()), size)))
                for item, size in zip(maps, _sizes(image_sizes))]


def pointmaps(maps, scales, image_sizes, input_hw) -> list[np.ndarray]:
    """(B, 3, h, w) canonical pointmaps and (B,) or (B, 1) scales -> per image (H, W, 3) float32 metric
    XYZ: divide by the scale, crop the padding, resize (as postprocess.postprocess_pointmap)."""
    return to_host(pointmap_tensors(maps, scales, image_sizes, input_hw))


def pointmap_tensors(maps, scales, image_sizes, input_hw) -> list:
    """`pointmaps`, left on the device: (H, W, 3) float32 tensors."""
    import torch

    _check_batch(maps, image_sizes, "pointmaps")
    scales = scales.reshape(-1).float()
    if scales.numel() != maps.shape[0]:
        raise ValueError(f"Expected one scale per pointmap ({maps.shape[0]}); got {scales.numel()}.")
    with torch.inference_mode():
        return [_hwc(_resize(_crop(item, size, input_hw).float() / scale, size))
                for item, scale, size in zip(maps, scales, _sizes(image_sizes))]


def matting(foregrounds, alphas, image_sizes) -> list[tuple[np.ndarray, np.ndarray]]:
    """(B, 3, h, w) foregrounds and (B, 1, h, w) alphas -> per image (alpha (H, W), premultiplied
    foreground (H, W, 3)), float32, resized together and clipped to [0, 1] (as postprocess_matting)."""
    return pairs_to_host(matting_tensors(foregrounds, alphas, image_sizes))


def matting_tensors(foregrounds, alphas, image_sizes) -> list[tuple]:
    """`matting`, left on the device: (alpha (H, W), foreground (H, W, 3)) float32 tensors."""
    import torch

    _check_batch(foregrounds, image_sizes, "foregrounds")
    _check_batch(alphas, image_sizes, "alphas")
    out = []
    with torch.inference_mode():
        for fg, alpha, size in zip(foregrounds, alphas, _sizes(image_sizes)):
            stacked = _resize(torch.cat([fg.float(), alpha.float()]), size).clamp_(0.0, 1.0)
            out.append((stacked[3], _hwc(stacked[:3])))
    return out


# -- a light image answer: the maps at their files' bits (results.CodedMap), so no float32 map crosses -----------

def normal_codes(normal_maps) -> list:
    """(H, W, 3) float unit normals -> normals16.png's 16-bit codes: n * 32767.5 + 32767.5 rounded and
    saturated (export.image.write_normals_png's arithmetic, results.NORMAL_CODE), as `uint16_to_host` takes them."""
    import torch

    with torch.inference_mode():
        return [_offset16((n * 32767.5 + 32767.5).round_().clamp_(0, 65535)) for n in normal_maps]


def depth_codes(point_maps) -> list:
    """(H, W, 3) metric points -> depth_mm.png's 16-bit millimetres: round(z * 1000) clipped to 1-65535 where z is
    finite and > 0, else 0 (export.image.depth_millimetres' arithmetic, before its mask; results.DEPTH_MM), as
    `uint16_to_host` takes them."""
    import torch

    with torch.inference_mode():
        out = []
        for points in point_maps:
            z = points[..., 2]
            millimetres = (z * 1000.0).round_().clamp_(1, 65535)
            out.append(_offset16(torch.where(torch.isfinite(z) & (z > 0), millimetres, 0)))
        return out


def _offset16(codes):
    """Whole-number floats 0-65535 -> int16 (code - 32768): torch documents uint16 as of limited support (few eager
    kernels), int16 has them all; the bits are the uint16's with the top one flipped (`uint16_to_host` flips it back)."""
    import torch

    return (codes - 32768).to(torch.int16)


def uint16_to_host(tensors) -> list[np.ndarray]:
    """`to_host` of `_offset16` codes: uint16 arrays of the codes, in one copy."""
    return [part.view(np.uint16) ^ np.uint16(0x8000) for part in to_host(tensors)]


def matting_codes(pairs) -> list[tuple]:
    """(alpha (H, W), premultiplied foreground (H, W, 3)) in [0, 1] -> uint8 (alpha, foreground, un-premultiplied
    colour): the first two rounded to 1/255 steps (results.UNIT_CODE), the colour as render.matting's RGBA PNG makes
    it (fg * 255 / alpha rounded and saturated where alpha >= 1/255, else 0)."""
    import torch

    def byte(values):
        return (values * 255.0).round_().clamp_(0, 255).to(torch.uint8)

    with torch.inference_mode():
        out = []
        for alpha, foreground in pairs:
            divisor = alpha[..., None]
            colour = (foreground * 255.0 / divisor).round_().clamp_(0, 255)
            colour = torch.where(divisor >= 1.0 / 255.0, colour, 0).to(torch.uint8)
            out.append((byte(alpha), byte(foreground), colour))
        return out


# -- pose ---------------------------------------------------------------------------------------

def pose_keypoints(heatmaps, boxes_xyxy: np.ndarray, input_hw: tuple[int, int], kernel: int = 11,
                   force_reference: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(N, K, h, w) heatmaps where they are -> (N, K, 2) image keypoints and (N, K) scores, as
    pose.decode.decode_heatmaps: the argmax, the 13x13 windows, the fast step and the reference's full blur
    for the maps that need it (pose/dark_udp.py) all run on the heatmaps' device. No heatmap leaves it: the
    keypoints and scores cross in one copy (12 bytes a keypoint). force_reference: every map takes the full
    blur (tests, benchmarks)."""
    return pose_keypoints_many([(heatmaps, boxes_xyxy)], input_hw, kernel, force_reference)[0]


# The share of a batch's maps the reference's full blur is run on without a count read back (pose/dark_udp.py
# refine_capped): grown when a batch needed more (that batch is redone with a count), never shrunk; the answers
# do not depend on it, only the work and the waits.
_REFERENCE_SHARE = [1 / 32]
REFERENCE_MIN_MAPS = 16


def pose_keypoints_many(batches: list, input_hw: tuple[int, int], kernel: int = 11,
                        force_reference: bool = False, extra=None):
    """`pose_keypoints` of several batches of crops, [(heatmaps, boxes), ...], with one copy back for all of them
    (a frame batch's crops decoded together: one wait). Each batch runs the reference's blur on a set of maps
    of fixed size picked on the device; the number of maps that needed it crosses with the keypoints, and a
    batch that needed more than its set is decoded again with a count read back (rare: the set grows).
    extra: a function of every crop's image keypoints (C, K, 2) and scores (C, K) on the device, in order, giving
    float32 tensors there that cross in the same copy (pose lifted to 3D: its points); then returns (the keypoints,
    extra's tensors on the host, or None when a batch was decoded again: its keypoints changed)."""
    import math

    import torch

    shapes = [_pose_shape(heatmaps, boxes) for heatmaps, boxes in batches]
    share = 1.0 if force_reference else _REFERENCE_SHARE[0]
    capacities = [min(n * k, max(REFERENCE_MIN_MAPS, math.ceil(n * k * share))) for n, k, _, _ in shapes]
    busy = [(batch, shape) for batch, shape in zip(batches, shapes) if shape[0] * shape[1]]
    found = [_pose_tensors(heatmaps, kernel, capacity) for (heatmaps, _), capacity in zip(batches, capacities)
             if heatmaps.shape[0] * heatmaps.shape[1]]
    counts = [torch.stack([needed.float() for _, _, needed in found])] if found else []
    riding = []
    if extra is not None and found:
        riding = list(extra(torch.cat([heatmap_to_image_on_device(coords.reshape(n, k, 2), boxes, input_hw, (h, w))
                                       for ((_, boxes), (n, k, h, w)), (coords, _, _) in zip(busy, found)]),
                            torch.cat([scores.reshape(n, k) for (_, (n, k, _, _)), (_, scores, _) in zip(busy, found)])))
    host = to_host([t for coords, scores, _ in found for t in (coords, scores)] + counts + riding)
    pairs, needs, carried = host[:2 * len(found)], host[2 * len(found)] if found else [], host[2 * len(found) + 1:]
    out, parts = [], iter(zip(pairs[0::2], pairs[1::2], needs))
    for (heatmaps, boxes), (n, k, h, w), capacity in zip(batches, shapes, capacities):
        if n * k == 0:
            out.append((np.zeros((n, k, 2), np.float32), np.zeros((n, k), np.float32)))
            continue
        coords, scores, needed = next(parts)
        if needed > capacity:  # some maps the set did not cover: this batch again, its maps counted
            _REFERENCE_SHARE[0] = min(1.0, max(_REFERENCE_SHARE[0], 2 * float(needed) / (n * k)))
            coords, scores = _pose_counted(heatmaps, kernel, force_reference)
            carried = None  # worked out from the keypoints before: the caller's again
        out.append((heatmap_to_image(coords.reshape(n, k, 2), boxes, input_hw, (h, w)), scores.reshape(n, k)))
    return out if extra is None else (out, carried if found else None)


def _pose_shape(heatmaps, boxes_xyxy) -> tuple[int, int, int, int]:
    if heatmaps.ndim != 4:
        raise ValueError(f"heatmaps must be (N, K, h, w); got shape {tuple(heatmaps.shape)}")
    n, k, h, w = heatmaps.shape
    if len(boxes_xyxy) != n:
        raise ValueError(f"Got {n} people's heatmaps but {len(boxes_xyxy)} boxes.")
    return n, k, h, w


def _pose_windows(heatmaps, kernel: int):
    """The flat float32 maps, each map's argmax, the raw windows around it and its peak value."""
    from ..pose.dark_udp import gather_windows

    n, k, h, w = heatmaps.shape
    flat = heatmaps.detach().reshape(n * k, h * w).float()  # no copy when they are float32 already
    index = flat.argmax(dim=1)
    windows = gather_windows(flat, index, h, w, window_half(kernel))
    return flat, index, windows, windows[:, window_half(kernel), window_half(kernel)]  # the centre is the peak


def _pose_tensors(heatmaps, kernel: int, capacity: int):
    """Device tensors, nothing read back: (n*k, 2) heatmap coords, (n*k,) scores, 0-dim count of maps that needed
    the reference's blur."""
    import torch

    from ..pose.dark_udp import refine_capped

    h, w = heatmaps.shape[2:]
    with torch.inference_mode():
        flat, index, windows, peak = _pose_windows(heatmaps, kernel)
        coords, scores, needed = refine_capped(flat, index, peak, windows, (h, w), kernel, capacity)
        return coords, scores[:, None], needed


def _pose_counted(heatmaps, kernel: int, force_reference: bool) -> tuple[np.ndarray, np.ndarray]:
    """One batch decoded with the count of maps redone read back (every map that needs it): heatmap coords, scores."""
    import torch

    from ..pose.dark_udp import refine

    h, w = heatmaps.shape[2:]
    with torch.inference_mode():
        flat, index, windows, peak = _pose_windows(heatmaps, kernel)
        coords, scores, _ = refine(flat, index, peak, windows, (h, w), kernel, force_reference)
        coords, scores = to_host([coords, scores[:, None]])
    return coords, scores


# -- helpers ------------------------------------------------------------------------------------

def _sizes(image_sizes) -> list[tuple[int, int]]:
    sizes = [(int(h), int(w)) for h, w in image_sizes]
    for h, w in sizes:
        if h < 1 or w < 1:
            raise ValueError(f"Image sizes must be positive; got {h}x{w}.")
    return sizes


def _check_batch(tensor, image_sizes, name: str) -> None:
    if tensor.ndim != 4:
        raise ValueError(f"{name} must be (B, C, h, w); got shape {tuple(tensor.shape)}")
    if tensor.shape[0] != len(image_sizes):
        raise ValueError(f"Got {tensor.shape[0]} {name} but {len(image_sizes)} image sizes.")


def _crop(item, image_hw: tuple[int, int], input_hw: tuple[int, int]):
    """(C, h, w) -> the part of it inside the keep-aspect padding (postprocess.crop_padding's rounding)."""
    cropped = crop_padding(item.permute(1, 2, 0), image_hw, input_hw).permute(2, 0, 1)  # still a view
    if cropped.shape[1] == 0 or cropped.shape[2] == 0:
        raise ValueError(f"A {image_hw[0]}x{image_hw[1]} image leaves nothing of a "
                         f"{item.shape[1]}x{item.shape[2]} map once the padding is cut.")
    return cropped


def _resize(item, size: tuple[int, int]):
    """(C, h, w) float -> (C, H, W), bilinear, half-pixel centres, no antialias (skipped at equal size)."""
    import torch.nn.functional as F

    if tuple(item.shape[1:]) == tuple(size):
        return item
    return F.interpolate(item[None], size=size, mode="bilinear", align_corners=False, antialias=False)[0]


def _unit(item):
    """L2-normalise (3, h, w) over the channels, eps 1e-8 like F.normalize (which is ~15x slower on a
    CPU for a reduction over the outer dimension)."""
    return item / (item[0] * item[0] + item[1] * item[1] + item[2] * item[2]).sqrt_().clamp_min_(1e-8)


def _hwc(item):
    return item.permute(1, 2, 0)


def _upsampled_argmax(logits, height: int, width: int):
    """argmax over classes of the (C, h, w) logits upsampled to (height, width), as uint8, a chunk of
    classes at a time (interpolation is per channel, so every class's values are the full call's)."""
    import torch

    classes = logits.shape[0]
    step = max(1, CHUNK_ELEMENTS // (height * width))
    best = labels = None
    for start in range(0, classes, step):
        values, index = _resize(logits[start:start + step].float(), (height, width)).max(dim=0)
        if best is None:
            best, labels = values, index.to(torch.uint8)
            continue
        better = values > best  # strictly: ties keep the lower class, as argmax does
        best = torch.where(better, values, best)
        labels = torch.where(better, (index + start).to(torch.uint8), labels)
    return labels


def pairs_to_host(pairs) -> list[tuple]:
    """`to_host` of tensor pairs (or triples...) of one dtype, in one copy."""
    pairs = list(pairs)
    host = iter(to_host([t for pair in pairs for t in pair]))
    return [tuple(next(host) for _ in pair) for pair in pairs]


def to_host(tensors) -> list[np.ndarray]:
    """Device tensors (one dtype) -> numpy arrays of the same shapes, contiguous, in one copy; the riders waiting
    on the same device with the same dtype (`Rider`) cross in it too."""
    import torch

    if not tensors:
        return []
    riders = Rider.board(tensors[0])
    crossing = [*tensors, *(rider.tensor for rider in riders)]
    # (On the CPU too: a new buffer, never a view of the model's outputs, and the same code as on CUDA.)
    try:
        host = copy_back(torch.cat([t.reshape(-1) for t in crossing])).numpy()
    except BaseException:
        Rider.unboard(riders)
        raise
    ends = np.cumsum([t.numel() for t in crossing])
    parts = [part.reshape(t.shape) for part, t in zip(np.split(host, ends[:-1]), crossing)]
    for rider, part in zip(riders, parts[len(tensors):]):
        rider.arrive(part)
    return parts[:len(tensors)]

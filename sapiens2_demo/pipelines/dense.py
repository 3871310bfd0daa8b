"""Dense task pipelines, batch-first: a list of RGB frames in, one typed result per frame out, each at
its frame's own size.

frames -> processor (stretch or keep-aspect pad) -> model (one forward per batch) -> post-processing -> results

Post-processing runs on the device in torch on CUDA (device_post.py: only final-size results cross to the CPU)
and in numpy/cv2 on the CPU, where that path measured faster (see device_post.use_device_post).

The image tabs call these with a batch of one (the `segment`, `estimate_*` wrappers); video and the batch
CLI pass several frames at once. A light image answer (`coded`, `mesh_strides`: no raw data asked for) takes the
maps at their files' bits on the device road (results.CodedMap: normals16.png's uint16, depth_mm.png's millimetres
and the mesh's vertices, matting's 8-bit PNGs), so no float32 map crosses; the numpy road's results stay float32
(nothing crosses there).
"""

from __future__ import annotations

import dataclasses
import os
import threading
from collections import OrderedDict
from functools import partial

import numpy as np

from ..models.inference import forward, frame_keys, image_size, input_size, once, preprocess, shared, upload
from ..models.manager import ModelManager
from ..models.registry import checkpoint
from ..results import NORMAL_CODE, UNIT_CODE, CodedMap, MattingResult, NormalsResult, PointmapResult, SegmentationResult
from ..util import content_digest
from . import device_post
from .device_post import use_device_post
from .postprocess import postprocess_matting, postprocess_normals, postprocess_pointmap, upsample_labels

Frames = list[np.ndarray]


class SegmentationCache:
    """Bounded LRU of segmentations keyed by image content and checkpoint.

    Normals, depth and the All-tasks view all mask with the body-part segmentation; this makes one
    image cost one segmentation forward however many of them ask. An image's masked pointmap is kept here
    too (the depth task and the pose lift of one All-tasks request share it).
    """

    def __init__(self, max_items: int = 16):
        self.max_items = max_items
        self._items: OrderedDict[tuple, SegmentationResult] = OrderedDict()
        self._fresh_locks()
        os.register_at_fork(after_in_child=self._fresh_locks)  # ZeroGPU forks workers: no inherited held lock

    def _fresh_locks(self) -> None:
        self._lock = threading.Lock()
        self._key_locks: dict[tuple, threading.Lock] = {}

    @staticmethod
    def key(image: np.ndarray, repo_id: str, revision: str) -> tuple:
        return content_digest(image), repo_id, revision

    def get_or_compute(self, key: tuple, compute) -> SegmentationResult:
        """The stored result (a copy marked `reused`: the request's notes say so rather than time it), or the
        computed one, stored."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return dataclasses.replace(self._items[key], reused=True)
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # two tabs asking at once for one image share one forward
            with self._lock:
                if key in self._items:
                    return dataclasses.replace(self._items[key], reused=True)
            result = compute()
            with self._lock:
                self._items[key] = result
                while len(self._items) > self.max_items:
                    self._items.popitem(last=False)
                self._key_locks.pop(key, None)
            return result


# -- batch pipelines ------------------------------------------------------------------------------------
# Each runs in two stages: `*_start(frames, ...)` pre-processes and runs the forward, and returns `finish`, a
# function of no arguments that post-processes and copies the results back. The *_batch functions call both at
# once; a video's GPU call runs a batch's finish beside the next batch's start (gpu.infer: overlapped batches).
def segment_batch(frames: Frames, manager: ModelManager, size: str = "0.4b",
                  cache: SegmentationCache | None = None) -> list[SegmentationResult]:
    """Body-part labels (H, W) uint8 per frame; with a cache, frames seen before cost no forward."""
    ckpt = checkpoint("seg", size)
    if cache is None:
        return segment_start(frames, manager, size)() if frames else []
    return [cache.get_or_compute(SegmentationCache.key(f, ckpt.repo_id, ckpt.revision),
                                 lambda f=f: segment_start([f], manager, size)()[0]) for f in frames]


def segment_start(frames: Frames, manager: ModelManager, size: str = "0.4b"):
    """Finishes with the SegmentationResults; one forward for the same frames among a call's jobs (`sharing`)."""
    return shared(("segment", size, *frame_keys(frames)), lambda: once(_segment_start(frames, manager, size)))


def _segment_start(frames: Frames, manager: ModelManager, size: str):
    loaded = manager.get(checkpoint("seg", size))
    if use_device_post(loaded.device):
        labels = labels_start(_uploaded(frames, loaded.device), manager, size)
        return lambda: [SegmentationResult(labels=label) for label in device_post.to_host(labels())]
    logits = forward(loaded, preprocess(loaded, frames, "seg"))["logits"].numpy()
    return lambda: [SegmentationResult(labels=upsample_labels(z, f.shape[:2])) for z, f in zip(logits, frames)]


def normals_batch(frames: Frames, manager: ModelManager, size: str = "0.4b",
                  masks: list[np.ndarray | None] | None = None, coded: bool = False) -> list[NormalsResult]:
    maps = normals_start(frames, manager, size, coded)() if frames else []
    return [NormalsResult(normals=n, mask=m) for n, m in zip(maps, _masks(masks, frames))]


def normals_start(frames: Frames, manager: ModelManager, size: str = "0.4b", coded: bool = False):
    """Finishes with (H, W, 3) float32 unit normals per frame; `coded`, on the device road: normals16.png's codes
    (a CodedMap each, half the bytes back)."""
    loaded = manager.get(checkpoint("normal", size))
    if use_device_post(loaded.device):
        maps = normals_device_start(_uploaded(frames, loaded.device), manager, size)
        if coded:
            return lambda: [CodedMap(c, *NORMAL_CODE)
                            for c in device_post.uint16_to_host(device_post.normal_codes(maps()))]
        return lambda: device_post.to_host(maps())
    raw, model_hw = forward(loaded, preprocess(loaded, frames, "normal"))["normals"], input_size(loaded.processor)
    return lambda: [postprocess_normals(r, f.shape[:2], model_hw) for r, f in zip(raw, frames)]


def pointmap_batch(frames: Frames, manager: ModelManager, size: str = "0.4b",
                   masks: list[np.ndarray | None] | None = None,
                   cache: SegmentationCache | None = None, mesh_strides: list[int] | None = None) -> list[PointmapResult]:
    """Metric pointmaps; with a cache, a frame seen before with the same masking (and lightness) costs no forward."""
    if not frames:
        return []
    if not use_device_post(manager.device):
        mesh_strides = None  # nothing crosses: the float points, shared in the cache with the pose lift's
    strides = mesh_strides or [None] * len(frames)
    if cache is not None:
        ckpt = checkpoint("pointmap", size)
        masked = masks is not None and any(m is not None for m in masks)
        return [cache.get_or_compute((*SegmentationCache.key(f, ckpt.repo_id, ckpt.revision), masked, s),
                                     lambda f=f, m=m, s=s: pointmap_start([f], manager, size, [m],
                                                                          None if s is None else [s])()[0])
                for f, m, s in zip(frames, _masks(masks, frames), strides)]
    return pointmap_start(frames, manager, size, masks, mesh_strides)()


def pointmap_start(frames: Frames, manager: ModelManager, size: str = "0.4b", masks=None,
                   mesh_strides: list[int] | None = None):
    """Finishes with the PointmapResults; `masks`: a list (or None per frame), or a function of no arguments
    giving one (another stage's finish). `mesh_strides` (a light answer), on the device road: each frame's depth
    PNG millimetres and its points every stride pixels (the surface mesh's grid) cross instead of its points."""
    loaded = manager.get(checkpoint("pointmap", size))
    on_device = use_device_post(loaded.device)
    images = _uploaded(frames, loaded.device) if on_device else frames
    outputs = forward(loaded, preprocess(loaded, images, "pointmap"), on_device=on_device)
    model_hw = input_size(loaded.processor)
    scales = _scales(outputs, len(frames))

    def finish() -> list[PointmapResult]:
        if on_device and mesh_strides is not None:
            return _light_pointmaps(outputs["pointmaps"], scales, frames, model_hw, mesh_strides, masks)
        if on_device:
            maps = device_post.pointmaps(outputs["pointmaps"], scales, _sizes(frames), model_hw)
        else:
            maps = [postprocess_pointmap(outputs["pointmaps"][i], float(scales[i]), f.shape[:2], model_hw)
                    for i, f in enumerate(frames)]
        results = []
        values = device_post.to_host([scales])[0] if on_device else scales  # one copy, not a read per frame
        for i, (points, mask) in enumerate(zip(maps, _masks(masks() if callable(masks) else masks, frames))):
            scale = float(values[i])
            focal = model_hw[1] / scale  # fx in model-input pixels (768 / scale)
            results.append(PointmapResult(points=points, scale=scale, focal_length=focal, mask=mask))
        return results

    return finish


def _light_pointmaps(maps, scales, frames, model_hw, mesh_strides, masks) -> list[PointmapResult]:
    """A light answer's PointmapResults: the depth PNG's millimetres (uint16) in one copy, the mesh grids and the
    scales (float32) in another."""
    points = device_post.pointmap_tensors(maps, scales, _sizes(frames), model_hw)
    depth = device_post.uint16_to_host(device_post.depth_codes(points))
    grids = [p[::stride, ::stride] for p, stride in zip(points, mesh_strides)]
    *grids, values = device_post.to_host([*grids, scales.float()])
    return [PointmapResult(points=None, scale=float(scale), focal_length=model_hw[1] / float(scale), mask=mask,
                           depth_mm=mm, grid=grid, grid_stride=int(stride))
            for mm, grid, scale, stride, mask in zip(depth, grids, values, mesh_strides,
                                                     _masks(masks() if callable(masks) else masks, frames))]


def matting_batch(frames: Frames, manager: ModelManager, size: str = "1b", coded: bool = False) -> list[MattingResult]:
    return matting_start(frames, manager, size, coded)() if frames else []


def matting_start(frames: Frames, manager: ModelManager, size: str = "1b", coded: bool = False):
    """`coded`, on the device road: the 8-bit alpha and foreground and the RGBA PNG's colour cross (uint8), not
    float32 maps."""
    loaded = manager.get(checkpoint("matting", size))
    if use_device_post(loaded.device):
        pairs = matting_device_start(_uploaded(frames, loaded.device), manager, size)
        if coded:
            return lambda: [MattingResult(alpha=CodedMap(a, *UNIT_CODE), foreground=CodedMap(f, *UNIT_CODE), colour=c)
                            for a, f, c in device_post.pairs_to_host(device_post.matting_codes(pairs()))]
        return lambda: [MattingResult(alpha=a, foreground=f) for a, f in device_post.pairs_to_host(pairs())]
    outputs = forward(loaded, preprocess(loaded, frames, "matting"))

    def finish() -> list[MattingResult]:
        pairs = [postprocess_matting(fg, alpha, frame.shape[:2])
                 for fg, alpha, frame in zip(outputs["foregrounds"], outputs["alphas"], frames)]
        return [MattingResult(alpha=alpha, foreground=foreground) for alpha, foreground in pairs]

    return finish


# -- results left on the device (CUDA): RGB frames or upload's (3, H, W) uint8 tensors in; each returns finish() ->
# full-size tensors there (the CUDA path of the *_batch functions above is these plus one copy back; tasks/drawn.py
# draws on them there)
def labels_start(images, manager: ModelManager, size: str = "0.4b"):
    """One forward for the same images among a call's jobs (`sharing`: their uploads are shared too)."""
    return shared(("labels", size, *frame_keys(images)), lambda: once(_labels_start(images, manager, size)))


def _labels_start(images, manager: ModelManager, size: str):
    loaded = manager.get(checkpoint("seg", size))
    logits = forward(loaded, preprocess(loaded, images, "seg"), on_device=True)["logits"]
    return lambda: device_post.segmentation_label_tensors(logits, _sizes(images))


def normals_device_start(images, manager: ModelManager, size: str = "0.4b"):
    loaded = manager.get(checkpoint("normal", size))
    raw = forward(loaded, preprocess(loaded, images, "normal"), on_device=True)["normals"]
    return lambda: device_post.normal_tensors(raw, _sizes(images), input_size(loaded.processor))


def pointmaps_device_start(images, manager: ModelManager, size: str = "0.4b"):
    loaded = manager.get(checkpoint("pointmap", size))
    outputs = forward(loaded, preprocess(loaded, images, "pointmap"), on_device=True)
    return lambda: device_post.pointmap_tensors(outputs["pointmaps"], _scales(outputs, len(images)), _sizes(images),
                                                input_size(loaded.processor))


def pointmaps_with_scales(images, manager: ModelManager, size: str = "0.4b"):
    """`pointmaps_device_start`'s finish, with the model's (B,) scales (a tensor there) and its input (height, width)."""
    loaded = manager.get(checkpoint("pointmap", size))
    outputs = forward(loaded, preprocess(loaded, images, "pointmap"), on_device=True)
    model_hw, scales = input_size(loaded.processor), _scales(outputs, len(images))
    finish = partial(device_post.pointmap_tensors, outputs["pointmaps"], scales, _sizes(images), model_hw)
    return finish, scales, model_hw


def matting_device_start(images, manager: ModelManager, size: str = "1b"):
    loaded = manager.get(checkpoint("matting", size))
    outputs = forward(loaded, preprocess(loaded, images, "matting"), on_device=True)
    return lambda: device_post.matting_tensors(outputs["foregrounds"], outputs["alphas"], _sizes(images))


def uploaded_once(frames, manager: ModelManager) -> list:
    """On the device road, the frames uploaded now, so the several forwards of one batch (the body-part mask's
    and the task's) read one copy; elsewhere the frames as they are."""
    return _uploaded(frames, manager.device) if use_device_post(manager.device) else frames


def _uploaded(frames, device) -> list:
    """RGB frames as `upload`'s device tensors (pinned memory, copied without waiting for the device), so a
    batch's start queues behind the last batch's forward instead of waiting for it; tensors as they are."""
    return upload(frames, device) if frames and isinstance(frames[0], np.ndarray) else list(frames)


def _scales(outputs, count: int):
    """The pointmap model's scale per frame, a (count,) tensor where the model gives it; 1 otherwise."""
    import torch

    scales = outputs.get("scales")
    if scales is None:
        return torch.ones(count, dtype=torch.float32, device=outputs["pointmaps"].device)
    return scales.reshape(count, -1)[:, 0]


def _sizes(frames) -> list[tuple[int, int]]:
    """(H, W) per frame: numpy (H, W, 3) images or `upload`'s (3, H, W) tensors."""
    return [image_size(f) for f in frames]


def _masks(masks, frames) -> list:
    if masks is None:
        return [None] * len(frames)
    if len(masks) != len(frames):
        raise ValueError(f"{len(masks)} masks for {len(frames)} frames")
    return list(masks)


# -- one image (the image tabs) -------------------------------------------------------------------------
def segment(image: np.ndarray, manager: ModelManager, size: str = "0.4b",
            cache: SegmentationCache | None = None) -> SegmentationResult:
    return segment_batch([image], manager, size, cache=cache)[0]


def estimate_normals(image: np.ndarray, manager: ModelManager, size: str = "0.4b",
                     mask: np.ndarray | None = None) -> NormalsResult:
    return normals_batch([image], manager, size, masks=[mask])[0]


def estimate_pointmap(image: np.ndarray, manager: ModelManager, size: str = "0.4b",
                      mask: np.ndarray | None = None) -> PointmapResult:
    return pointmap_batch([image], manager, size, masks=[mask])[0]


def estimate_matting(image: np.ndarray, manager: ModelManager, size: str = "1b") -> MattingResult:
    return matting_batch([image], manager, size)[0]

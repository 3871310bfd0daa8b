"""Steady over time: a per-pixel filter for video normals and depth that removes frame-to-frame flicker where
the scene is still and follows it at once where it moves.

Each pixel's output is an exponential moving average of the model's maps, y = y_prev + a * (x - y_prev), with
a = STILL_WEIGHT where the input frame did not change and a = 1 (a reset: the frame's own value) where it did.
"Changed" is read from the input frames, not the outputs: the grey frame, averaged over DOWNSCALE x DOWNSCALE
blocks (so sensor noise averages out), differs from the previous frame's by more than CHANGE_LEVELS grey levels,
grown by one block on every side (the model's maps smear an edge over a few pixels). The person mask
(background removal) is smoothed the same way and thresholded at one half. Normals are renormalised.

Runs in torch on the model's device; the filter's state (the last output, mask weight and block-averaged
frame) rides on the last result (`steady`), so the next batch, GPU call or chunk goes on from it. On the device road
(CUDA) the maps never leave the device when only pictures are wanted: the filter rides on the drawing
(tasks/drawn.py), its batches finished in order beside the next batch's forwards. Its state stays on the device
between the GPU calls of one process and crosses as numpy only to another (ZeroGPU's: `SteadyState` pickles as
numpy). At the end of every batch the state is rounded to float16, as where it crosses, so every road gives the
same maps.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import ledger

STILL_WEIGHT = 0.2  # the new frame's share where the scene is still: noise std / ~3, flicker / ~6 (white noise)
DOWNSCALE = 4  # pixels per block side for change detection
CHANGE_LEVELS = 6.0  # a block whose mean grey level moved by more than this (0-255) changed
NORMALS, POINTS = "normals", "points"  # the result field a steady map fills (normals are unit vectors)


@dataclass
class SteadyState:
    """Where the filter left off: numpy, or tensors on the device road's device (kept there between the GPU calls of
    one process; `on_host` before they cross to another). float16, as ZeroGPU's maps cross anyway (depth: under
    1 mm off at 4 m, below the 16-bit export's millimetre)."""

    grey: Any  # (h, w) float16: the last frame, grey, block-averaged
    value: Any  # (H, W, C) float16: the last output
    weight: Any | None  # (H, W) float16: the smoothed person mask, None without background removal

    def on_host(self) -> SteadyState:
        """The state as numpy (the tensors in one copy back)."""
        if isinstance(self.value, np.ndarray):
            return self
        from .device_post import to_host

        host = to_host([a for a in (self.grey, self.value, self.weight) if a is not None])
        return SteadyState(grey=host[0], value=host[1], weight=host[2] if len(host) > 2 else None)

    def __getstate__(self) -> dict:
        """Pickled (to another process: a ZeroGPU worker's answer) as numpy, never as device tensors."""
        return dict(vars(self.on_host()))


@dataclass
class SteadyCarry:
    """What the next chunk needs of the last result (not its maps: they are in the state)."""

    steady: SteadyState | None


def carried(result) -> SteadyCarry | None:
    """The last result of a chunk reduced to the filter's state (TaskSpec.carry)."""
    state = getattr(result, "steady", None)
    return None if state is None else SteadyCarry(state)


def _blocks(frame, device):
    """(H, W, 3) uint8 (or (3, H, W) on the device) -> (h, w) float32 grey, DOWNSCALE-block means (partial blocks at
    the edges count)."""
    import torch
    import torch.nn.functional as F

    if torch.is_tensor(frame):  # already on the device: upload's (3, H, W)
        rgb = frame[:3].float()
    else:
        rgb = ledger.to_device(np.ascontiguousarray(frame[..., :3]), device).permute(2, 0, 1).float()
    grey = (0.299 * rgb[0] + 0.587 * rgb[1] + 0.114 * rgb[2])[None, None]
    return F.avg_pool2d(grey, DOWNSCALE, ceil_mode=True, count_include_pad=False)[0, 0]


def _moving(grey, previous, shape):
    """(H, W) bool: where the scene changed since the previous frame (see the module docstring)."""
    import torch.nn.functional as F

    changed = ((grey - previous).abs() > CHANGE_LEVELS).float()[None, None]
    grown = F.max_pool2d(changed, 3, stride=1, padding=1)
    full = F.interpolate(grown, scale_factor=DOWNSCALE, mode="nearest")[0, 0, :shape[0], :shape[1]]
    return full > 0


class SteadyFilter:
    """`step(frame, value, mask) -> (value, mask)` frame by frame, in order; `state` where it left off."""

    def __init__(self, device, state: SteadyState | None = None, unit: bool = False):
        self.device, self.unit = device, unit
        self._grey = self._value = self._weight = None
        if state is None:
            return
        parts = [a for a in (state.grey, state.value, state.weight) if a is not None]
        if isinstance(state.value, np.ndarray):  # one upload of the three (float16), split there
            flat = ledger.to_device(np.concatenate([np.asarray(a, np.float16).ravel() for a in parts]), device)
            ends = np.cumsum([a.size for a in parts])
            parts = [flat[end - a.size:end].reshape(a.shape) for a, end in zip(parts, ends)]
        pieces = [a.float() for a in parts]  # (kept on the device by the last call: nothing crosses)
        self._grey, self._value = pieces[:2]
        self._weight = pieces[2] if state.weight is not None else None

    def step(self, frame: np.ndarray, value: np.ndarray, mask: np.ndarray | None):
        """frame (H, W, 3) uint8, value (H, W, C) float32, mask (H, W) bool or None -> filtered numpy copies."""
        x = ledger.to_device(np.asarray(value, np.float32), self.device)
        m = None if mask is None else ledger.to_device(np.asarray(mask, bool), self.device)
        out, kept = self.step_on_device(frame, x, m)
        return out.cpu().numpy(), None if kept is None else kept.cpu().numpy()

    def step_on_device(self, frame, x, m):
        """`step` where the values are: frame (H, W, 3) uint8 array or upload's (3, H, W) tensor, x (H, W, C) float32
        and m (H, W) bool (or None) tensors on the filter's device -> the filtered (value, mask) tensors there."""
        import torch

        grey = _blocks(frame, self.device)
        m = None if m is None else m.float()
        if self._value is None or self._value.shape != x.shape or self._grey.shape != grey.shape:
            out, weight = x.clone(), m  # the first frame (or a new size): nothing to blend with
        else:
            still = ~_moving(grey, self._grey, x.shape[:2]) & torch.isfinite(self._value).all(-1)
            share = torch.where(still, STILL_WEIGHT, 1.0)[..., None]
            blend = self._value + STILL_WEIGHT * (x - self._value)
            out = torch.where(still[..., None] & torch.isfinite(blend), blend, x)  # a reset is the frame's own value
            if self.unit:
                out = out / out.norm(dim=-1, keepdim=True).clamp_min(1e-6)
            weight = m
            if m is not None and self._weight is not None:
                weight = self._weight + share[..., 0] * (m - self._weight)
        self._grey, self._value, self._weight = grey, out, weight
        return out, None if weight is None else weight >= 0.5

    @property
    def state(self) -> SteadyState | None:
        """Where it left off, as numpy (one copy back)."""
        kept = self.kept()
        return None if kept is None else kept.on_host()

    def kept(self) -> SteadyState | None:
        """Where it left off, left where the filter runs (float16 tensors)."""
        if self._value is None:
            return None
        halves = [None if t is None else t.half() for t in (self._grey, self._value, self._weight)]
        return SteadyState(grey=halves[0], value=halves[1], weight=halves[2])

    def settle(self) -> None:
        """A batch's end: the state rounded to float16, as where it crosses (the host road's batches and ZeroGPU's
        calls), so the device road's maps are the host road's, batch for batch."""
        if self._value is not None:
            self._grey, self._value = self._grey.half().float(), self._value.half().float()
            self._weight = None if self._weight is None else self._weight.half().float()


def steady_results(frames: list[np.ndarray], results: list, field: str, device, previous=None,
                   unit: bool = False) -> list:
    """New results with `field` (normals / points) and `mask` filtered over the frames in order, going on from
    `previous` (the last result of the batch before, or its SteadyCarry); the last carries the state, which
    moves on: `previous` gives its up, so a GPU call sends back one state, not one per batch."""
    flt = SteadyFilter(device, getattr(previous, "steady", None), unit=unit)
    if getattr(previous, "steady", None) is not None:
        previous.steady = None
    steady = []
    for frame, result in zip(frames, results):
        value, mask = flt.step(frame, getattr(result, field), result.mask)
        steady.append(dataclasses.replace(result, **{field: value, "mask": mask}))
    if steady:
        steady[-1].steady = flt.state
    return steady


@dataclass
class Filtered:
    """A batch's maps filtered on the device road, left there."""

    values: list  # (H, W, C) float32 tensors: unit normals or XYZ
    masks: list  # (H, W) bool tensors (the smoothed person mask), or None each without background removal
    scales: Any = None  # pointmap: the model's (B,) scales tensor
    model_hw: tuple[int, int] | None = None  # pointmap: the model's input (height, width)


def filtered_start(images, manager, size: str, field: str, remove_background: bool, flt: SteadyFilter):
    """One batch of a steady video on the device road: its body-part and map (normals: field "normals", pointmaps:
    "points") forwards queued now on `images` (`upload`'s tensors); returns finish() -> Filtered, the batch's maps
    through `flt`, the video's filter (batches finish in order), its state rounded at the batch's end (`settle`)."""
    from . import dense

    labels = dense.labels_start(images, manager, size) if remove_background else None
    if field == NORMALS:
        maps, scales, model_hw = dense.normals_device_start(images, manager, size), None, None
    else:
        maps, scales, model_hw = dense.pointmaps_with_scales(images, manager, size)

    def finish() -> Filtered:
        masks = [label > 0 for label in labels()] if labels is not None else [None] * len(images)
        # (H, W, C) contiguous, as the host road's arrays are: a norm over C sums in that order only then
        filtered = [flt.step_on_device(image, value.contiguous(), mask)
                    for image, value, mask in zip(images, maps(), masks)]
        flt.settle()
        return Filtered([value for value, _ in filtered], [mask for _, mask in filtered], scales, model_hw)

    return finish


def steady_on_device(manager, size: str, frames: list, field: str, remove_background: bool, previous=None) -> list:
    """`steady_results` of normals (field "normals") or pointmaps ("points") on the device road: the frames cross
    once, the body-part mask, the maps and the filter stay on the device, and the filtered maps and masks cross back
    in one copy each (not the model's maps back, then up again and back filtered); the state stays there, on the
    last result. Equal to the host road's."""
    from ..results import NormalsResult, PointmapResult
    from . import dense
    from .device_post import to_host

    flt = SteadyFilter(manager.device, getattr(previous, "steady", None), unit=field == NORMALS)
    if getattr(previous, "steady", None) is not None:
        previous.steady = None
    images = dense.uploaded_once(frames, manager)
    done = filtered_start(images, manager, size, field, remove_background, flt)()
    maps = to_host(done.values)
    kept = to_host(done.masks) if remove_background else [None] * len(maps)
    if field == NORMALS:
        results = [NormalsResult(normals=n, mask=m) for n, m in zip(maps, kept)]
    else:
        scales = [float(s) for s in to_host([done.scales])[0]]
        results = [PointmapResult(points=p, scale=s, focal_length=done.model_hw[1] / s, mask=m)
                   for p, s, m in zip(maps, scales, kept)]
    if results:
        results[-1].steady = flt.kept()
    return results

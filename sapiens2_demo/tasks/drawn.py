"""Video and live pictures drawn where the model runs (`TaskSpec.draw`, used by gpu.infer on CUDA).

Each frame crosses to the device once as uint8, and is pre-processed, run, post-processed and drawn there;
only the picture comes back, in one copy for the batch. A video asks for this when its task writes no
per-frame data (nothing but the picture is wanted). On a CPU a task keeps its numpy/cv2 path unless this one
measured faster there (`TaskSpec.draw_on_cpu`: matting, 40 against 24 ms a 720p frame; docs/decisions.md).

draw(frames, manager, size, annotator, **pipeline_options) -> RGB uint8 pictures, one per frame; `annotator`
is the task's own renderer (its options, read as the host path reads them). Normals and depth steadied over time
are filtered there too (pipelines/steady.py): the video's filter rides on the renderer (`steadied`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..models.inference import upload
from ..pipelines import dense, steady
from ..pipelines.device_post import to_host
from ..render import on_device as draw
from ..util import at_once


def _masks(images, manager, size, remove_background: bool):
    """Starts the body-part forward; finishes with the person masks (label > 0), or None per image."""
    if not remove_background:
        return lambda: [None] * len(images)
    labels = dense.labels_start(images, manager, size)
    return lambda: [label > 0 for label in labels()]


# Each drawing runs in two stages, as the pipelines do: `start_*` uploads the frames and runs the forwards,
# and returns `finish`, which post-processes, draws and copies the pictures back (see pipelines/dense.py).
def start_segment(frames, manager, size, annotator, **_):
    images = upload(frames, manager.device)
    labels = dense.labels_start(images, manager, size)
    return lambda: to_host([draw.parts(annotator, image, label) for image, label in zip(images, labels())])


def start_normals(frames, manager, size, annotator, *, remove_background: bool = False,
                  temporal_smoothing: bool = False, **_):
    images = upload(frames, manager.device)
    maps, masks = _maps_start(images, manager, size, steady.NORMALS, remove_background, annotator, temporal_smoothing)
    return lambda: to_host([draw.normals(annotator, image, normals, mask)
                            for image, normals, mask in zip(images, maps(), masks())])


def start_pointmap(frames, manager, size, annotator, *, remove_background: bool = False,
                   temporal_smoothing: bool = False, **_):
    images = upload(frames, manager.device)
    maps, masks = _maps_start(images, manager, size, steady.POINTS, remove_background, annotator, temporal_smoothing)

    def finish():
        pictures, scales = [], []
        for points, mask in zip(maps(), masks()):
            pictures.append(draw.depth(annotator, points, mask))
            scales.append(draw.depth_bounds_bytes(annotator))  # this frame's colour scale, for its bar
        host = to_host(pictures + scales)  # the pictures and their scales in one copy
        scales = [draw.read_depth_bounds(raw) for raw in host[len(pictures):]]
        if scales:
            annotator.bounds = scales[-1]  # the host's view of the scale the device keeps
        return [annotator.with_bar(picture, bounds) for picture, bounds in zip(host[:len(pictures)], scales)]

    return finish


def _maps_start(images, manager, size, field: str, remove_background: bool, annotator, temporal_smoothing: bool):
    """Starts the body-part and map forwards; returns (maps, masks), two finishes: the maps, then the person masks (or
    None each); with temporal_smoothing both run through the video's steady filter, which the annotator carries
    (`steadied`), when the maps are asked for (so: maps first)."""
    if not temporal_smoothing:
        masks = _masks(images, manager, size, remove_background)
        maps = (dense.normals_device_start if field == steady.NORMALS else dense.pointmaps_device_start)(images, manager,
                                                                                                     size)
        return maps, masks
    if not isinstance(annotator, SteadyDrawing):
        raise ValueError("Steady maps are drawn on the device by a renderer made with steady=True.")
    filtered = steady.filtered_start(images, manager, size, field, remove_background,
                                     annotator.filter_on(manager.device))
    done = []

    def maps():
        done.append(filtered())
        return done[-1].values

    return maps, lambda: done[-1].masks


def start_matting(frames, manager, size, annotator, **_):
    images = upload(frames, manager.device)
    pairs = dense.matting_device_start(images, manager, size)
    return lambda: to_host([draw.matting(annotator, alpha, foreground) for alpha, foreground in pairs()])


# -- steady over time (temporal_smoothing) drawn on the device ---------------------------------------------------------
@dataclass
class SteadyDrawingState:
    """Where a steady drawing left off: the annotator's own state (the depth colour scale) and the filter's."""

    drawing: Any
    steady: steady.SteadyState | None  # on the device within one process; pickled as numpy (steady.SteadyState)


class SteadyDrawing:
    """A renderer of steady maps drawn on the device: the task's annotator (what is drawn, every other attribute
    read from it) and the video's steady filter, made on the first batch and going on across the batches of a GPU
    call (finished in order) and, with `state` (the drawing's, carried as `draw_state`), across calls."""

    OWN = ("inner", "unit", "filter", "_given", "state")

    def __init__(self, inner, unit: bool):
        self.inner, self.unit = inner, unit
        self.filter: steady.SteadyFilter | None = None
        self._given: steady.SteadyState | None = None  # the state to go on from, until the filter is made

    def __getattr__(self, name):  # what is not its own is the annotator's
        if name == "inner":  # not set yet: no recursion
            raise AttributeError(name)
        return getattr(self.inner, name)

    def __setattr__(self, name, value):  # so is what the drawing writes (the depth colour scale)
        if name in self.OWN:
            object.__setattr__(self, name, value)
        else:
            setattr(self.inner, name, value)

    def filter_on(self, device) -> steady.SteadyFilter:
        if self.filter is None:
            self.filter = steady.SteadyFilter(device, self._given, unit=self.unit)
        return self.filter

    @property
    def state(self) -> SteadyDrawingState:
        kept = self.filter.kept() if self.filter is not None else self._given
        return SteadyDrawingState(getattr(self.inner, "state", None), kept)

    @state.setter
    def state(self, state: SteadyDrawingState | None) -> None:
        if hasattr(self.inner, "state"):
            self.inner.state = getattr(state, "drawing", None)
        self.filter, self._given = None, getattr(state, "steady", None)

    def annotate(self, frame, result):
        return self.inner.annotate(frame, result)


def steadied(renderer, unit: bool = False):
    """The task's renderer, which with `steady` (a video drawn on the device with temporal_smoothing: jobs/video.py
    asks for it) carries the filter (`SteadyDrawing`); unit: the maps are unit vectors (normals)."""

    def make(steady: bool = False, **options):
        annotator = renderer(**options)
        return SteadyDrawing(annotator, unit) if steady else annotator

    return make


draw_segment, draw_normals, draw_pointmap, draw_matting = map(at_once, (start_segment, start_normals,
                                                                        start_pointmap, start_matting))

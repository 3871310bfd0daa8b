"""Video and live pictures drawn where the model runs (`TaskSpec.draw`, used by gpu.infer on CUDA).

Each frame crosses to the device once as uint8, and is pre-processed, run, post-processed and drawn there;
only the picture comes back, in one copy for the batch. A video asks for this when its task writes no
per-frame data (nothing but the picture is wanted). On a CPU a task keeps its numpy/cv2 path unless this one
measured faster there (`TaskSpec.draw_on_cpu`: matting, 40 against 24 ms a 720p frame, benchmarks/bench_draw.py).

draw(frames, manager, size, annotator, **pipeline_options) -> RGB uint8 pictures, one per frame; `annotator`
is the task's own renderer (its options, read as the host path reads them).
"""

from __future__ import annotations

from ..models.inference import upload
from ..pipelines import dense
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


def start_normals(frames, manager, size, annotator, *, remove_background: bool = False, **_):
    images = upload(frames, manager.device)
    masks = _masks(images, manager, size, remove_background)
    maps = dense.normals_device_start(images, manager, size)
    return lambda: to_host([draw.normals(annotator, image, normals, mask)
                            for image, normals, mask in zip(images, maps(), masks())])


def start_pointmap(frames, manager, size, annotator, *, remove_background: bool = False, **_):
    images = upload(frames, manager.device)
    masks = _masks(images, manager, size, remove_background)
    maps = dense.pointmaps_device_start(images, manager, size)

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


def start_matting(frames, manager, size, annotator, **_):
    images = upload(frames, manager.device)
    pairs = dense.matting_device_start(images, manager, size)
    return lambda: to_host([draw.matting(annotator, alpha, foreground) for alpha, foreground in pairs()])


draw_segment, draw_normals, draw_pointmap, draw_matting = map(at_once, (start_segment, start_normals,
                                                                        start_pointmap, start_matting))

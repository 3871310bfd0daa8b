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
from ..pipelines import on_device
from ..pipelines.device_post import to_host
from ..render import on_device as draw


def _device(manager, task: str, size: str) -> str:
    from ..models.registry import checkpoint

    return manager.get(checkpoint(task, size)).device


def draw_segment(frames, manager, size, annotator, **_):
    images = upload(frames, _device(manager, "seg", size))
    labels = on_device.labels(images, manager, size)
    return to_host([draw.parts(annotator, image, label) for image, label in zip(images, labels)])


def draw_normals(frames, manager, size, annotator, *, remove_background: bool = False, **_):
    images = upload(frames, _device(manager, "normal", size))
    masks = ([label > 0 for label in on_device.labels(images, manager, size)] if remove_background
             else [None] * len(images))
    maps = on_device.normals(images, manager, size)
    return to_host([draw.normals(annotator, image, normals, mask)
                    for image, normals, mask in zip(images, maps, masks)])


def draw_matting(frames, manager, size, annotator, **_):
    images = upload(frames, _device(manager, "matting", size))
    return to_host([draw.matting(annotator, alpha, foreground)
                    for alpha, foreground in on_device.matting(images, manager, size)])

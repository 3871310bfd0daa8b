"""One entry to every pipeline: `run_batch(task, frames, manager, size, **options)` -> one result per frame.

The image tabs, the video path, the live tab, the batch CLI and the ZeroGPU call all come through here, so a
task means the same thing everywhere. Task names are the registry's: pose, seg, normal, pointmap, matting, pretrain.
"""

from __future__ import annotations

import numpy as np

from ..models.manager import ModelManager
from ..models.registry import default_size
from ..pose.pipeline import Detections, estimate_pose_batch
from . import dense

TASK_NAMES = ("pose", "seg", "normal", "pointmap", "matting", "pretrain")
POSE_OPTIONS = ("detections", "flip_test", "score_threshold", "nms_iou", "max_people", "batch_size")


def run_batch(task: str, frames: list[np.ndarray], manager: ModelManager, size: str | None = None, *,
              seg_cache: dense.SegmentationCache | None = None, remove_background: bool = False,
              **options) -> list:
    """Results for `frames` (RGB uint8 arrays): PoseResult, SegmentationResult, NormalsResult, PointmapResult
    or MattingResult, each at its frame's size.

    remove_background (normal, pointmap): mask with the body-part segmentation of the same size.
    Pose options: detections (a Detections per frame: user boxes or tracked boxes; None runs the detector),
    flip_test, score_threshold, nms_iou, max_people, batch_size.
    """
    if task not in TASK_NAMES:
        raise ValueError(f"Unknown task {task!r}; choose one of {', '.join(TASK_NAMES)}.")
    size = size or default_size(task)
    unknown = set(options) - (set(POSE_OPTIONS) if task == "pose" else set())
    if unknown:
        raise TypeError(f"{task} takes no option(s) {', '.join(sorted(unknown))}")
    if task == "pose":
        return estimate_pose_batch(frames, manager, size, **options)
    if task == "seg":
        return dense.segment_batch(frames, manager, size, cache=seg_cache)
    if task == "matting":
        return dense.matting_batch(frames, manager, size)
    if task == "pretrain":  # backbone features: CLS embedding + patch features
        from .features import extract_features

        return extract_features(frames, manager, size)
    masks = None
    if remove_background:
        masks = [r.foreground for r in dense.segment_batch(frames, manager, size, cache=seg_cache)]
    if task == "normal":
        return dense.normals_batch(frames, manager, size, masks=masks)
    return dense.pointmap_batch(frames, manager, size, masks=masks)


__all__ = ["run_batch", "TASK_NAMES", "Detections"]

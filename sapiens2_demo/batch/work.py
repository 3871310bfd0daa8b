"""The work on one batch of inputs, the same for both engines: images through every task's pipeline
(batched), exports written with the app's writers into a temporary folder and renamed into place, videos
through the Video tab's path."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import numpy as np

from ..export.task_files import write_task_files
from .inputs import InputItem
from .manifest import OPTIONAL, Record, clear_temporaries, expected_files, publish, relative_outputs, temporary_folder
from .options import MASKED_TASKS, BatchOptions

log = logging.getLogger(__name__)


class VideoUnsupported(ValueError):
    """A video cannot take this run's tasks (features are per image), or the install has no video path."""


def error_message(error: BaseException) -> str:
    """User errors (ValueError subclasses such as ImageError) are sentences already; others get their type."""
    text = str(error).strip() or type(error).__name__
    return text if isinstance(error, ValueError) else f"{type(error).__name__}: {text}"


def preload(manager, options: BatchOptions) -> None:
    """Load every checkpoint the run needs now: a missing one stops the run (CheckpointUnavailable) rather
    than failing every input with the same message."""
    for ckpt in options.checkpoints():
        manager.get(ckpt)


# -- images --------------------------------------------------------------------------------------------
def read_image(item: InputItem):
    """(LoadedImage, seconds), or (the error, seconds) for an unreadable file: recorded, the run goes on."""
    from ..media.image import load_image

    started = time.perf_counter()
    try:
        return load_image(item.path), time.perf_counter() - started
    except Exception as error:  # noqa: BLE001
        return error, time.perf_counter() - started


def infer_images(frames: list[np.ndarray], manager, options: BatchOptions, seg_cache) -> list[dict]:
    """{task: result} per frame. The segmentation runs once per batch (batched) and is shared through
    `seg_cache` with the tasks that mask with it, as the All-tasks tab shares it."""
    from ..models.registry import checkpoint
    from ..pipelines.dense import SegmentationCache
    from ..pipelines.run import run_batch

    per_frame: list[dict] = [{} for _ in frames]
    segmentations = None
    if options.needs_segmentation:
        size = options.size_for("seg")
        segmentations = run_batch("seg", frames, manager, size)
        ckpt = checkpoint("seg", size)
        for frame, seg in zip(frames, segmentations):
            seg_cache.get_or_compute(SegmentationCache.key(frame, ckpt.repo_id, ckpt.revision), lambda seg=seg: seg)
    for task in options.tasks:
        size = options.size_for(task)
        if task == "seg":
            results = segmentations
        elif task == "features":
            from ..pipelines.features import extract_features

            results = list(zip(extract_features(frames, manager, size), segmentations))
        elif task == "pose":
            results = run_batch("pose", frames, manager, size, **options.pose_options())
        elif task in MASKED_TASKS:
            results = run_batch(task, frames, manager, size, seg_cache=seg_cache,
                                remove_background=options.remove_background)
        else:
            results = run_batch(task, frames, manager, size)
        for slot, result in zip(per_frame, results):
            slot[task] = result
    return per_frame


def infer_isolated(frames: list[np.ndarray], manager, options: BatchOptions, seg_cache) -> list[dict | Exception]:
    """infer_images, and when a batch fails, each frame alone: one bad frame fails only itself."""
    from ..models.manager import CheckpointUnavailable

    try:
        return infer_images(frames, manager, options, seg_cache)
    except CheckpointUnavailable:  # not the input's fault: stop the run and say which model
        raise
    except Exception as error:  # noqa: BLE001 - recorded per input, the run goes on
        if len(frames) == 1:
            return [error]
        log.warning("a batch of %d failed (%s); retrying its images one by one", len(frames), error_message(error))
    answers: list[dict | Exception] = []
    for frame in frames:
        try:
            answers += infer_images([frame], manager, options, seg_cache)
        except Exception as error:  # noqa: BLE001
            answers.append(error)
    return answers


def _write_features(answer, folder: Path) -> list[Path]:
    from ..export.features import write_features
    from ..pipelines.features import patch_mask
    from ..render.features import pca_rgb, upsample_to_image

    result, segmentation = answer
    mask = patch_mask(segmentation.foreground, result.grid_hw)
    picture = upsample_to_image(pca_rgb(result.patches, mask if mask.sum() >= 2 else None), result.image_hw)
    return write_features(result, picture, folder, prefix="features")


def write_image_outputs(item: InputItem, rgb: np.ndarray, results: dict, output_dir: Path,
                        options: BatchOptions) -> list[Path]:
    """Every task's exports for one image, under DIR/<name>/<task>/; returns the final paths."""
    folder = item.folder(output_dir)
    clear_temporaries(folder)
    written: list[Path] = []
    for task in options.tasks:
        tmp = temporary_folder(folder, task)
        try:
            if task == "features":
                files = _write_features(results[task], tmp)
            else:
                files = write_task_files(task, rgb, results[task], tmp, keypoint_threshold=options.keypoint_threshold)
            written += publish(tmp, folder / task, files, expected_files(task), OPTIONAL.get(task, ()))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return written


def finish_image(item: InputItem, rgb: np.ndarray, answer: dict | Exception, output_dir: Path,
                 options: BatchOptions, seconds: float) -> Record:
    """Write one image's exports (or record its failure); `seconds` so far (reading, its model share)."""
    started = time.perf_counter()
    try:
        if isinstance(answer, Exception):
            raise answer
        files, error = write_image_outputs(item, rgb, answer, output_dir, options), None
    except Exception as failure:  # noqa: BLE001 - recorded, the run goes on
        files, error = None, failure
    return image_record(item, output_dir, options, files, error, seconds + time.perf_counter() - started)


def image_record(item: InputItem, output_dir: Path, options: BatchOptions, files: list[Path] | None = None,
                 error: BaseException | str | None = None, seconds: float = 0.0) -> Record:
    if error is not None:
        message = error if isinstance(error, str) else error_message(error)
        return Record(str(item.path), "failed", [], message, seconds, list(options.tasks))
    return Record(str(item.path), "ok", relative_outputs(files or [], output_dir), None, seconds, list(options.tasks))


# -- videos --------------------------------------------------------------------------------------------
def process_video_item(item: InputItem, manager, output_dir: Path, options: BatchOptions) -> Record:
    """Every task's Video-tab exports for one video; failures become a failed record."""
    started = time.perf_counter()
    try:
        files = _video_outputs(item, manager, output_dir, options)
    except Exception as error:  # noqa: BLE001 - recorded, the run goes on
        return image_record(item, output_dir, options, error=error, seconds=time.perf_counter() - started)
    return image_record(item, output_dir, options, files=files, seconds=time.perf_counter() - started)


def _video_outputs(item: InputItem, manager, output_dir: Path, options: BatchOptions) -> list[Path]:
    try:
        from ..pipelines.video import process_video
    except ImportError as error:
        raise VideoUnsupported("Video inputs need sapiens2_demo.pipelines.video, which this install lacks.") from error
    from .. import gpu

    manager_key = gpu.register(manager)  # the video path reaches its models through the GPU boundary
    folder = item.folder(output_dir)
    clear_temporaries(folder)
    written: list[Path] = []
    tasks = video_tasks(options.tasks)
    if not tasks:
        raise VideoUnsupported("The features task takes images only; choose another task for videos.")
    for task in tasks:  # one pass per task: each task's folder holds what the Video tab gives for it
        tmp = temporary_folder(folder, task)
        try:
            output = process_video(item.path, task, manager_key, tmp, **video_options(task, options))
            files = [Path(p) for p in output.files]
            written += publish(tmp, folder / task, files, tuple(p.name for p in files))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return written


def video_tasks(tasks) -> list[str]:
    return [task for task in tasks if task != "features"]  # features are per image (the Features tab)


def video_options(task: str, options: BatchOptions) -> dict:
    """The Video tab's options from the run's. A batch run processes whole videos: the app's duration and
    file-size limits are lifted (the longest-side limit, SAPIENS2_VIDEO_MAX_SIDE, still applies)."""
    import math

    from ..pipelines.video import VideoLimits

    chosen = dict(size=options.size_for(task), batch_size=options.batch_size,
                  limits=VideoLimits(max_seconds=math.inf, max_bytes=2**62))
    if task == "pose":
        chosen.update(detection_threshold=options.detection_threshold, max_people=options.max_people,
                      flip_test=options.flip_test, keypoint_threshold=options.keypoint_threshold)
    elif task in MASKED_TASKS:
        chosen["remove_background"] = options.remove_background
    return chosen

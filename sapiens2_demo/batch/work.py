"""The work on one batch of inputs, the same for both engines: images through the executor (the app's GPU
boundary, batched), exports written with the tasks' own writers into a temporary folder and renamed into place,
videos through the Video tab's path. Batch keeps only scheduling, reading, writing and the manifest."""

from __future__ import annotations

import logging
import shutil
import time
from pathlib import Path

import numpy as np

from .. import gpu
from .. import tasks as task_specs
from .inputs import InputItem
from .manifest import Record, clear_temporaries, publish, relative_outputs, temporary_folder
from .options import BatchOptions

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
    """{task: result} per frame, from one executor call: the segmentation runs once per batch and is shared
    through `seg_cache` with the tasks that mask with it, as in the All-tasks tab."""
    jobs = options.jobs()
    answers = gpu.answers(gpu.register(manager, seg_cache), frames, jobs)
    return [{job.task: answer[i] for job, answer in zip(jobs, answers)} for i in range(len(frames))]


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


def write_image_outputs(item: InputItem, rgb: np.ndarray, results: dict, output_dir: Path,
                        options: BatchOptions) -> list[Path]:
    """Every task's exports for one image, under DIR/<name>/<task>/; returns the final paths."""
    folder = item.folder(output_dir)
    clear_temporaries(folder)
    written: list[Path] = []
    for task in options.tasks:
        spec = task_specs.get(task)
        tmp = temporary_folder(folder, spec.out_folder)
        try:
            files = spec.write_files(rgb, results[task], tmp, **options.task_options())
            written += publish(tmp, folder / spec.out_folder, files, options.required_files(task),
                               spec.optional_files)
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
    from ..jobs.video import process_video

    manager_key = gpu.register(manager)  # the video path reaches its models through the GPU boundary
    folder = item.folder(output_dir)
    clear_temporaries(folder)
    written: list[Path] = []
    tasks = video_tasks(options.tasks)
    if not tasks:
        raise VideoUnsupported("The features task takes images only; choose another task for videos.")
    for task in tasks:  # one pass per task: each task's folder holds what the Video tab gives for it
        out_folder = task_specs.get(task).out_folder
        tmp = temporary_folder(folder, out_folder)
        try:
            output = process_video(item.path, task, manager_key, tmp, **video_options(task, options))
            files = [Path(p) for p in output.files]
            written += publish(tmp, folder / out_folder, files, tuple(p.name for p in files))
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return written


def video_tasks(tasks) -> list[str]:
    return [task for task in tasks if task_specs.get(task).video]  # e.g. features are per image


def video_options(task: str, options: BatchOptions) -> dict:
    """The Video tab's options from the run's. A batch run processes whole videos: the app's duration and
    file-size limits are lifted (the longest-side limit, SAPIENS2_VIDEO_MAX_SIDE, still applies)."""
    import math

    from ..jobs.video import VideoLimits

    return dict(size=options.size_for(task), batch_size=options.batch_size, frame_exports=True,  # datasets want the data
                limits=VideoLimits(max_seconds=math.inf, max_bytes=2**62),
                motion_3d=options.lift_3d,  # videos: motion capture (pose_3d.jsonl, a BVH per person, motion.glb)
                rerun=options.rerun,  # recording.rrd
                **{k: v for k, v in options.task_options().items() if k not in ("lift_3d", "raw_data")})

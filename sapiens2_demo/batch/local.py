"""The local engine: reading and writing overlap with the model, so the model is kept busy.

    loader threads (read and decode images ahead, in order)
        -> this thread: batches of --batch-size images through every task's pipeline
            -> writer thread (exports renamed into place, manifest line, progress)

The queues are bounded (a few batches), so memory stays flat however many inputs there are. A crash or
Ctrl-C loses at most the batch in flight: finished batches still queued for the writer are written first.
Videos go after the images, one at a time (the video path batches their frames itself).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from itertools import islice
from pathlib import Path

from .inputs import InputItem
from .options import BatchOptions
from .report import Progress
from .work import finish_image, image_record, infer_isolated, preload, process_video_item, read_image

log = logging.getLogger(__name__)


def run_local(items: list[InputItem], output_dir: Path, options: BatchOptions, progress: Progress,
              workers: int = 2) -> None:
    """Process `items` (the pending ones) into `output_dir`, reporting each through `progress`."""
    from ..pipelines.dense import SegmentationCache

    if not items:
        return
    manager = None  # made and loaded when the first input needs it: a run of unreadable files loads nothing

    def models():
        nonlocal manager
        if manager is None:
            manager = options.make_manager()
            preload(manager, options)
        return manager

    progress.start_bar(len(items))
    seg_cache = SegmentationCache(max_items=2 * options.batch_size)
    images = [item for item in items if item.kind == "image"]
    writer = Writer(output_dir, options, progress)
    try:
        with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="batch-read") as pool:
            loads = read_ahead(pool, images, ahead=max(1, workers) + 2 * options.batch_size)
            for batch in _batches(loads, options, output_dir, progress):
                frames, loaded_manager = [loaded.rgb for _, loaded, _ in batch], models()
                started = time.perf_counter()
                answers = infer_isolated(frames, loaded_manager, options, seg_cache)
                writer.put(batch, answers, (time.perf_counter() - started) / len(batch))
        for item in (item for item in items if item.kind == "video"):
            progress.done(process_video_item(item, models(), output_dir, options))
    finally:
        writer.close()  # on Ctrl-C too: finished batches are written before leaving


def read_ahead(pool: ThreadPoolExecutor, items: list[InputItem], ahead: int):
    """Yield (item, LoadedImage or the error, seconds) in order, keeping `ahead` reads in flight."""
    remaining = iter(items)
    pending = deque((item, pool.submit(read_image, item)) for item in islice(remaining, ahead))
    while pending:
        item, future = pending.popleft()
        following = next(remaining, None)
        if following is not None:
            pending.append((following, pool.submit(read_image, following)))
        loaded, seconds = future.result()
        yield item, loaded, seconds


def _batches(loads, options: BatchOptions, output_dir: Path, progress: Progress):
    """Group readable images into batches; unreadable ones are recorded as failed on the way."""
    batch = []
    for item, loaded, seconds in loads:
        if isinstance(loaded, Exception):
            progress.done(image_record(item, output_dir, options, error=loaded, seconds=seconds))
            continue
        batch.append((item, loaded, seconds))
        if len(batch) == options.batch_size:
            yield batch
            batch = []
    if batch:
        yield batch


class Writer:
    """A thread that writes each finished batch's exports and records them, while the model goes on."""

    def __init__(self, output_dir: Path, options: BatchOptions, progress: Progress, depth: int = 2):
        self.output_dir, self.options, self.progress = output_dir, options, progress
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="batch-writer", daemon=True)
        self._thread.start()

    def put(self, batch, answers, model_seconds_each: float) -> None:
        self._queue.put((batch, answers, model_seconds_each))

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()
        if self.error is not None:  # e.g. the manifest could not be written: the run cannot go on
            raise self.error

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            if self.error is None:  # after a fatal error, only drain the queue so put() never blocks
                try:
                    self._write(*job)
                except BaseException as error:  # noqa: BLE001 - handed to the main thread by close()
                    self.error = error

    def _write(self, batch, answers, model_seconds: float) -> None:
        for (item, loaded, read_seconds), answer in zip(batch, answers):
            self.progress.done(finish_image(item, loaded.rgb, answer, self.output_dir, self.options,
                                            read_seconds + model_seconds))

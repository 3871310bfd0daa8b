"""The local engine: reading and writing overlap with the model, so the model is kept busy.

    loader threads (read and decode images ahead, in order)
        -> this thread: batches of --batch-size images through every task's pipeline
            -> writer processes (exports renamed into place) -> records: manifest line, progress

--workers sets both counts. The queues are bounded (a few batches), so memory stays flat however many
inputs there are. A crash or Ctrl-C loses at most the batch in flight: images already handed to the
writers are written first.
Videos go after the images, one at a time (the video path batches their frames itself).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
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
    writers = max(1, workers)
    manager, torch_threads_before = None, None  # made when the first input needs it: unreadable files load nothing

    def models():
        nonlocal manager, torch_threads_before
        if manager is None:
            import torch

            torch_threads_before = torch.get_num_threads()  # restored at the end: the caller's process
            cores = os.cpu_count() or 1
            # until the models are loaded their size is unknown: the writers' share first, as for tiny models
            manager = replace(options, threads=options.threads or torch_threads(cores, writers, 0)).make_manager()
            preload(manager, options)
            threads = options.threads or torch_threads(cores, writers, manager.loaded_bytes)
            torch.set_num_threads(threads)
            log.info("torch uses %d of %d cores (%.0f MB of models, %d writers)", threads, cores,
                     manager.loaded_bytes / 2**20, writers)
        return manager

    progress.start_bar(len(items))
    seg_cache = SegmentationCache(max_items=2 * options.batch_size)
    images = [item for item in items if item.kind == "image"]
    writer = Writer(output_dir, options, progress, processes=writers, in_flight=2 * options.batch_size)
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
        writer.close()  # on Ctrl-C too: images handed to the writers are written before leaving
        if torch_threads_before is not None:
            import torch

            torch.set_num_threads(torch_threads_before)


FULL_SIZE_BYTES = 100 * 2**20  # the smallest released model (0.1b) is 228 MB in bf16; tiny ones a few MB


def torch_threads(cores: int, writers: int, model_bytes: int) -> int:
    """torch's share of the cores, following the work: a full-size forward (seconds to a minute an image on a
    CPU) needs every core, and the writers, idle through most of it, only borrow them for a moment; tiny models
    infer in a fraction of what writing an image's files costs, so the writers keep cores of their own."""
    if model_bytes >= FULL_SIZE_BYTES:
        return cores
    return max(1, cores - writers)


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
    """Processes that write each finished image's exports while the model goes on; the records come back to
    this process (manifest, progress). Processes rather than threads: PNG encoding and the point clouds hold
    the GIL, and on CPU writing costs about as much as the tiny models' inference. The writers ignore Ctrl-C,
    so images already handed to them are still written when the run stops."""

    def __init__(self, output_dir: Path, options: BatchOptions, progress: Progress, processes: int = 2,
                 in_flight: int = 16):
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.output_dir, self.options, self.progress = output_dir, options, progress
        # fork (instant, no re-import of the caller's main module), all processes at once on this first submit:
        # before the reader threads start, so no lock of theirs can be copied held into a child
        self._pool = ProcessPoolExecutor(max_workers=processes, mp_context=multiprocessing.get_context("fork"),
                                         initializer=_writer_setup, initargs=(os.getpid(),))
        self._pool.submit(int).result()
        self._pending: deque = deque()
        self._in_flight = max(in_flight, processes)

    def put(self, batch, answers, model_seconds_each: float) -> None:
        for (item, loaded, read_seconds), answer in zip(batch, answers):
            seconds = read_seconds + model_seconds_each
            if isinstance(answer, Exception):  # nothing to write; errors need not cross to another process
                self.progress.done(image_record(item, self.output_dir, self.options, error=answer, seconds=seconds))
                continue
            while len(self._pending) >= self._in_flight:  # bounded: memory stays flat
                self._pending.popleft().result()
            future = self._pool.submit(finish_image, item, loaded.rgb, answer, self.output_dir, self.options,
                                       seconds)
            future.add_done_callback(self._record)  # the manifest line as soon as the files are in place
            self._pending.append(future)

    def _record(self, future) -> None:
        # finish_image turns an input's failure into a failed record; an exception here means the writer
        # itself broke (a process died), and close() raises it
        if not future.cancelled() and future.exception() is None:
            self.progress.done(future.result())

    def close(self) -> None:
        try:
            while self._pending:
                self._pending.popleft().result()
        finally:
            self._pool.shutdown(wait=True, cancel_futures=True)


def _writer_setup(parent: int) -> None:
    """In each writer process: ignore Ctrl-C (the parent finishes what it handed over), and die with the
    parent, so a killed run leaves no writer behind to race the next one."""
    import ctypes
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:  # Linux: the kernel sends SIGKILL when the parent dies
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):  # elsewhere: watch for being re-parented
        threading.Thread(target=_exit_with_parent, args=(parent,), daemon=True).start()
    if os.getppid() != parent:  # the parent died before the line above
        os._exit(1)


def _exit_with_parent(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(0.5)
    os._exit(1)

"""The executor's pipeline (gpu.infer, gpu.stream): a GPU call's frames, or a local video's chunks, through each
job's stages. Each unit's start (pre-processing and the forwards) runs in the calling thread and the finish it
returns (post-processing, drawing, the copy back) in one worker thread, beside the next unit's start, across jobs
and chunks: a GPU that would wait for the host between batches goes on to the next forward. On CUDA the worker has
a stream of its own, which waits for its batch's forward (an event) and copies back without waiting for the
forwards queued after it. Results come back in order; errors per job and chunk, as values.
"""

from __future__ import annotations

import contextlib
import math
from functools import partial

from . import ledger, tasks
from .results import DrawnFrame, Job


class Plan:
    """One job over a call's frames or a video's chunks: what stays from chunk to chunk (the renderer that draws
    on the device and its running state; for a task that follows frames, the frame before)."""

    def __init__(self, job: Job, manager, seg_cache, overlap: bool):
        self.job, self.manager, self.seg_cache, self.overlap = job, manager, seg_cache, overlap
        self.spec = spec = tasks.get(job.task)
        self.options = options = dict(job.options)
        drawing = options.pop("draw", None)  # the renderer's options: only the picture is wanted
        state = options.pop("draw_state", None)  # where the last call's drawing left off
        self.annotator = spec.renderer(**drawing) if drawing is not None and draws_on_device(spec, manager) else None
        if self.annotator is not None and state is not None:
            self.annotator.state = state
        self.staged = spec.draw_start if self.annotator is not None else spec.start
        self.frame_index, self.previous = int(job.options.get("frame_index", 0) or 0), job.options.get("previous")

    def overlaps(self, batches: int, single: bool) -> bool:
        """Whether this chunk's batches run in two stages, finished beside the next batch's forward: a call of
        one batch has nothing to overlap, a video's chunk has the next chunk's."""
        return (batches > 1 or not single) and self.staged is not None and self.overlap

    @property
    def follows(self) -> bool:
        """Whether each batch goes on from the frame before it (steady maps drawn on the device go on through the
        filter their annotator carries instead)."""
        return follows_frames(self.spec, self.options) and self.annotator is None

    @property
    def prepares(self) -> bool:
        return self.annotator is None and self.spec.prepare is not None

    def prepare(self, frames: list):
        return self.spec.prepare(frames, self.manager, self.job.size, **self.options)

    def units(self, frames: list, step: int, overlapping: bool, prepared) -> list[tuple[list | None, partial]]:
        """The chunk's work as (its batch's frames, its start), each start returning its finish: a batch each where
        it overlaps, else one that runs every batch (no frames named; the finish only hands the results over)."""
        batches = [frames[start:start + step] for start in range(0, len(frames), step)]
        if overlapping and not (self.follows and prepared is None):
            extra = {"annotator": self.annotator} if self.annotator is not None else {}
            shares = [None] * len(batches) if prepared is None else \
                [prepared[i * step:(i + 1) * step] for i in range(len(batches))]  # each batch's share
            return [(batch, partial(self.staged, batch, self.manager, self.job.size, **extra, **self.options,
                                    **({} if share is None else {"prepared": share})))
                    for batch, share in zip(batches, shares)]

        def serial():
            results = self._serial(batches, step)
            return lambda: results

        return [(None, serial)]

    def _serial(self, batches: list, step: int) -> list:
        spec, options, results = self.spec, self.options, []
        follows = self.follows
        for index, batch in enumerate(batches):
            if self.annotator is not None:
                results += spec.draw(batch, self.manager, self.job.size, self.annotator, **options)
                continue
            if follows:  # the batch goes on from the frame before it, in this chunk or the last
                options.update(frame_index=self.frame_index + index * step,
                               previous=results[-1] if results else self.previous)
            results += spec.run(batch, self.manager, self.job.size, seg_cache=self.seg_cache, **options)
        self.frame_index += sum(len(batch) for batch in batches)  # where the next chunk goes on from
        self.previous = results[-1] if results else self.previous
        return results

    def done(self, results: list, single: bool) -> list:
        """The chunk's results as the caller gets them."""
        if self.annotator is not None:
            results = [DrawnFrame(p) for p in results]
            if results and single:  # a call's last frame carries the drawing's state to the next call
                results[-1].state = getattr(self.annotator, "state", None)
        return results


class Chunk:
    """A chunk's replies as its units come back: per job a list of results, or the first error."""

    def __init__(self, frames: list, jobs: int):
        self.frames, self.replies, self.open, self.queued = frames, [[] for _ in range(jobs)], 0, False

    def fail(self, job: int, error: BaseException) -> None:
        if not self.failed(job):
            self.replies[job] = error

    def failed(self, job: int) -> bool:
        return isinstance(self.replies[job], BaseException)

    @property
    def complete(self) -> bool:
        return self.queued and self.open == 0


def run(manager, seg_cache, chunks, jobs: list[Job], batch_size: int | None, single: bool, overlap: bool):
    """(frames, replies) per chunk: every unit's start (pre-processing, forwards) in this thread and its finish
    (post-processing, drawing, the copy back) in one worker thread beside the next unit's start, across jobs
    and chunks. At most two units are in flight; the worker also finds the next chunk's people (`prepare`)
    while this chunk's batches run, so no wait for them holds the queue between chunks. The jobs start a batch one
    after the other, and share what is the same for them (`inference.sharing`: the frames' upload, the body-part
    forward of segmentation and of normals' and depth's masks). On a CPU a thread of its own pre-processes each
    job's next batch while this one's forwards run (`inference.Lookahead`)."""
    from concurrent.futures import ThreadPoolExecutor

    from .models.inference import Lookahead, sharing

    device = manager.device
    plans = []
    for job in jobs:
        try:
            plans.append(Plan(job, manager, seg_cache, overlap))
        except Exception as error:  # noqa: BLE001 - this job's reply, in every chunk
            plans.append(error)
    chunks, pending, finished = iter(chunks), None, []  # pending: (future, batch mark, chunk, job index)
    ahead: dict[int, tuple] = {}  # job index -> (future, batch mark): the next chunk's `prepare`, in the worker
    frames = next(chunks, None)
    step = max(1, int(batch_size or len(frames or ()) or 1))
    # on a CPU (the frames as they are, no ledger recording copies), where batches overlap
    lookahead = Lookahead() if overlap and str(device) == "cpu" and ledger.active() is None else None
    looks_ahead = not single and (lookahead is not None or any(isinstance(p, Plan) and p.prepares for p in plans))

    def collect():  # the unit in the worker: wait for it (the ledger's join), file its results
        future, mark, chunk, index = pending
        ledger.join(mark)
        try:
            results = future.result()
        except Exception as error:  # noqa: BLE001 - the job's reply for this chunk
            chunk.fail(index, error)
        else:
            if not chunk.failed(index):
                chunk.replies[index] += results
        chunk.open -= 1

    def ready():  # the chunks whose every unit came back, in order
        while finished and finished[0].complete:
            chunk = finished.pop(0)
            for index, plan in enumerate(plans):
                if isinstance(plan, BaseException):
                    chunk.fail(index, plan)
                elif not chunk.failed(index):
                    chunk.replies[index] = plan.done(chunk.replies[index], single)
            yield chunk.frames, chunk.replies

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sapiens2-post") as worker, \
            (lookahead or contextlib.nullcontext()):
        while frames is not None:
            following = next(chunks, None) if looks_ahead else None
            chunk = Chunk(frames, len(plans))
            finished.append(chunk)
            work = []  # per job: its units of this chunk (none where it failed)
            for index, plan in enumerate(plans):
                if isinstance(plan, BaseException):
                    work.append(())
                    continue
                overlapping = plan.overlaps(math.ceil(len(frames) / step), single)
                try:
                    prepared = None
                    if overlapping and plan.prepares:
                        prepared = _taken(ahead.pop(index)) if index in ahead else plan.prepare(frames)
                        if following is not None:  # queued behind the batch in the worker: it waits for no forward
                            ahead[index] = (worker.submit(aside(partial(plan.prepare, following), device)),
                                            ledger.batch_mark())
                    work.append(plan.units(frames, step, overlapping, prepared))
                except Exception as error:  # noqa: BLE001
                    chunk.fail(index, error)
                    work.append(())
            # batch by batch, every job's start of a batch one after the other: the same forward on the same
            # frames (the body-part mask of segmentation, normals and depth in All tasks) and the same upload are
            # done once among them (`inference.sharing`)
            for position in range(max(map(len, work), default=0)):
                with sharing() if len(plans) > 1 else contextlib.nullcontext():
                    for index, units in enumerate(work):
                        if position >= len(units) or chunk.failed(index):  # a batch before failed: skip the rest
                            continue
                        start = units[position][1]
                        if lookahead is not None:  # the job's next batch: in this chunk, else the next chunk's first
                            upcoming = units[position + 1][0] if position + 1 < len(units) else \
                                (following[:step] if following else None)
                            start = partial(lookahead.during, index, start, upcoming)
                        try:
                            finish = beside(start(), device)
                        except Exception as error:  # noqa: BLE001
                            chunk.fail(index, error)
                            continue
                        if pending is not None:
                            collect()
                        chunk.open += 1
                        pending = (worker.submit(finish), ledger.batch_mark(), chunk, index)
                yield from ready()  # the chunk before, out as soon as its last batch is back
            chunk.queued = True
            yield from ready()
            frames = following if looks_ahead else next(chunks, None)
        if pending is not None:
            collect()
        for future, _ in ahead.values():  # a prepare for a chunk that never came (an error stopped the video)
            future.cancel()
        yield from ready()


def _taken(prepared: tuple):
    future, mark = prepared
    ledger.join(mark)
    return future.result()


def follows_frames(spec, options: dict) -> bool:
    """Whether each batch goes on from the frame before it: pose always; a task whose maps can be steadied over
    time only with `temporal_smoothing` on (otherwise its batches are independent, and may overlap)."""
    return spec.follows_frames and (not spec.steady or bool(options.get("temporal_smoothing")))


_POST_STREAMS: dict = {}


def aside(work, device):
    """`work` to run in the worker: on CUDA on the worker's own stream, waiting for nothing queued here (the next
    chunk's person detector beside this chunk's forwards); elsewhere as it is."""
    from .models.inference import on_cuda

    if not on_cuda(device):
        return work
    import torch

    stream = _POST_STREAMS.setdefault(str(device), torch.cuda.Stream(device=device))

    def on_its_stream():
        with torch.cuda.stream(stream):
            return work()

    return on_its_stream


def beside(finish, device):
    """`finish` to run in the worker: on CUDA on the worker's own stream, after the work queued so far on this
    thread's stream (the batch's forward); elsewhere as it is."""
    from .models.inference import on_cuda

    if not on_cuda(device):
        return finish
    import torch

    queued = torch.cuda.Event()
    queued.record()  # on this thread's current stream: the batch's forward and everything before it
    stream = _POST_STREAMS.setdefault(str(device), torch.cuda.Stream(device=device))

    def after_the_forward():
        with torch.cuda.stream(stream):
            stream.wait_event(queued)
            return finish()  # its copy back synchronises this stream only

    return after_the_forward


def draws_on_device(spec, manager) -> bool:
    """Where post-processing runs on the device (CUDA), drawing does too, for a task that can; on a CPU, for
    a task whose drawing measured faster there."""
    from .pipelines import device_post

    on_cpu = str(manager.device) == "cpu" and spec.draw_on_cpu
    return spec.draw is not None and (on_cpu or device_post.use_device_post(manager.device))

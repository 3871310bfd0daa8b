"""The GPU boundary: the one function that runs models, decorated once with `spaces.GPU` (ZeroGPU) or identity.

ZeroGPU runs a GPU call in a worker process forked from the main process: it pickles the call's arguments to
the worker and the return value back. So `infer` takes only data (a manager key, frames, job descriptions) and
returns CPU/numpy results; models are reached through module-level state the fork inherits (`register`), and
`--preload` loads checkpoints in the main process before any worker is forked, so every worker has them.
The UI side keeps the manager's locks, the output folders and all file writing.
"""

from __future__ import annotations

import logging
import math
import os
from functools import partial

import numpy as np

from . import ledger, tasks
from .models.manager import ModelManager
from .models.registry import UnknownCheckpoint, checkpoint
from .results import DrawnFrame, Job, compact_maps

log = logging.getLogger(__name__)

# Seconds of GPU time per item (a frame, or a person for pose) on a ZeroGPU H200 slice, with a margin; the
# duration asked for each call is computed from these so short calls queue less (ZeroGPU favours them).
SECONDS_PER_ITEM = {"0.4b": 0.15, "0.8b": 0.25, "1b": 0.3, "5b": 1.2}
BASE_SECONDS = 3  # start-up of a call, detector, transfers (a live frame asks for little)
LOAD_SECONDS = 60  # a checkpoint that was not preloaded loads inside the call
MAX_SECONDS = 300


_STATE: dict[str, tuple] = {}  # manager key -> (ModelManager, SegmentationCache | None)


def register(manager: ModelManager, seg_cache=None) -> str:
    """Make a manager reachable from GPU calls by a picklable key."""
    key = f"manager-{id(manager):x}"
    _STATE[key] = (manager, seg_cache)
    return key


def parse_preload(spec: str | None) -> list[tuple[str, str]]:
    """'seg:0.4b,pose:1b' -> [('seg', '0.4b'), ('pose', '1b')] as checkpoint families (a task's public name works
    too), each allow-listed (UnknownCheckpoint if not)."""
    pairs = []
    for item in filter(None, (part.strip() for part in (spec or "").split(","))):
        task, sep, size = item.partition(":")
        if not sep:
            raise UnknownCheckpoint(f"Bad preload entry {item!r}: expected TASK:SIZE, e.g. seg:0.4b")
        try:
            family = tasks.get(task).family
        except tasks.UnknownTask:
            family = task.strip()  # the registry words the message
        checkpoint(family, size.strip())  # validates
        pairs.append((family, size.strip()))
    return pairs


def preload(manager: ModelManager, spec: str | None) -> list[str]:
    """Load the listed checkpoints now, in this (main) process, on the manager's device; pose also loads the
    person detector. Returns the repo ids loaded."""
    loaded = []
    for task, size in parse_preload(spec):
        ckpt = checkpoint(task, size)
        manager.get(ckpt)
        loaded.append(ckpt.repo_id)
        if any(spec.detector for spec in tasks.all_specs() if spec.family == task):
            try:
                manager.get_detector()
            except Exception as error:  # noqa: BLE001 - pose falls back to the whole image without it
                log.warning("detector not preloaded: %s", error)
    if loaded:
        log.info("preloaded %s", ", ".join(loaded))
    return loaded


def estimate_duration(manager_key: str, frames: list[np.ndarray], jobs: list[Job], batch_size: int | None = None,
                      compact: bool = False) -> int:
    """GPU seconds to ask ZeroGPU for: per item and size, plus a load for checkpoints not preloaded."""
    manager = _STATE[manager_key][0] if manager_key in _STATE else None
    seconds = BASE_SECONDS
    for job in jobs:
        spec = tasks.get(job.task)
        seconds += spec.model_items(job, len(frames)) * SECONDS_PER_ITEM.get(job.size, 1.0)
        try:
            loaded = manager is None or manager.is_loaded(checkpoint(spec.family, job.size))
        except UnknownCheckpoint:  # a task with no checkpoint of its own (e.g. model-free)
            loaded = True
        if not loaded:
            seconds += LOAD_SECONDS
    return int(min(MAX_SECONDS, math.ceil(seconds)))


def _identity(fn):
    return fn


def _gpu_decorator():
    if os.environ.get("SAPIENS2_NO_SPACES") == "1":
        return _identity
    try:  # ZeroGPU on Spaces; identity for a local launch (where `spaces` is not installed)
        import spaces
    except ImportError:
        return _identity
    return spaces.GPU(duration=estimate_duration)


_DECORATOR = _gpu_decorator()
CROSSES_PROCESSES = _DECORATOR is not _identity  # ZeroGPU: results are pickled back from a worker process
AOT_SECONDS = 1500  # the start-up compile: ZeroGPU's longest allowed duration at start-up (Hugging Face's recipe)
_AOT_DECORATOR = _identity
if CROSSES_PROCESSES:
    import spaces

    _AOT_DECORATOR = spaces.GPU(duration=AOT_SECONDS)


def use_ahead_of_time(manager: ModelManager) -> bool:
    """On ZeroGPU compiling is ahead of time (`compile_ahead`): each call's fresh worker would otherwise
    compile again. The manager then loads models eager. True when that is the plan."""
    if CROSSES_PROCESSES and manager.compile:
        manager.compile, manager.compile_mode = False, "aot"
    return CROSSES_PROCESSES and manager.compile_mode == "aot"


@_AOT_DECORATOR
def _compile_packages(manager_key: str, keys: list[tuple]) -> dict:
    """In a GPU worker: one AoT package per loaded model (or why not, as text)."""
    import spaces

    from .models import aot

    manager = _STATE[manager_key][0]
    packages = {}
    for key in keys:
        loaded = manager.loaded_model(key)
        size = int(loaded.processor.size["height"]), int(loaded.processor.size["width"])
        try:
            packages[key] = aot.compile_package(spaces, loaded.model, size, loaded.device, loaded.dtype)
        except Exception as error:  # noqa: BLE001 - this model stays eager; the others go on
            packages[key] = f"{type(error).__name__}: {str(error).strip()[:300]}"
    return packages


def compile_ahead(manager: ModelManager) -> dict[str, str]:
    """ZeroGPU: compile every loaded Sapiens2 model ahead of time in one GPU call and install the packages here,
    in the main process, before any worker is forked. Anything that fails leaves that model eager, with a log
    line; returns {repo id: status}."""
    if not use_ahead_of_time(manager):
        return {}
    import spaces

    from .models import aot
    from .models.compile import CompileState

    keys = [key for key in manager.loaded_keys if key[0] == "sapiens2"]
    try:
        packages = _compile_packages(register(manager), keys) if keys else {}
    except Exception as error:  # noqa: BLE001 - the GPU call itself failed: every model stays eager
        packages = {key: f"{type(error).__name__}: {error}" for key in keys}
    statuses = {}
    for key, package in packages.items():
        loaded = manager.loaded_model(key)
        try:
            if isinstance(package, str):
                raise RuntimeError(package)
            loaded.compiled = aot.apply(spaces, loaded.model, package)
            statuses[key[1]] = "compiled"
            log.info("%s: compiled ahead of time (one package for %d blocks)", key[1], len(aot.blocks(loaded.model)))
        except Exception as error:  # noqa: BLE001 - this model runs eager
            aot.remove(loaded.model)
            note = f"ahead-of-time compilation failed ({str(error).strip().splitlines()[0][:200]}); running eager"
            loaded.compiled = CompileState(status="eager", note=note)
            log.warning("%s: %s", key[1], note)
            statuses[key[1]] = "eager"
    return statuses


@_DECORATOR
def infer(manager_key: str, frames: list[np.ndarray], jobs: list[Job], batch_size: int | None = None,
          compact: bool = False) -> list:
    """Run each job over `frames`; returns, per job, its list of results or the exception it raised.

    batch_size: frames per forward (a video sends a whole chunk in one call, the model takes it in batches).
    compact: per-pixel float maps as float16 (`results.compact_maps`), so a video chunk's results cross the
    process boundary at a few bytes per pixel; ignored where nothing crosses one (a local launch: the
    conversion would only cost time).

    Job options the runners do not see: `draw` (the renderer's options) asks for pictures instead of results
    (`DrawnFrame`s, drawn by `TaskSpec.draw` where the model runs) from a task that can draw there, and
    `draw_state` is where the last call's drawing left off (`DrawnFrame.state` of its last frame). A task that
    follows frames (`TaskSpec.follows_frames`) gets `frame_index` and `previous` per batch.

    Exceptions come back as values, not raised: ZeroGPU re-raises anything but gr.Error from a worker as a
    bare "ZeroGPU worker error", which would hide our messages. `answers` re-raises them on this side."""
    [(_, answers)] = list(_pipeline(manager_key, [frames], jobs, batch_size, single=True))
    if compact and CROSSES_PROCESSES:
        answers = [[compact_maps(r, f.shape[:2]) for r, f in zip(results, frames)]
                   if isinstance(results, list) else results for results in answers]
    return answers


def stream(manager_key: str, chunks, jobs: list[Job], batch_size: int | None = None):
    """`answers` over a video's chunks (an iterable of frame lists) as one pipeline, in this process: yields
    (frames, replies) per chunk, in order. The next chunk's first forward is queued before the last batch of
    the chunk before is copied back (a batch's post-processing runs beside the next batch's forward, across
    chunks), a task that needs a chunk's people first (pose) finds them in the worker while the chunk before
    runs, and what goes on from frame to frame (the renderer's running state, the frame before) stays here,
    not sent back in with each call. Only where a GPU call is a function call (`streams`): on ZeroGPU each call
    is a worker process of its own, so a video makes one `infer` call per chunk (jobs/video.py)."""
    for frames, replies in _pipeline(manager_key, chunks, jobs, batch_size, single=False):
        _raise_untolerated(jobs, replies)
        yield frames, replies


def streams(manager_key: str, jobs: list[Job]) -> bool:
    """Whether `stream` runs these jobs as one pipeline: in this process (not ZeroGPU), every job in two stages
    on its device, none going on from the frame before it (a task that follows frames only where it finds every
    frame's people first: `prepare`, on the device road). Otherwise a video makes one call per chunk."""
    from .pipelines import device_post

    if CROSSES_PROCESSES:
        return False
    manager = _STATE[manager_key][0]
    for job in jobs:
        plan = _Plan(job, manager, None)
        ahead = plan.prepares and device_post.use_device_post(manager.device)
        if not plan.overlaps(2, single=True) or (_follows_frames(plan.spec, plan.options) and not ahead):
            return False
    return True


class _Plan:
    """One job over a call's frames or a video's chunks: what stays from chunk to chunk (the renderer that draws
    on the device and its running state; for a task that follows frames, the frame before)."""

    def __init__(self, job: Job, manager, seg_cache):
        self.job, self.manager, self.seg_cache = job, manager, seg_cache
        self.spec = spec = tasks.get(job.task)
        self.options = options = dict(job.options)
        drawing = options.pop("draw", None)  # the renderer's options: only the picture is wanted
        state = options.pop("draw_state", None)  # where the last call's drawing left off
        self.annotator = spec.renderer(**drawing) if drawing is not None and _draws_on_device(spec, manager) else None
        if self.annotator is not None and state is not None:
            self.annotator.state = state
        self.staged = spec.draw_start if self.annotator is not None else spec.start
        self.frame_index, self.previous = int(job.options.get("frame_index", 0) or 0), job.options.get("previous")

    def overlaps(self, batches: int, single: bool) -> bool:
        """Whether this chunk's batches run in two stages, finished beside the next batch's forward: a call of
        one batch has nothing to overlap, a video's chunk has the next chunk's."""
        return (batches > 1 or not single) and self.staged is not None and overlaps(self.manager.device)

    @property
    def prepares(self) -> bool:
        return self.annotator is None and self.spec.prepare is not None

    def prepare(self, frames: list):
        return self.spec.prepare(frames, self.manager, self.job.size, **self.options)

    def units(self, frames: list, step: int, overlapping: bool, prepared) -> list:
        """The chunk's work as starts, each returning its finish: a batch each where it overlaps, else one that
        runs every batch (the finish only hands the results over)."""
        batches = [frames[start:start + step] for start in range(0, len(frames), step)]
        if overlapping and not (_follows_frames(self.spec, self.options) and prepared is None):
            extra = {"annotator": self.annotator} if self.annotator is not None else {}
            shares = [None] * len(batches) if prepared is None else \
                [prepared[i * step:(i + 1) * step] for i in range(len(batches))]  # each batch's share
            return [partial(self.staged, batch, self.manager, self.job.size, **extra, **self.options,
                            **({} if share is None else {"prepared": share})) for batch, share in zip(batches, shares)]

        def serial():
            results = self._serial(batches, step)
            return lambda: results

        return [serial]

    def _serial(self, batches: list, step: int) -> list:
        spec, options, results = self.spec, self.options, []
        follows = _follows_frames(spec, options)
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


class _Chunk:
    """A chunk's replies as its units come back: per job a list of results, or the first error."""

    def __init__(self, frames: list, jobs: int):
        self.frames, self.replies, self.open, self.queued = frames, [[] for _ in range(jobs)], 0, False

    def fail(self, job: int, error: BaseException) -> None:
        if not isinstance(self.replies[job], BaseException):
            self.replies[job] = error

    @property
    def complete(self) -> bool:
        return self.queued and self.open == 0


def _pipeline(manager_key: str, chunks, jobs: list[Job], batch_size: int | None, single: bool):
    """(frames, replies) per chunk: every unit's start (pre-processing, forwards) in this thread and its finish
    (post-processing, drawing, the copy back) in one worker thread beside the next unit's start, across jobs
    and chunks. At most two units are in flight; the worker also finds the next chunk's people (`prepare`)
    while this chunk's batches run, so no wait for them holds the queue between chunks."""
    from concurrent.futures import ThreadPoolExecutor

    manager, seg_cache = _STATE[manager_key]
    device = manager.device
    plans = []
    for job in jobs:
        try:
            plans.append(_Plan(job, manager, seg_cache))
        except Exception as error:  # noqa: BLE001 - this job's reply, in every chunk
            plans.append(error)
    chunks, pending, finished = iter(chunks), None, []  # pending: (future, batch mark, chunk, job index)
    ahead: dict[int, tuple] = {}  # job index -> (future, batch mark): the next chunk's `prepare`, in the worker
    frames = next(chunks, None)
    step = max(1, int(batch_size or len(frames or ()) or 1))
    looks_ahead = not single and any(isinstance(p, _Plan) and p.prepares for p in plans)

    def collect():  # the unit in the worker: wait for it (the ledger's join), file its results
        future, mark, chunk, index = pending
        ledger.join(mark)
        try:
            chunk.replies[index] += future.result()
        except Exception as error:  # noqa: BLE001 - the job's reply for this chunk
            chunk.fail(index, error)
        chunk.open -= 1

    def ready():  # the chunks whose every unit came back, in order
        while finished and finished[0].complete:
            chunk = finished.pop(0)
            for index, plan in enumerate(plans):
                if isinstance(plan, BaseException):
                    chunk.fail(index, plan)
                elif not isinstance(chunk.replies[index], BaseException):
                    chunk.replies[index] = plan.done(chunk.replies[index], single)
            yield chunk.frames, chunk.replies

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sapiens2-post") as worker:
        while frames is not None:
            following = next(chunks, None) if looks_ahead else None
            chunk = _Chunk(frames, len(plans))
            finished.append(chunk)
            for index, plan in enumerate(plans):
                if isinstance(plan, BaseException):
                    continue
                overlapping = plan.overlaps(math.ceil(len(frames) / step), single)
                try:
                    prepared = None
                    if overlapping and plan.prepares:
                        prepared = _take(ahead.pop(index)) if index in ahead else plan.prepare(frames)
                        if following is not None:  # queued behind the batch in the worker: it waits for no forward
                            ahead[index] = (worker.submit(_aside(partial(plan.prepare, following), device)),
                                            ledger.batch_mark())
                    units = plan.units(frames, step, overlapping, prepared)
                except Exception as error:  # noqa: BLE001
                    chunk.fail(index, error)
                    continue
                for start in units:
                    try:
                        finish = _beside(start(), device)
                    except Exception as error:  # noqa: BLE001 - the rest of this job's chunk is skipped
                        chunk.fail(index, error)
                        break
                    if pending is not None:
                        collect()
                    chunk.open += 1
                    pending = (worker.submit(finish), ledger.batch_mark(), chunk, index)
            chunk.queued = True
            yield from ready()
            frames = following if looks_ahead else next(chunks, None)
        if pending is not None:
            collect()
        for future, _ in ahead.values():  # a prepare for a chunk that never came (an error stopped the video)
            future.cancel()
        yield from ready()


def _take(prepared: tuple):
    future, mark = prepared
    ledger.join(mark)
    return future.result()


def _raise_untolerated(jobs: list[Job], replies: list) -> None:
    for job, reply in zip(jobs, replies):
        if isinstance(reply, BaseException) and not job.tolerate_errors:
            raise reply


def _follows_frames(spec, options: dict) -> bool:
    """Whether each batch goes on from the frame before it: pose always; a task whose maps can be steadied over
    time only with `temporal_smoothing` on (otherwise its batches are independent, and may overlap)."""
    return spec.follows_frames and (not spec.steady or bool(options.get("temporal_smoothing")))


OVERLAP = os.environ.get("SAPIENS2_OVERLAP", "auto")  # "auto" (the measured choice), "1" (always) or "0" (never)


def overlaps(device) -> bool:
    """Whether a call of several batches runs a batch's post-processing beside the next batch's forward.
    On CUDA the next forward queues while the worker copies back. On the 2-core CPU it measured faster too
    (`bench_video.py --overlap both`, tiny random-weight checkpoints, a shared machine at load 7-10, two runs:
    seg 0.93x / 1.60x, normals 1.8x / 2.5x, pointmap 1.8x / 2.0x, matting 2.4x / 1.3x), the numpy
    post-processing beside torch's forward, so "auto" overlaps on both; not on Apple's MPS, where it was never
    run. SAPIENS2_OVERLAP=0 turns it off."""
    if OVERLAP in ("0", "1"):
        return OVERLAP == "1"
    return str(device).split(":")[0] in ("cuda", "cpu")


def overlapped(start, batches: list, device=None) -> list:
    """Each batch's `start(batch)` (pre-processing and the forward) in this thread, and the `finish()` it returns
    (post-processing, drawing, the copy back) in a worker thread, beside the next batch's start: a GPU that
    would wait for the host between batches goes on to the next forward. The results in batch order; the
    first error is raised (after the batch in the worker is done). At most two batches are in flight.

    On CUDA the worker has a stream of its own, which waits for the batch's forward (an event) and copies back
    without waiting for the forwards queued after it."""
    from concurrent.futures import ThreadPoolExecutor

    results, pending, queued = [], None, -1
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="sapiens2-post") as worker:
        for batch in batches:
            finish = _beside(start(batch), device)
            if pending is not None:
                ledger.join(queued)  # the batch before this one (the transfer ledger's overlap)
                results += pending.result()
            pending, queued = worker.submit(finish), ledger.batch_mark()
        if pending is not None:
            ledger.join(queued)
            results += pending.result()
    return results


_POST_STREAMS: dict = {}


def _aside(work, device):
    """`work` to run in the worker: on CUDA on the worker's own stream, waiting for nothing queued here (the next
    chunk's person detector beside this chunk's forwards); elsewhere as it is."""
    from .models.inference import on_cuda

    if not on_cuda(device):
        return work
    import torch

    stream = _POST_STREAMS.setdefault(str(device), torch.cuda.Stream(device=device))

    def run():
        with torch.cuda.stream(stream):
            return work()

    return run


def _beside(finish, device):
    """`finish` to run in the worker: on CUDA on the worker's own stream, after the work queued so far on this
    thread's stream (the batch's forward); elsewhere as it is."""
    from .models.inference import on_cuda

    if not on_cuda(device):
        return finish
    import torch

    queued = torch.cuda.Event()
    queued.record()  # on this thread's current stream: the batch's forward and everything before it
    stream = _POST_STREAMS.setdefault(str(device), torch.cuda.Stream(device=device))

    def run():
        with torch.cuda.stream(stream):
            stream.wait_event(queued)
            return finish()  # its copy back synchronises this stream only

    return run


def _draws_on_device(spec, manager) -> bool:
    """Where post-processing runs on the device (CUDA), drawing does too, for a task that can; on a CPU, for
    a task whose drawing measured faster there."""
    from .pipelines import device_post

    on_cpu = str(manager.device) == "cpu" and spec.draw_on_cpu
    return spec.draw is not None and (on_cpu or device_post.use_device_post(manager.device))


def answers(manager_key: str, frames: list[np.ndarray], jobs: list[Job], batch_size: int | None = None,
            compact: bool = False) -> list:
    """`infer`, then raise the first error of a job that does not tolerate errors (in the caller's process)."""
    replies = infer(manager_key, frames, jobs, batch_size, compact)
    _raise_untolerated(jobs, replies)
    return replies

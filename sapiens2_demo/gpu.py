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

import numpy as np

from . import overlap, tasks
from .models.manager import ModelManager
from .models.registry import UnknownCheckpoint, checkpoint
from .results import Job, compact_maps

log = logging.getLogger(__name__)

# Seconds of GPU time per item (a frame, or a person for pose) on a ZeroGPU H200 slice, with a margin; the
# duration asked for each call is computed from these so short calls queue less (ZeroGPU favours them).
SECONDS_PER_ITEM = {"0.4b": 0.15, "0.8b": 0.25, "1b": 0.3, "5b": 1.2}
BASE_SECONDS = 3  # start-up of a call, detector, transfers (a live frame asks for little)
LOAD_SECONDS = 60  # a checkpoint that was not preloaded loads inside the call
MAX_SECONDS = 300


_STATE: dict[str, tuple] = {}  # manager key -> (ModelManager, SegmentationCache | None)


def register(manager: ModelManager, seg_cache=None) -> str:
    """Make a manager reachable from GPU calls by a picklable key. On ZeroGPU, also imports what the calls import
    (`import_before_forks`)."""
    key = f"manager-{id(manager):x}"
    _STATE[key] = (manager, seg_cache)
    if CROSSES_PROCESSES:
        import_before_forks()
    return key


def device_of(manager_key: str) -> str | None:
    """The device a registered manager runs its models on ("cpu", "cuda", ...); None for a key not registered."""
    state = _STATE.get(manager_key)
    return None if state is None else str(state[0].device)


# What a GPU call and the threads beside it (a video's writer, the other requests) import inside functions.
FORK_IMPORTS = ("numpy.ma", "cv2", "av", "av.video.reformatter", "PIL.Image", "matplotlib.cm", "matplotlib.colors",
                "trimesh", "torch", "torch.nn.functional", "torchvision.ops", "torchvision.transforms.v2.functional",
                "transformers", "transformers.models.sapiens2.modeling_sapiens2",
                "transformers.models.sapiens2.image_processing_sapiens2", "ultralytics", "ultralytics.data.augment",
                "ultralytics.engine.results", "ultralytics.trackers.byte_tracker", "ultralytics.trackers.bot_sort",
                "ultralytics.utils.checks", "lap", "isal.isal_zlib")
NOT_IN_CALLS = ("ui", "cli", "batch", "jobs", "standins")  # ours above this module: the front doors and the jobs
_IMPORTED_BEFORE_FORKS = []


def import_before_forks() -> None:
    """On ZeroGPU each call runs in a worker forked from this process, and a fork copies, held, the import lock of
    any module another thread is importing at that moment: the worker then hangs on its first import of that
    module (seen: a video's writer thread importing PIL's plugins while the next chunk's call forked; the worker,
    loading its model, imported transformers, which imports PIL). So what the calls and the threads beside them
    import inside functions is imported here, once, before any request (and no worker imports it again)."""
    import importlib
    import pkgutil

    if _IMPORTED_BEFORE_FORKS:
        return
    for name in FORK_IMPORTS:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional package (lap: ultralytics' tracker's; isal: the PNG writer's)
            log.info("not imported before forks: %s", name)
    import PIL.Image

    PIL.Image.init()  # its format plugins, which it loads on the first save otherwise
    for top in pkgutil.iter_modules(importlib.import_module(__package__).__path__, f"{__package__}."):
        if top.name.rsplit(".", 1)[1] in NOT_IN_CALLS:
            continue
        module = importlib.import_module(top.name)
        for inner in pkgutil.iter_modules(module.__path__, f"{top.name}.") if top.ispkg else ():
            importlib.import_module(inner.name)
    _IMPORTED_BEFORE_FORKS.append(True)


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
def _compile_packages(manager_key: str, folders: dict[tuple, str]) -> dict:
    """In a GPU worker: each model's AoT package saved in its folder; {key: None, or why not as text}."""
    import spaces

    from .models import aot

    manager = _STATE[manager_key][0]
    errors = {}
    for key, folder in folders.items():
        loaded = manager.loaded_model(key)
        try:
            aot.compile_package(spaces, loaded.model, _input_size(loaded), loaded.device, loaded.dtype, folder)
            errors[key] = None
        except Exception as error:  # noqa: BLE001 - this model stays eager; the others go on
            errors[key] = f"{type(error).__name__}: {str(error).strip()[:300]}"
    return errors


def _input_size(loaded) -> tuple[int, int]:
    return int(loaded.processor.size["height"]), int(loaded.processor.size["width"])


def compile_ahead(manager: ModelManager) -> dict[str, str]:
    """ZeroGPU: compile every loaded Sapiens2 model ahead of time and install the packages here, in the main
    process, before any worker is forked. A package saved at an earlier start (the compile cache, kept across
    restarts in a Space's persistent storage) is loaded instead; the rest compile in one GPU call. Anything that
    fails leaves that model eager, with a log line; returns {repo id: status}."""
    if not use_ahead_of_time(manager):
        return {}
    import spaces

    from .models import aot
    from .models.compile import CompileState

    keys = [key for key in manager.loaded_keys if key[0] == "sapiens2"]
    folders = {}
    for key in keys:
        loaded = manager.loaded_model(key)
        folders[key] = aot.package_dir(loaded.model, _input_size(loaded), loaded.dtype)
    earlier = {key for key, folder in folders.items() if aot.saved(folder)}
    missing = {key: str(folder) for key, folder in folders.items() if key not in earlier}
    try:
        errors = _compile_packages(register(manager), missing) if missing else {}
    except Exception as error:  # noqa: BLE001 - the GPU call itself failed: those models stay eager
        errors = {key: f"{type(error).__name__}: {error}" for key in missing}
    statuses = {}
    for key in keys:
        loaded = manager.loaded_model(key)
        try:
            if errors.get(key):
                raise RuntimeError(errors[key])
            loaded.compiled = aot.apply(spaces, loaded.model, folders[key], loaded_from_disk=key in earlier)
            statuses[key[1]] = "compiled"
            log.info("%s: compiled ahead of time (one package for %d blocks, %s %s)", key[1],
                     len(aot.blocks(loaded.model)), "loaded from" if key in earlier else "saved in", folders[key])
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
    [(_, answers)] = list(_run(manager_key, [frames], jobs, batch_size, single=True))
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
    for frames, replies in _run(manager_key, chunks, jobs, batch_size, single=False):
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
        plan = overlap.Plan(job, manager, None, overlaps(manager.device))
        ahead = plan.prepares and device_post.use_device_post(manager.device)
        if not plan.overlaps(2, single=True) or (plan.follows and not ahead):
            return False
    return True


def _run(manager_key: str, chunks, jobs: list[Job], batch_size: int | None, single: bool):
    manager, seg_cache = _STATE[manager_key]
    return overlap.run(manager, seg_cache, chunks, jobs, batch_size, single, overlaps(manager.device))


def _raise_untolerated(jobs: list[Job], replies: list) -> None:
    for job, reply in zip(jobs, replies):
        if isinstance(reply, BaseException) and not job.tolerate_errors:
            raise reply


OVERLAP = os.environ.get("SAPIENS2_OVERLAP", "auto")  # "auto" (the measured choice), "1" (always) or "0" (never)


def overlaps(device) -> bool:
    """Whether a call of several batches (or a local video's chunks) runs a batch's post-processing beside the next
    batch's forward (sapiens2_demo/overlap.py).
    On CUDA the next forward queues while the worker copies back. On the 2-core CPU it measured faster too
    (`python -m benchmarks video --overlap both`, tiny random-weight checkpoints, a shared machine at load 7-10, two runs:
    seg 0.93x / 1.60x, normals 1.8x / 2.5x, pointmap 1.8x / 2.0x, matting 2.4x / 1.3x), the numpy
    post-processing beside torch's forward, so "auto" overlaps on both; not on Apple's MPS, where it was never
    run. SAPIENS2_OVERLAP=0 turns it off."""
    if OVERLAP in ("0", "1"):
        return OVERLAP == "1"
    return str(device).split(":")[0] in ("cuda", "cpu")


def answers(manager_key: str, frames: list[np.ndarray], jobs: list[Job], batch_size: int | None = None,
            compact: bool = False) -> list:
    """`infer`, then raise the first error of a job that does not tolerate errors (in the caller's process)."""
    replies = infer(manager_key, frames, jobs, batch_size, compact)
    _raise_untolerated(jobs, replies)
    return replies

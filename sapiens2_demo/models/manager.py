"""Loads checkpoints on first use, once, and keeps a bounded set of them in memory.

- Lazy: constructing a ModelManager loads nothing.
- Thread-safe: concurrent first requests for one checkpoint share a single load (a lock per key).
- Bounded: loaded models are kept within `memory_budget_bytes`, least recently used evicted first.
- Local first: `checkpoint_dir/sapiens2-<task>-<size>/` is used when present, never touching the network.
"""

from __future__ import annotations

import gc
import logging
import os
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import loading
from .loading import check_road, transformers_class
from .registry import TASKS, Checkpoint

log = logging.getLogger(__name__)

DEFAULT_DETECTOR = "yolo26n.pt"  # small current YOLO; ultralytics fetches it when online


class CheckpointUnavailable(RuntimeError):
    """A checkpoint could not be had; the message says which one and how to supply it."""


@dataclass
class LoadedModel:
    model: Any  # a transformers model, or an ultralytics YOLO for the detector
    processor: Any  # Sapiens2ImageProcessor (None for the detector)
    nbytes: int
    source: str  # local path or "repo@revision", for messages
    device: str = "cpu"
    dtype: Any = None
    compiled: Any = None  # compile.CompileState when compiling was asked for (status, seconds, note)
    runner: Any = None  # the detector's CPU road, predicting in place of `model` (models/detector_cpu.py)
    broken: bool = False  # found off its road after a failed forward (inference.forward): the next get reloads it
    # ultralytics predictors keep per-call state, so one YOLO must not predict from two threads at once
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)


def resolve_device(device: str | None = None, dtype: str | None = None):
    """'auto' -> CUDA with bf16, else Apple silicon (MPS) with fp32, else the CPU: bf16 where it runs bf16 natively
    (AMX, AVX512-BF16), else fp32."""
    import torch

    from .device import default_dtype, pick_device

    device = pick_device(device or os.environ.get("SAPIENS2_DEVICE"))
    dtype = (dtype or os.environ.get("SAPIENS2_DTYPE") or "auto").lower()
    if dtype == "auto":
        dtype = default_dtype(device)
    dtypes = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16,
              "bf16": torch.bfloat16, "float16": torch.float16, "fp16": torch.float16}
    if dtype not in dtypes:
        raise ValueError(f"Unknown dtype {dtype!r}; choose float32, bfloat16 or float16.")
    return device, dtypes[dtype]


def default_budget_bytes(device: str) -> int:
    env = os.environ.get("SAPIENS2_MODEL_BUDGET_GB")
    if env:
        return int(float(env) * 2**30)
    import torch

    if device.startswith("cuda") and torch.cuda.is_available():
        return int(torch.cuda.get_device_properties(torch.device(device)).total_memory * 0.7)
    # CPU and MPS: Apple silicon's GPU shares the system RAM (unified memory), so both take half of it
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        total = 16 * 2**30
    return int(total * 0.5)


def _lacks_files(error: Exception) -> bool:
    """True when the hub answered but the revision has no such file (as opposed to offline, gated...)."""
    names = {type(e).__name__ for e in (error, error.__cause__, error.__context__) if e is not None}
    return bool(names & {"EntryNotFoundError", "RemoteEntryNotFoundError"}) or "does not appear to have" in str(error)


def _check_backbone_weights(ckpt: Checkpoint, info: dict) -> None:
    """AutoModel (the pretrain backbone) loads a task checkpoint without complaint and leaves the backbone
    random; refuse weights that do not cover the whole model rather than serve noise."""
    missing = sorted(info.get("missing_keys") or [])
    if TASKS[ckpt.task].auto_class == "AutoModel" and missing:
        raise ValueError(f"the weights do not match Sapiens2Model ({len(missing)} tensors missing, e.g. "
                         f"{missing[0]}); is this a task checkpoint rather than the pretrained backbone?")


def _model_nbytes(model) -> int:
    tensors = list(model.parameters()) + list(model.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


def detector_file(name: str) -> str:
    """A path as given; a bare release name ('yolo26n.pt') in the app's cache, where ultralytics downloads it
    when it is not there yet (it would otherwise write it into the working directory)."""
    from .. import cache_root

    if Path(name).exists() or Path(name).name != name:
        return name
    folder = cache_root() / "sapiens2-ultralytics" / "weights"
    folder.mkdir(parents=True, exist_ok=True)
    return str(folder / name)


def _compile_note(key: tuple, note: str) -> str:
    return f"{key[1].split('/')[-1]}: {note}."


class ModelManager:
    def __init__(self, checkpoint_dir: str | Path | None = None, device: str | None = None,
                 dtype: str | None = None, memory_budget_bytes: int | None = None,
                 detector: str | None = None, compile: str | bool | None = None,
                 compile_in_background: bool = False, work_size: int | None = None):
        from .compile import parse_mode, wanted

        checkpoint_dir = checkpoint_dir or os.environ.get("SAPIENS2_CHECKPOINT_DIR")
        self.checkpoint_dir = Path(checkpoint_dir).expanduser() if checkpoint_dir else None
        self.device, self.dtype = resolve_device(device, dtype)
        # auto|on|off (SAPIENS2_COMPILE): regional torch.compile at load, warmed up there (requests pay nothing);
        # "aot": loaded eager, the blocks compiled ahead of time afterwards (ZeroGPU, gpu.compile_ahead)
        self.compile_mode = compile if compile == "aot" else parse_mode(compile)
        self.compile = self.compile_mode != "aot" and wanted(self.compile_mode, self.device, self.dtype)
        # the app: each model serves eager at once and is compiled beside (compile.compile_beside); the CLI and
        # batch engines: at load, and under 'auto' only when it pays for their `work_size` images (compile.pays)
        self.compile_in_background = compile_in_background
        self.work_size = work_size
        self.memory_budget_bytes = memory_budget_bytes or default_budget_bytes(self.device)
        self.detector_name = detector or os.environ.get("SAPIENS2_DETECTOR") or DEFAULT_DETECTOR
        self._models: OrderedDict[tuple, LoadedModel] = OrderedDict()
        self._key_locks: dict[tuple, threading.Lock] = {}
        self._lock = threading.Lock()
        self.load_counts: dict[tuple, int] = {}  # how many times each key was loaded (tests, logs)
        # each load's compile note, numbered: a request reads those of its models numbered after its start
        self._load_notes: deque[tuple[int, tuple, str]] = deque(maxlen=256)
        self._notes_made = 0
        self._notes_taken = 0  # take_compile_notes: where the last call left off
        # ZeroGPU forks GPU workers from this process: a lock held by another thread at that moment would stay
        # held forever in the child, so the child gets fresh ones.
        os.register_at_fork(after_in_child=self._fresh_locks)
        log.info("models run on %s (--device, --dtype and --compile override)", self.road)

    @property
    def road(self) -> str:
        """How models run here: 'CPU (AMD EPYC, AVX512-BF16), bfloat16, compiled' (the log, the app's footer)."""
        from .device import describe_road

        road = describe_road(self.device, self.dtype, self.compile or self.compile_mode == "aot")
        if self.compile and self.compile_in_background:
            road += " in the background (each model eager until its compiled form is ready)"
        why = {"eager": "eager: compiling failed", "compiling": "compiling in the background: eager until then",
               "off": "eager: compiling does not pay for this work"}
        with self._lock:
            states = [(key[1].split("/")[-1], m.compiled.status) for key, m in self._models.items()
                      if m.compiled is not None and (m.compiled.status != "off" or m.compiled.note)]
        aside = [f"{name} {why[status]}" for name, status in states if status in why]
        return road + (f" ({'; '.join(aside)})" if aside else "")

    def _fresh_locks(self) -> None:
        self._lock = threading.Lock()
        self._key_locks = {}

    # -- public ------------------------------------------------------------------------------
    def get(self, ckpt: Checkpoint) -> LoadedModel:
        """The loaded model and processor for an allow-listed checkpoint, loading it if needed."""
        return self._get(("sapiens2", ckpt.repo_id, ckpt.revision), lambda: self._load_sapiens2(ckpt))

    def get_detector(self) -> LoadedModel:
        return self._get(("detector", self.detector_name), self._load_detector)

    def is_loaded(self, ckpt: Checkpoint) -> bool:
        with self._lock:
            return ("sapiens2", ckpt.repo_id, ckpt.revision) in self._models

    def local_path(self, ckpt: Checkpoint) -> Path | None:
        if self.checkpoint_dir is None:
            return None
        path = self.checkpoint_dir / ckpt.dirname
        return path if (path / "config.json").is_file() else None

    def loaded_model(self, key: tuple) -> LoadedModel:
        """The loaded model under a `loaded_keys` key (KeyError when it is not loaded)."""
        with self._lock:
            return self._models[key]

    @property
    def loaded_keys(self) -> list[tuple]:
        with self._lock:
            return list(self._models)

    @property
    def loaded_bytes(self) -> int:
        with self._lock:
            return sum(m.nbytes for m in self._models.values())

    # -- internals ---------------------------------------------------------------------------
    def _cached_locked(self, key: tuple) -> LoadedModel | None:
        loaded = self._models.get(key)
        if loaded is not None and loaded.broken:
            log.warning("%s was found broken (its parameters left its road): reloading it", key[1])
            del self._models[key]
            return None
        if loaded is not None:
            self._models.move_to_end(key)
        return loaded

    def _get(self, key: tuple, load: Callable[[], LoadedModel]) -> LoadedModel:
        with self._lock:
            loaded = self._cached_locked(key)
            if loaded is not None:
                return loaded
            key_lock = self._key_locks.setdefault(key, threading.Lock())
        with key_lock:  # one loader per key; the others wait here and then find it loaded
            with self._lock:
                loaded = self._cached_locked(key)
                if loaded is not None:
                    return loaded
            with loading.LOADING:  # one load at a time in the process (loading.py says why)
                loaded = load()
            with self._lock:
                self.load_counts[key] = self.load_counts.get(key, 0) + 1
                if loaded.compiled is not None and loaded.compiled.note:
                    loaded.compiled.reported = True  # told to the requests that ran this load (compile_notes)
                    self._notes_made += 1
                    self._load_notes.append((self._notes_made, key, _compile_note(key, loaded.compiled.note)))
                self._models[key] = loaded
                self._evict_locked(keep=key)
            return loaded

    def _evict_locked(self, keep: tuple) -> None:
        total, evicted = sum(m.nbytes for m in self._models.values()), False
        for key in list(self._models):
            if total <= self.memory_budget_bytes:
                break
            if key == keep:
                continue
            total -= self._models.pop(key).nbytes
            evicted = True
            log.info("evicted %s to stay within the model memory budget", key)
        if not evicted:  # a full collection costs 0.2-0.5 s in a process with a large heap: only to free a model
            return
        gc.collect()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def _unavailable(self, ckpt: Checkpoint, error: Exception, revisions: list[str]) -> CheckpointUnavailable:
        where = f" (looked for {self.checkpoint_dir / ckpt.dirname})" if self.checkpoint_dir else ""
        detail = str(error).splitlines()[0][:300].rstrip(". ") if str(error) else ""
        return CheckpointUnavailable(
            f"Could not load {ckpt.repo_id} at revision {' or '.join(revisions)}{where}: "
            f"{type(error).__name__}: {detail}. To use a local copy, download the transformers-format files "
            f"(config.json, model.safetensors, preprocessor_config.json) into <DIR>/{ckpt.dirname}/ and start "
            f"the app with --checkpoint-dir <DIR> (or SAPIENS2_CHECKPOINT_DIR); if the repo is gated, accept "
            f"its license and log in first."
        )

    def _load_sapiens2(self, ckpt: Checkpoint) -> LoadedModel:
        auto_class = transformers_class(TASKS[ckpt.task].auto_class)
        processor_class = transformers_class("Sapiens2ImageProcessor")
        local = self.local_path(ckpt)
        source = str(local) if local else ckpt.repo_id
        revisions = [ckpt.revision] + ([ckpt.fallback_revision] if ckpt.fallback_revision and not local else [])
        for attempt, revision in enumerate(revisions):
            kwargs = {"local_files_only": True} if local else {"revision": revision}
            try:
                model, info = auto_class.from_pretrained(source, use_safetensors=True, dtype=self.dtype,
                                                         attn_implementation="sdpa", output_loading_info=True,
                                                         **kwargs)
                _check_backbone_weights(ckpt, info)
                processor = processor_class.from_pretrained(source, **kwargs)
                break
            except Exception as error:  # network, missing files, gated repo, corrupt file: all say the same
                if attempt + 1 < len(revisions) and _lacks_files(error):
                    log.info("%s@%s has no transformers-format files; trying %s", ckpt.repo_id, revision,
                             revisions[attempt + 1])
                    continue
                raise self._unavailable(ckpt, error, revisions[:attempt + 1]) from error
        model = model.to(self.device).eval()
        check_road(model, self.device, self.dtype, ckpt.repo_id)  # never hand out a model half in another dtype
        state = self._compile(ckpt, model, processor) if self.compile else None
        log.info("loaded %s from %s on %s/%s%s", ckpt.repo_id, source, self.device, self.dtype,
                 f" ({state.status}: {state.note})" if state else "")
        return LoadedModel(model, processor, _model_nbytes(model),
                           source if local else f"{ckpt.repo_id}@{revision}", self.device, self.dtype, state)

    def notes_mark(self) -> int:
        """Where a request starts, for `compile_notes`."""
        with self._lock:
            return self._notes_made

    def compile_notes(self, since: int, ckpts=None) -> list[str]:
        """The compile notes a request gets ('compiled at load in 30 s', a fall-back to eager): those of the loads
        of its checkpoints `ckpts` (None: every model) that ended after `since` (its `notes_mark()`), so the
        request that loaded a model and every request that waited for that load say so, and nobody else; and a
        fall-back at run time (or a note set outside a load: ZeroGPU's ahead-of-time compile) not told yet."""
        keys = None if ckpts is None else {("sapiens2", c.repo_id, c.revision) for c in ckpts}
        with self._lock:
            notes = [note for number, key, note in self._load_notes
                     if number > since and (keys is None or key in keys)]
            states = [(key, m.compiled) for key, m in self._models.items()
                      if m.compiled is not None and (keys is None or key in keys)]
        for key, state in states:
            with state._lock:
                if state.note and not state.reported:
                    state.reported = True
                    notes.append(_compile_note(key, state.note))
        return notes

    def take_compile_notes(self) -> list[str]:
        """Every compile note since the last call (the batch CLI and checks: one user per process)."""
        with self._lock:
            since, self._notes_taken = self._notes_taken, self._notes_made
        return self.compile_notes(since)

    def compile_key(self, ckpt: Checkpoint) -> str:
        """Names a checkpoint's compile on this device and dtype (the load-time hint is kept per key)."""
        return f"{ckpt.repo_id}@{str(self.device).split(':')[0]}/{str(self.dtype).replace('torch.', '')}"

    def load_hint(self, ckpt: Checkpoint) -> str:
        """What loading `ckpt` involves beyond reading it: '' or a compile note with the time it took last."""
        from .compile import load_hint

        return load_hint(self.compile_key(ckpt)) if self.compile and not self.compile_in_background else ""

    def _compile(self, ckpt: Checkpoint, model, processor):
        """Regional compilation, warmed up at every batch size the app uses (never a failed load: eager then):
        beside the serving model (the app), or at load when it pays for the work (the CLI, batch engines)."""
        from .compile import CompileState, compile_beside, compile_model, pays

        size = int(processor.size["height"]), int(processor.size["width"])
        key = self.compile_key(ckpt)
        if self.compile_in_background:
            log.info("compiling %s in the background: eager until then", ckpt.repo_id)
            return compile_beside(model, size, self.device, self.dtype, key=key)
        if self.compile_mode == "auto" and self.work_size is not None:
            worth, why = pays(key, self.work_size)
            if not worth:  # 'off' with the forwards' times kept: the eager side of the next decision
                log.info("%s: eager, compiling does not pay (%s)", ckpt.repo_id, why)
                return CompileState(status="off", key=key, note=f"eager: compiling does not pay here ({why})")
            log.info("%s: compiling pays (%s)", ckpt.repo_id, why)
        log.info("compiling %s (%s)", ckpt.repo_id, self.load_hint(ckpt))
        return compile_model(model, size, self.device, self.dtype, key=key)

    def _load_detector(self) -> LoadedModel:
        name = self.detector_name
        try:
            from ultralytics import YOLO

            offline = os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("YOLO_OFFLINE") == "1"
            path = detector_file(name)
            if not Path(path).exists() and offline:
                raise FileNotFoundError(f"{name} is not on disk and downloads are off (offline)")
            model = YOLO(path)  # a path, or a release that ultralytics fetches (into the app's cache) when online
        except Exception as error:
            raise CheckpointUnavailable(
                f"Could not load the person detector {name!r}: {type(error).__name__}: {error}. "
                f"Pass a local weights file with --detector PATH (or SAPIENS2_DETECTOR)."
            ) from error
        log.info("loaded detector %s on %s", name, self.device)
        loaded = LoadedModel(model, None, _model_nbytes(model.model), name, self.device)
        if self.device == "cpu":
            import torch

            from .detector_cpu import onnx_detector

            loaded.runner = onnx_detector(path, torch.get_num_threads())
        return loaded

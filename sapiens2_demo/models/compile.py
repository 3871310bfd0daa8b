"""Regional compilation of Sapiens2: each repeated transformer block (`Sapiens2Layer`) compiled with a dynamic
batch dimension, warmed up at load, with a persistent cache and a way back to eager.

- Regional: the blocks are one code object, compiled once and shared by every block of every loaded model of
  the same width (pose after seg pays nothing), at a fraction of a whole-model compile (COMPILE.md section 1).
- One graph for every batch size: dynamo specialises size-1 dimensions (0/1 specialisation), which would make
  batch 1 and batch >= 2 two compiles; compiling with `backed_size_oblivious` treats batch 1 like any other
  size, so images (1), pose crops (1-40 with flip test), video batches and their remainders share one graph.
  The warm-up runs batch 1 at load: a second size would only re-run the same graph (the tests check that
  batch 3 and 20 add no graph, and that a whole CLI run recompiles nothing after the warm-up).
- Cache: inductor's FX graph / AOTAutograd caches live in `cache_dir()` (SAPIENS2_COMPILE_CACHE, else a Space's
  persistent /data, else beside the Hugging Face cache), so a second launch only re-traces (COMPILE.md section 3).
- Safety: a failed warm-up (no C++ compiler, an unusable cache folder) leaves that model eager with a note; at
  run time a compile error or the recompile limit turns the whole model back to eager for good, with a log line
  and a note. A damaged or stale cache entry is a miss for torch (its keys hold the versions): it compiles again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import statistics
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

MODES = ("auto", "on", "off")
BLOCK_CLASS = "Sapiens2Layer"
WARMUP_BATCHES = (1,)  # one graph with a symbolic batch serves every size (tests/system/test_compile_cli.py)
QUIET_S = 10.0  # s with no forward before a background compile starts: a CPU answer's drawing and the next upload take seconds
MOST_WAIT_S = 60.0  # s after the model's first forward at the latest (a busy server is never quiet)
RECOMPILE_LIMIT = 64  # the blocks of every loaded model share one code object (one entry per width and dtype)
CACHE_ENV = "SAPIENS2_COMPILE_CACHE"
_TIMINGS = "load_seconds.json"
_lock = threading.Lock()
_timings_lock = threading.Lock()
_road = threading.local()  # .compiled: the road of the forward running on this thread (one_road)
BACKEND = "inductor"


def parse_mode(mode: str | bool | None = None) -> str:
    """'auto' | 'on' | 'off' from a flag, SAPIENS2_COMPILE or a bool; 1/true/yes and 0/false/no are accepted."""
    if isinstance(mode, bool):
        return "on" if mode else "off"
    value = str(mode if mode is not None else os.environ.get("SAPIENS2_COMPILE") or "auto").strip().lower()
    value = {"1": "on", "true": "on", "yes": "on", "0": "off", "false": "off", "no": "off", "": "auto"}.get(value,
                                                                                                              value)
    if value not in MODES:
        raise ValueError(f"Unknown compile mode {mode!r}; choose auto, on or off.")
    return value


def wanted(mode: str | bool | None, device: str, dtype=None, capabilities: dict | None = None) -> bool:
    """auto: on for CUDA (1.6-1.9x faster forwards there) and for bfloat16 on a CPU that runs it natively (1.8x
    over eager bf16 with AMX, CPU.md); off elsewhere (float32 on a CPU gains 1.05x, MPS little, for the wait)."""
    mode = parse_mode(mode)
    if mode != "auto":
        return mode == "on"
    device = str(device)
    if device.startswith("cuda"):
        return True
    if device == "cpu" and "bfloat16" in str(dtype):
        from .device import native_bf16

        return bool(native_bf16(capabilities))
    return False


PERSISTENT = Path("/data")  # a Hugging Face Space's persistent storage, when the Space has it: survives restarts


def cache_dir() -> Path:
    """SAPIENS2_COMPILE_CACHE, else `sapiens2-compile/` in a Space's persistent storage (/data, when it is there and
    writable: a restarted Space then loads its compiled code instead of compiling again), else beside the Hugging
    Face cache (~/.cache/...)."""
    explicit = os.environ.get(CACHE_ENV)
    if explicit:
        return Path(explicit).expanduser()
    if PERSISTENT.is_dir() and os.access(PERSISTENT, os.W_OK):
        return PERSISTENT / "sapiens2-compile"
    from huggingface_hub import constants

    return Path(constants.HF_HOME).expanduser().parent / "sapiens2-compile"


def use_cache_dir() -> Path:
    """Point inductor's persistent caches at `cache_dir()` (an explicit TORCHINDUCTOR_CACHE_DIR wins unless
    SAPIENS2_COMPILE_CACHE is set too). Call before the first compile: torch reads it on first use."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    # torch writes its default into the variable when it first looks (an import may already have): that is not
    # the user's choice
    chosen = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
    if os.environ.get(CACHE_ENV) or not chosen or os.path.abspath(chosen) == os.path.abspath(default_cache_dir()):
        path = cache_dir() / "inductor"
        path.mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(path)
    return Path(os.environ["TORCHINDUCTOR_CACHE_DIR"])


def blocks(model) -> list:
    """The model's repeated transformer blocks, in order."""
    return [module for module in model.modules() if type(module).__name__ == BLOCK_CLASS]


def _runtime_errors() -> tuple[type[BaseException], ...]:
    import torch._dynamo.exc as dynamo_exc
    import torch._inductor.exc as inductor_exc

    return (dynamo_exc.TorchDynamoException, dynamo_exc.FailOnRecompileLimitHit, inductor_exc.OperatorIssue,
            inductor_exc.CppCompileError, inductor_exc.InvalidCxxCompiler)


@dataclass
class CompileState:
    """How a model runs: 'compiled', 'compiling' (in the background: eager until it is ready), 'eager' (fell back,
    `note` says why) or 'off'."""
    status: str = "off"
    seconds: float = 0.0  # compile + warm-up time at load
    note: str = ""
    phase: str = "at load"  # then "at run time": where a fall-back happened, for the note
    fallbacks: int = 0
    reported: bool = False  # the note was shown (a fall-back at run time makes a new one)
    key: str = ""  # the timings' key (manager.compile_key): forwards' seconds per image are kept under it
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _seen: dict = field(default_factory=lambda: {"eager": [], "compiled": []}, repr=False)
    _start: object = field(default=None, repr=False)  # compile_beside's build, started after the first forward (quiet)

    def forward_done(self) -> None:
        """A forward of this model is over. After its first, the background compile starts once no model has run a
        forward for QUIET_S (MOST_WAIT_S at the latest): importing inductor and tracing are Python, under the GIL,
        so started at once they slowed the first answer's post-processing and drawing (1.13x eager's first answer
        on 2 cores), and a visitor's next few answers."""
        global _LAST_FORWARD
        _LAST_FORWARD = time.monotonic()
        with self._lock:
            start, self._start = self._start, None
        if start is not None:
            threading.Thread(target=_when_quiet, args=(start,), name="compile: waiting for a quiet moment",
                             daemon=True).start()

    def observe(self, compiled: bool, seconds_each: float) -> None:
        """A forward's seconds per image on its road; the first few of each road are kept in the timings file
        (what `pays` reads: the gain of compiling on this machine)."""
        road = "compiled" if compiled else "eager"
        with self._lock:
            seen = self._seen[road]
            if len(seen) >= OBSERVED or not self.key:
                return
            seen.append(seconds_each)
            median = statistics.median(seen[1:] or seen)  # the first forward of a road pays one-time set-ups
        record_timing(self.key, road, median)

    def fall_back(self, model, error: BaseException) -> None:
        with self._lock:
            if self.status == "eager":
                return
            self.status, self.fallbacks, self.reported = "eager", self.fallbacks + 1, False
            self.note = f"compiling failed {self.phase} ({_describe(error)}); running eager"
            for block in blocks(model):
                block._compiled_call_impl = None  # nn.Module.__call__ goes back to the eager _call_impl
        log.warning("%s: %s", type(model).__name__, self.note)


def _describe(error: BaseException) -> str:
    """'Type: first line', the compiler's own error rather than dynamo's wrapper around it."""
    inner = getattr(error, "inner_exception", None)
    if isinstance(inner, BaseException):
        error = inner
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {(text[0] if text else '')[:200]}"


def _guarded(block, compiled, model, state: CompileState):
    """The block's compiled call; a compile error turns the model back to eager and this call runs eager."""
    errors = _runtime_errors()

    def call(*args, **kwargs):
        road = getattr(_road, "compiled", None)
        if not (state.status == "compiled" if road is None else road):  # eager until the swap (one_road)
            return block._call_impl(*args, **kwargs)
        try:
            return compiled(*args, **kwargs)
        except errors as error:
            state.fall_back(model, error)
            return block._call_impl(*args, **kwargs)

    return call


@contextlib.contextmanager
def one_road(state: CompileState | None, compiled: bool | None = None):
    """The forward on this thread runs on one road from start to end: the model's road when it starts (or
    `compiled` as given: the warm-up). A compiled form swapped in meanwhile serves from the next forward on."""
    before = getattr(_road, "compiled", None)
    _road.compiled = (state is not None and state.status == "compiled") if compiled is None else compiled
    try:
        yield _road.compiled
    finally:
        _road.compiled = before


def compile_blocks(model, state: CompileState, backend=BACKEND) -> None:
    """Compile each block in place (torch.compile of its call, dynamic shapes), guarded by `state`."""
    import torch

    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, RECOMPILE_LIMIT)
    config.fail_on_recompile_limit_hit = True  # raise, so the guard falls back with a note instead of silently
    for block in blocks(model):
        compiled = torch.compile(block._call_impl, dynamic=True, backend=backend)
        block._compiled_call_impl = _guarded(block, compiled, model, state)


def warm_up(model, input_size: tuple[int, int], device, dtype, batches=WARMUP_BATCHES) -> None:
    """Run the model at each warm-up batch size on zeros (inference mode, as `inference.forward` runs it)."""
    import torch
    from torch.fx.experimental import _config as fx_config

    height, width = input_size
    # both are read when a graph is made: here, not at run time. specialize_float: the blocks' float constants
    # (norm epsilons, attention scaling) as constants; as symbols (dynamic=True's default) dynamo traces the block
    # twice ("Restarting analysis due to _tensorify_python_scalars"), about 1 s of every launch, warm ones too
    with fx_config.patch(backed_size_oblivious=True), torch._dynamo.config.patch(specialize_float=True), \
            one_road(None, compiled=True):
        for batch in batches:
            dummy = torch.zeros(batch, 3, height, width, device=device, dtype=dtype)
            with torch.inference_mode():
                model(pixel_values=dummy)


def compile_model(model, input_size: tuple[int, int], device, dtype, key: str = "", backend=None,
                  state: CompileState | None = None) -> CompileState:
    """Regionally compile `model` in place and warm it up; on any failure the model stays eager (with a note).
    A damaged cache entry is a cache miss for torch (it compiles again); an unusable cache folder is a failure.
    With a `state` that is 'compiling' (compile_beside), the model serves eager meanwhile and the compiled form
    is swapped in at the end."""
    beside = state is not None
    state = state or CompileState(status="compiled", key=key)
    if not blocks(model):
        state.status, state.note = "off", f"no {BLOCK_CLASS} blocks to compile"
        return state
    started = time.perf_counter()
    try:
        with _lock:  # one model compiles at a time: the warm-up shares dynamo's global state
            use_cache_dir()
            before = _compile_counts()
            compile_blocks(model, state, backend or BACKEND)
            warm_up(model, input_size, device, dtype)
            after = _compile_counts()
    except Exception as error:  # noqa: BLE001 - warm-up inputs are ours: any failure is the compiler's
        state.fall_back(model, error)
        return state
    took = time.perf_counter() - started
    compiled, cached, graphs = (a - b for a, b in zip(after, before))
    from_cache = not compiled and (cached or not graphs)
    where = "in the background" if beside else "at load"
    with state._lock:
        state.phase = "at run time"
        if state.status not in ("compiled", "compiling"):  # fell back during the warm-up
            return state
        state.status, state.seconds, state.reported = "compiled", took, False  # the swap: from the next forward
        state.note = (f"loaded from the compile cache {'in the background ' if beside else ''}in {seconds(took)} s"
                      if from_cache else
                      f"compiled {where} in {seconds(took)} s") + ("; requests run compiled from then on" if beside else "")
    record_load_seconds(key, took)
    return state


_LAST_FORWARD = 0.0  # time.monotonic() when any model's forward last ended (CompileState.forward_done)


def _when_quiet(start) -> None:
    began = time.monotonic()
    while True:
        quiet = time.monotonic() - _LAST_FORWARD
        if quiet >= QUIET_S or time.monotonic() - began >= MOST_WAIT_S:
            return start()
        time.sleep(min(0.25, QUIET_S - quiet))


def compile_beside(model, input_size: tuple[int, int], device, dtype, key: str = "") -> CompileState:
    """The model serves eager from now; its compiled form is built on a background thread at the lowest CPU
    priority, started at the first quiet moment after the first forward (`forward_done`), and swapped in when warmed up (the
    state turns 'compiled'), for the forwards that start after."""
    state = CompileState(status="compiling", key=key, note="compiling in the background: eager until then",
                         phase="in the background")
    if not blocks(model):
        state.status, state.note = "off", f"no {BLOCK_CLASS} blocks to compile"
        return state

    def build():
        lowest_priority()
        compile_model(model, input_size, device, dtype, key=key, state=state)
        log.info("%s: %s", key or type(model).__name__, state.note)

    state._start = threading.Thread(target=build, name=f"compile {key}", daemon=True).start
    return state


def lowest_priority() -> None:
    """This thread at nice 19 (Linux sets a thread's own; the compiler processes it starts inherit it), so the
    cores go to the requests first; elsewhere nothing changes."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    except (AttributeError, OSError):
        pass


def _compile_counts() -> tuple[int, int, int]:
    """Torch's counters (compiles, cache hits, new graphs): a load that compiled nothing (its graphs came from the
    on-disk cache, or dynamo reused the blocks' code of a loaded model of the same width) took its code from the
    compile cache."""
    from torch._dynamo.utils import counters

    return (counters["inductor"]["fxgraph_cache_miss"],
            counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"],
            counters["stats"]["unique_graphs"])


# -- how long the first load takes (a hint for the UI, measured on this machine) --------------------------------
def _timings_path() -> Path:
    return cache_dir() / _TIMINGS


def _timings() -> dict:
    try:
        return json.loads(_timings_path().read_text())
    except (OSError, ValueError):
        return {}


def _update(key: str, change) -> None:
    if not key:
        return
    with _timings_lock:
        try:
            timings = _timings()
            entry = timings.get(key) if isinstance(timings.get(key), dict) else {}
            timings[key] = change(entry)
            _timings_path().parent.mkdir(parents=True, exist_ok=True)
            _timings_path().write_text(json.dumps(timings, indent=1, sort_keys=True))
        except OSError as error:  # a read-only cache folder only loses the hint
            log.info("compile timings not saved: %s", error)


def record_load_seconds(key: str, seconds: float) -> None:
    _update(key, lambda entry: {**entry, "last": round(seconds, 1),
                                "most": round(max(seconds, entry.get("most", 0.0)), 1)})


def record_timing(key: str, road: str, seconds_each: float) -> None:
    """A road's seconds per image ('eager' or 'compiled') for `key` on this machine."""
    _update(key, lambda entry: {**entry, road: round(seconds_each, 4)})


OBSERVED = 5  # forwards per road and process whose times are kept
PAYS_FROM = 24  # images (or frames) from which compiling pays when this machine has not measured it yet: a cold
#                 compile of a 0.4b model on a 2-core AMX CPU pays after ~22 requests, a warm one after ~6


def pays(key: str, images: int) -> tuple[bool, str]:
    """Whether compiling `key` pays for `images` images (or frames), and why: from this machine's last compile
    time and both roads' seconds per image when measured, else from PAYS_FROM."""
    seen = _timings().get(key)
    seen = seen if isinstance(seen, dict) else {}
    if all(isinstance(seen.get(name), (int, float)) for name in ("last", "eager", "compiled")):
        saved = seen["eager"] - seen["compiled"]
        worth = saved > 0 and images * saved > seen["last"]
        return worth, (f"{images} images x {max(saved, 0.0):.2f} s saved each "
                       f"{'>' if worth else '<='} {seconds(seen['last'])} s of compiling, as measured here")
    worth = images >= PAYS_FROM
    return worth, f"{images} images {'>=' if worth else '<'} {PAYS_FROM} (not measured on this machine yet)"


def seconds(value: float) -> str:
    """Whole seconds, or tenths under ten (a warm cache's 0.4 s read as "0 s")."""
    return f"{value:.0f}" if value >= 10 else f"{value:.1f}"


def load_hint(key: str) -> str:
    """What the UI says while a model loads and compiles."""
    seen = _timings().get(key)
    if isinstance(seen, dict) and "last" in seen:
        return (f"compiling: {seconds(seen['last'])} s last time on this machine, at most {seconds(seen['most'])} s; "
                "models of the same width share the work")
    return "compiling: up to a minute or two the first time on this machine; later launches reuse the compile cache"

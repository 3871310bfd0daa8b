"""A stand-in for Hugging Face's `spaces` package that behaves like ZeroGPU for state (tests only).

Put `tests/zerogpu` on PYTHONPATH and `import spaces` finds this. Like `spaces.zero.wrappers`:
- `spaces.GPU` works bare (`@spaces.GPU`) or with `duration=` (seconds, a timedelta, or a callable that gets
  the function's arguments and is called in the caller, once per call);
- each call pickles `(args, kwargs)` in the caller (an unpicklable argument raises `PicklingError`, as the
  real queue does), runs the function in a child process forked from the caller, and pickles the return
  value (or the exception) back; a call made inside a child runs directly.
Stricter than the real one: a fresh fork per call (the real one may reuse a worker, which is lenient about
state loaded after the fork), and a result holding a tensor off the CPU is refused (ZeroGPU forbids CUDA
tensors in results). Errors are re-raised as they are; the real one turns any non-`gr.Error` into
`gr.Error("ZeroGPU worker error", <class name>)`, dropping the message.

What it does is observable in the log: every log record is tagged `[zerogpu-main pid=N]` in the process
that imported this package and `[zerogpu-child pid=N]` in a GPU call's child, and each call prints
`[zerogpu] call NAME duration=Ss ...` and `[zerogpu] done NAME child=PID ...` to stderr.

The AoT API (`spaces.zero.torch.aoti` of spaces 0.51.3) with the real signatures: `aoti_capture(module,
call_method='forward')` (a context manager that stores the first call's args/kwargs and skips the rest of its
body), `aoti_compile_and_save(package_dir, exported_program, inductor_configs=None, submodule=None)` (an
AOTInductor package written to `package_dir/root/package.pt2`) and `aoti_load_from_package_dir(module,
package_dir)` (patches the module's forward with the package, loaded lazily once per process).
Stricter than the real one: compiling refuses to run outside a GPU call (artefacts are GPU-specific).
Simpler: constants stay inside the package (the real one loads them from the module's state dict).
"""

from __future__ import annotations

import functools
import logging
import multiprocessing
import os
import pickle
import sys
import time
import traceback
from datetime import timedelta

__all__ = ["GPU", "ZeroGPUError", "aoti_capture", "aoti_compile_and_save", "aoti_load_from_package_dir"]

MAIN_PID = os.getpid()
CALL_TIMEOUT_S = float(os.environ.get("ZEROGPU_STANDIN_TIMEOUT_S", "600"))  # a hung child must not hang tests
_fork = multiprocessing.get_context("fork")
_forked = False  # True inside a GPU call's child


class ZeroGPUError(RuntimeError):
    """The call could not run as ZeroGPU would run it (the child died, timed out, or returned a GPU tensor)."""


# --- process tags on every log record ----------------------------------------------------------------
_make_record = logging.getLogRecordFactory()


def _tagged_record(*args, **kwargs):
    record = _make_record(*args, **kwargs)
    role = "child" if _forked else ("main" if os.getpid() == MAIN_PID else "other")
    record.msg = f"[zerogpu-{role} pid={os.getpid()}] {record.msg}"
    return record


logging.setLogRecordFactory(_tagged_record)


def _say(message: str) -> None:
    print(f"[zerogpu] {message}", file=sys.stderr, flush=True)


# --- pickling, as the queues between the caller and the worker do --------------------------------------
class _CpuOnlyPickler(pickle.Pickler):
    """Refuse tensors that are not on the CPU (ZeroGPU: never return CUDA tensors from a GPU call)."""

    def persistent_id(self, obj):
        torch = sys.modules.get("torch")
        if torch is not None and isinstance(obj, torch.Tensor) and obj.device.type != "cpu":
            raise ZeroGPUError(f"a GPU call returned a tensor on {obj.device}; move results to the CPU first")
        return None


def _dumps(obj, what: str) -> bytes:
    import io

    buffer = io.BytesIO()
    try:
        _CpuOnlyPickler(buffer, protocol=pickle.HIGHEST_PROTOCOL).dump(obj)
    except ZeroGPUError:
        raise
    except Exception as error:  # TypeError "cannot pickle '_thread.lock' object" and kin, as PicklingError
        raise pickle.PicklingError(f"ZeroGPU cannot pickle {what}: {type(error).__name__}: {error}") from error
    return buffer.getvalue()


# --- the child -----------------------------------------------------------------------------------------
def _child_main(task, args_conn, result_conn) -> None:
    global _forked
    _forked = True
    args, kwargs = pickle.loads(args_conn.recv_bytes())
    try:
        outcome = ("ok", task(*args, **kwargs))
    except BaseException as error:  # noqa: BLE001 - everything goes back to the caller
        outcome = ("error", error, traceback.format_exc())
    try:
        payload = _dumps(outcome, f"the result of {task.__qualname__}()")
    except Exception as error:  # noqa: BLE001 - the result (or the exception) itself cannot cross
        detail = outcome[2] if outcome[0] == "error" else ""
        payload = pickle.dumps(("error", ZeroGPUError(f"{type(error).__name__}: {error}"), detail))
    result_conn.send_bytes(payload)


def _run_in_child(task, args: tuple, kwargs: dict):
    name = task.__qualname__
    payload = _dumps((args, kwargs), f"the arguments of {name}() (a GPU function must take only data)")
    args_r, args_w = _fork.Pipe(duplex=False)
    result_r, result_w = _fork.Pipe(duplex=False)
    child = _fork.Process(target=_child_main, args=(task, args_r, result_w), daemon=True, name=f"zerogpu-{name}")
    started = time.perf_counter()
    child.start()
    result_w.close()  # so a dead child reads as EOF here
    args_r.close()
    try:
        args_w.send_bytes(payload)
        if not result_r.poll(CALL_TIMEOUT_S):
            raise ZeroGPUError(f"{name}() ran past {CALL_TIMEOUT_S:.0f} s in child {child.pid}")
        raw = result_r.recv_bytes()
        outcome = pickle.loads(raw)
    except EOFError:
        child.join(5)
        raise ZeroGPUError(f"ZeroGPU worker {child.pid} died (exit code {child.exitcode}) running {name}()") from None
    finally:
        args_w.close()
        result_r.close()
        child.join(5)
        if child.is_alive():
            child.kill()
            child.join()
    _say(f"done {name} child={child.pid} exit={child.exitcode} seconds={time.perf_counter() - started:.2f} "
         f"bytes_in={len(payload)} bytes_out={len(raw)} result={outcome[0]}")
    if outcome[0] == "error":
        error, child_traceback = outcome[1], outcome[2]
        if child_traceback:
            print(child_traceback, file=sys.stderr, flush=True)
        raise error
    return outcome[1]


# --- the decorator ----------------------------------------------------------------------------------
def _seconds(duration, args: tuple, kwargs: dict) -> float | None:
    value = duration(*args, **kwargs) if callable(duration) else duration
    if value is None:
        return None
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise TypeError(f"ZeroGPU duration must be a positive number of seconds or a timedelta, got {value!r}")
    return float(value)


def _wrap(task, duration, size):
    if not callable(task):
        raise TypeError(f"spaces.GPU decorates a function, got {task!r}")

    @functools.wraps(task)
    def gpu_call(*args, **kwargs):
        if _forked:  # already inside a GPU call
            return task(*args, **kwargs)
        seconds = _seconds(duration, args, kwargs)
        asked = "default" if seconds is None else f"{seconds:g}s"
        _say(f"call {task.__qualname__} duration={asked} size={size} pid={os.getpid()}")
        return _run_in_child(task, args, kwargs)

    gpu_call.zerogpu = None  # the real decorator marks its functions the same way
    return gpu_call


def GPU(task=None, *, duration=None, size=None, **kwargs):  # noqa: N802 - the real name
    """`@spaces.GPU`, `@spaces.GPU(duration=60)`, `@spaces.GPU(duration=fn)` (fn gets the call's arguments)."""
    if not callable(task):
        if isinstance(task, str):
            size = task
        elif task is not None:
            duration = task
        return functools.partial(_wrap, duration=duration, size=size)
    return _wrap(task, duration, size)


# --- ahead-of-time compilation (spaces.zero.torch.aoti) -------------------------------------------------------
class _CapturedCall:
    def __init__(self):
        self.args: tuple = ()
        self.kwargs: dict = {}


class _CapturedCallException(Exception):
    def __init__(self, args, kwargs):
        super().__init__()
        self.call_args, self.call_kwargs = args, kwargs


def aoti_capture(module, call_method: str = "forward"):
    """`with aoti_capture(block) as call: model(...)`: call.args / call.kwargs of the first call of the method."""
    import contextlib
    from unittest.mock import patch

    @contextlib.contextmanager
    def capturing():
        captured = _CapturedCall()

        def capture_call(*args, **kwargs):
            raise _CapturedCallException(args, kwargs)

        with patch.object(module, call_method, new=capture_call):
            try:
                yield captured
            except _CapturedCallException as call:
                captured.args, captured.kwargs = call.call_args, call.call_kwargs

    return capturing()


PACKAGE_FILENAME = "package.pt2"


class StandInPackage:
    """A saved AOTInductor package (a path), loaded on the first call in each process (and thread), like the real
    `LazyAOTIModel` bound to the module's weights by `aoti_patch`."""

    def __init__(self, path):
        self.path = str(path)
        self._loaded: dict = {}

    def __call__(self, *args, **kwargs):
        import threading

        import torch

        key = (os.getpid(), threading.get_ident())
        if key not in self._loaded:
            self._loaded[key] = torch._inductor.aoti_load_package(self.path)
            _say(f"aoti package loaded pid={os.getpid()} path={self.path}")
        return self._loaded[key](*args, **kwargs)


def aoti_compile_and_save(package_dir, exported_program, inductor_configs=None, submodule=None):
    """Compile and write `package_dir/root/package.pt2` (`submodules/NAME/` for a submodule), as the real one."""
    from pathlib import Path

    import torch

    if not _forked:
        raise ZeroGPUError("aoti_compile_and_save runs inside a @spaces.GPU call (artefacts are GPU-specific)")
    folder = Path(package_dir) / ("submodules" / Path(submodule) if submodule is not None else Path("root"))
    folder.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    torch._inductor.aoti_compile_and_package(exported_program, package_path=str(folder / PACKAGE_FILENAME),
                                             inductor_configs=dict(inductor_configs or {}))
    _say(f"aoti_compile_and_save seconds={time.perf_counter() - started:.1f} path={folder / PACKAGE_FILENAME}")


def aoti_load_from_package_dir(module, package_dir):
    """Patch `module.forward` (and each saved submodule's) with its package, loaded lazily; the real one's layout.
    Like the real `aoti_patch`, the module keeps its parameters."""
    from pathlib import Path

    package_dir = Path(package_dir)
    submodules = package_dir / "submodules"
    if submodules.is_dir():
        for folder in submodules.iterdir():
            module.get_submodule(folder.name).forward = StandInPackage(folder / PACKAGE_FILENAME)
    if (package_dir / "root").is_dir():
        module.forward = StandInPackage(package_dir / "root" / PACKAGE_FILENAME)

"""The fit's worker process (pose/fit_worker.py) from the caller's side: what a failed call leaves behind."""

import gc
import math
import weakref

from sapiens2_demo.pose.fit_worker import run_alone


class _Held:
    """Stands for what the caller's frame holds (the tracks, an export and its open files)."""


def _caller_that_catches():
    held = _Held()
    try:
        run_alone(math.sqrt, -1.0)  # ValueError in the worker, raised again here
    except ValueError:
        pass
    return weakref.ref(held)


def test_a_fit_error_leaves_no_reference_cycle_holding_the_caller_s_frames():
    """A fit that raised (motion.py catches the ValueError) frees the caller's locals when its frames end, as an
    in-process fit does. An exception kept in the worker call's frame made a cycle (frame -> exception ->
    traceback -> the caller's frames) that held them until a garbage collection; ZeroGPU's forked GPU child
    inherited the cycle and died with SIGSEGV when its collection freed them."""
    assert math.isnan(run_alone(math.fsum, [math.nan]))  # first imports and caches made before the count
    gc.collect()
    gc.disable()
    try:
        held = _caller_that_catches()
        assert held() is None, "the caller's locals outlived its frames (kept by a reference cycle)"
        assert gc.collect() == 0
    finally:
        gc.enable()

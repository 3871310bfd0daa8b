"""The clip fit (clip_fit.py) in a worker process of its own, on one torch thread there.

torch's thread count is the process's: a fit that set it to one in the app's process held every visitor's forward
that started meanwhile to one thread too; left at the process's count, the fit's many small operations ran 3-20x
slower on 2 cores (its threads spin waiting on each other beside any other busy thread), and OpenMP's own
per-thread count does not reach torch's intra-op work. In a worker the fit has one thread and the app keeps its
count (and its GIL: the fit's Python does not slow the server's).

A worker is `python -m sapiens2_demo.pose.fit_worker` (not multiprocessing's spawn, which would run again the top
of the script that started the app); it reads a pickled call on its stdin and answers on its stdout. One is started
for each fit and closed after it (an import of torch: 1-3 s a fit). Up to WORKERS fits run at once; the same
float64 operations on one thread give the results the app's process would. Where a worker cannot start or dies,
the fit runs here, on the caller's thread with the process's thread count (a warning is logged).

A fit's error is raised in the caller without a reference cycle (run_alone's frame -> the error -> its traceback
-> that frame): such a cycle keeps the caller's frames and all they hold (the tracks, the video job's decoder and
encoder) until a garbage collection, and a process forked meanwhile (ZeroGPU's GPU child) inherits them and dies
with SIGSEGV when its own collection frees them there (tests/system/test_zerogpu_video.py).
"""

from __future__ import annotations

import logging
import os
import pickle
import subprocess
import sys
import threading
from pathlib import Path

log = logging.getLogger(__name__)
WORKERS = max(1, min(4, (os.cpu_count() or 2) // 2))  # fits at once (people, visitors): one thread each
_SLOTS = threading.BoundedSemaphore(WORKERS)


class _Worker:
    def __init__(self):
        package_root = str(Path(__file__).resolve().parents[2])
        path = os.pathsep.join([package_root] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
        env = {**os.environ, "PYTHONPATH": path, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        self.process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env)

    def call(self, function, args) -> tuple[bool, object]:
        """(True, the result) or (False, the exception the worker raised)."""
        pickle.dump((function, args), self.process.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.process.stdin.flush()
        return pickle.load(self.process.stdout)

    def close(self) -> None:
        try:
            self.process.stdin.close()
            self.process.wait(5)
        except (OSError, subprocess.TimeoutExpired):
            self.process.kill()
            self.process.wait()


def run_alone(function, *args):
    """function(*args) in a fit worker of its own (see the module docstring); its exceptions are raised here."""
    with _SLOTS:
        try:
            worker = _Worker()
        except OSError as error:
            log.warning("the clip fit runs in the app's process (no worker: %s)", error)
            return function(*args)
        try:
            ok, value = worker.call(function, args)
        except (EOFError, OSError, pickle.UnpicklingError) as error:  # the worker died
            log.warning("the clip fit's worker stopped (%s); this fit runs in the app's process", error)
            return function(*args)
        finally:
            worker.close()
    if not ok:  # no reference cycle through this frame (the module docstring)
        try:
            raise value
        finally:
            del value
    return value


def _serve() -> None:
    """The worker: one call from stdin, its answer on the original stdout (anything printed goes to stderr)."""
    import torch

    torch.set_num_threads(1)
    answers = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)
    try:
        function, args = pickle.load(sys.stdin.buffer)
    except EOFError:
        return
    try:
        answer = (True, function(*args))
    except Exception as error:  # raised again in the app's process
        answer = (False, error)
    pickle.dump(answer, answers, protocol=pickle.HIGHEST_PROTOCOL)
    answers.flush()


if __name__ == "__main__":
    _serve()

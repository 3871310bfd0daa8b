"""Per-session output folders that delete themselves after a while.

Every run writes its downloads into `root/<session>/<run id>/`; folders older than `max_age_s` are
swept in a thread of their own, started by a new run at most every `sweep_every_s`, and a session's folder goes
when its browser tab closes.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import threading
import time
import uuid
from pathlib import Path

DEFAULT_MAX_AGE_S = int(os.environ.get("SAPIENS2_OUTPUT_MAX_AGE_S", "3600"))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "", name)[:64] or "anonymous"


class OutputStore:
    def __init__(self, root: str | Path | None = None, max_age_s: int = DEFAULT_MAX_AGE_S,
                 sweep_every_s: float | None = None):
        self.root = Path(root or Path(tempfile.gettempdir()) / "sapiens2_outputs").resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_age_s = max_age_s
        self.sweep_every_s = min(60.0, max_age_s / 4) if sweep_every_s is None else sweep_every_s
        self.sweeper: threading.Thread | None = None  # the last sweep's thread
        self._swept_at = float("-inf")
        self._lock = threading.Lock()

    def new_run_dir(self, session: str | None) -> Path:
        self.sweep_soon()
        path = self.root / _safe(session or "") / uuid.uuid4().hex[:12]
        for _ in range(5):
            try:
                path.mkdir(parents=True)
                return path
            except FileNotFoundError:  # a sweep (another request) removed the session folder as it was still empty
                continue
        path.mkdir(parents=True)
        return path

    def sweep_soon(self) -> None:
        """A sweep in a thread of its own, unless one ran within `sweep_every_s` or is running: a request does not
        wait for it (it stats every run folder of the last hour: 13 ms for 450 sessions, more on a busy Space)."""
        with self._lock:
            now = time.monotonic()
            if now - self._swept_at < self.sweep_every_s or (self.sweeper is not None and self.sweeper.is_alive()):
                return
            self._swept_at = now
            self.sweeper = threading.Thread(target=self._sweep_quietly, name="sapiens2-output-sweep", daemon=True)
            self.sweeper.start()

    def _sweep_quietly(self) -> None:
        try:
            self.sweep()
        except FileNotFoundError:  # the whole folder went (a test's temporary folder, an operator's cleanup)
            pass

    def sweep(self, now: float | None = None) -> int:
        """Delete run folders older than max_age_s (and emptied session folders); returns how many."""
        now = time.time() if now is None else now
        removed = 0
        for session_dir in self.root.iterdir():
            try:
                if not session_dir.is_dir():
                    continue
                for run_dir in session_dir.iterdir():
                    try:
                        if now - run_dir.stat().st_mtime > self.max_age_s:
                            shutil.rmtree(run_dir, ignore_errors=True)
                            removed += 1
                    except FileNotFoundError:
                        pass  # another request swept it first
                if not any(session_dir.iterdir()):
                    shutil.rmtree(session_dir, ignore_errors=True)
            except FileNotFoundError:
                pass  # another request (or another app on the same folder) removed the session's folder first
        return removed

    def delete_session(self, session: str | None) -> None:
        shutil.rmtree(self.root / _safe(session or ""), ignore_errors=True)

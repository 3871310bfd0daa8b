"""Per-session output folders that delete themselves after a while.

Every run writes its downloads into `root/<session>/<run id>/`; folders older than `max_age_s` are
swept on the next run, and a session's folder goes when its browser tab closes.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
import uuid
from pathlib import Path

DEFAULT_MAX_AGE_S = int(os.environ.get("SAPIENS2_OUTPUT_MAX_AGE_S", "3600"))


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]", "", name)[:64] or "anonymous"


class OutputStore:
    def __init__(self, root: str | Path | None = None, max_age_s: int = DEFAULT_MAX_AGE_S):
        self.root = Path(root or Path(tempfile.gettempdir()) / "sapiens2_outputs").resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.max_age_s = max_age_s

    def new_run_dir(self, session: str | None) -> Path:
        self.sweep()
        path = self.root / _safe(session or "") / uuid.uuid4().hex[:12]
        for _ in range(5):
            try:
                path.mkdir(parents=True)
                return path
            except FileNotFoundError:  # a sweep (another request) removed the session folder as it was still empty
                continue
        path.mkdir(parents=True)
        return path

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

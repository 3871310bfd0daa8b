"""Progress while a run goes (a tqdm bar with items per second and time left, or plain log lines with
--quiet) and the closing summary. Every finished input passes through `Progress.done`, which also appends
its manifest line, so the manifest and the counts never disagree."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass

from .manifest import Manifest, Record


@dataclass
class Summary:
    ok: int
    failed: int
    skipped: int
    seconds: float

    @property
    def items_per_second(self) -> float:
        """Inputs processed (ok or failed; skipped ones cost nothing) per second of the run."""
        return (self.ok + self.failed) / self.seconds if self.seconds > 0 else 0.0

    @property
    def exit_code(self) -> int:
        return 1 if self.failed else 0

    def line(self) -> str:
        return (f"{self.ok} ok, {self.failed} failed, {self.skipped} skipped in {self.seconds:.1f} s "
                f"({self.items_per_second:.2f} items/s)")


class Progress:
    def __init__(self, manifest: Manifest, total: int, quiet: bool = False, stream=None):
        self.manifest = manifest
        self.total = total
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.counts: Counter = Counter()
        self.started = time.perf_counter()
        self._lock = threading.Lock()
        self._bar = None

    def start_bar(self, pending: int) -> None:
        """The bar counts the inputs to process (skipped ones are done before it starts)."""
        if not self.quiet and pending:
            from tqdm import tqdm

            self._bar = tqdm(total=pending, unit="item", file=self.stream, dynamic_ncols=True, smoothing=0.1)

    def done(self, record: Record) -> None:
        """Thread-safe: write the manifest line, count it, show it."""
        with self._lock:
            self.manifest.append(record)
            self.counts[record.status] += 1
            if record.status == "failed":
                self._say(f"failed: {record.input}: {record.error}")
            elif self.quiet and record.status == "ok":  # skipped ones are counted in the run's first line
                self._say(f"[{sum(self.counts.values())}/{self.total}] {record.status}: {record.input} "
                          f"({record.seconds:.2f} s)")
            if self._bar is not None and record.status != "skipped":
                self._bar.update(1)
                self._bar.set_postfix(ok=self.counts["ok"], failed=self.counts["failed"], refresh=False)

    def _say(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def close(self) -> Summary:
        if self._bar is not None:
            self._bar.close()
        summary = Summary(self.counts["ok"], self.counts["failed"], self.counts["skipped"],
                          time.perf_counter() - self.started)
        print(summary.line(), flush=True)  # the result, on stdout; progress and failures went to stderr
        return summary

"""What a recording holds: the events in order, and what is read from them (waits, bytes, overlap, the places)."""

from __future__ import annotations

import os
import sys
import threading
import weakref
from dataclasses import dataclass, field

FRAME_UPLOADS = ("upload", "preprocess")  # the copies that bring a batch's frames: the next forward is a new batch
_UPLOADED: dict = {}  # id -> weakref of the host tensors counted as uploaded (process-wide)
_LEDGER = os.path.dirname(os.path.abspath(__file__))  # this package: its own frames are not a place in our code
_HERE = os.path.dirname(_LEDGER)


@dataclass
class Event:
    kind: str  # h2d, d2h, wait, forward, join
    what: str  # the operation (cpu, item, upload, nonzero, the model's name...)
    nbytes: int = 0
    dtype: str = ""
    shape: tuple = ()
    wait: bool = False  # the host waits for the device here
    batch: int = -1  # forward: its batch; join: the batch waited for; copies: the newest batch they read
    thread: str = "queue"
    where: str = ""  # file:line function, in our code


@dataclass
class Ledger:
    """The events of one recording, in order (appended from any thread)."""

    simulate: bool = True  # on a non-CUDA device: take the CUDA road and count what would cross
    events: list[Event] = field(default_factory=list)
    batches: int = 0
    _queue_thread: int | None = None
    _fresh: bool = False  # frames were uploaded since the last batch's forward
    _frames: set = field(default_factory=set)  # the host addresses of this batch's frames
    _pending: set = field(default_factory=set)  # and of those uploaded since, for the next batch
    _lock: threading.Lock = field(default_factory=threading.Lock)
    launched: dict = field(default_factory=dict)  # (where, thread) -> operations queued on the device there

    def add(self, event: Event) -> Event:
        ident = threading.get_ident()
        with self._lock:
            if event.kind == "forward" and self._queue_thread is None:
                self._queue_thread = ident
            queue = self._queue_thread is None or ident == self._queue_thread
            event.thread = "queue" if queue else "worker"
            event.where = event.where or _caller()
            self.events.append(event)
        return event

    def launch(self) -> None:
        """An operation queued on the device outside the model forwards (each one at least a kernel launch on CUDA:
        host time a GPU waits for when the host falls behind)."""
        ident = threading.get_ident()
        where = _caller()
        with self._lock:
            queue = self._queue_thread is None or ident == self._queue_thread
            key = (where, "queue" if queue else "worker")
            self.launched[key] = self.launched.get(key, 0) + 1

    # -- reading -------------------------------------------------------------------------------------------
    @property
    def launches(self) -> int:
        return sum(self.launched.values())

    def launches_on(self, thread: str) -> int:
        """Those queued by one thread: "queue" (the one queuing forwards: each delays the next forward) or "worker"."""
        return sum(n for (_, on), n in self.launched.items() if on == thread)

    def launch_table(self, rows: int = 12) -> str:
        """The places in our code that queue the most operations on the device."""
        top = sorted(self.launched.items(), key=lambda item: -item[1])[:rows]
        return "\n".join(f"ops  x{n:<6} {thread:6} {where}" for (where, thread), n in top)

    def of(self, kind: str) -> list[Event]:
        return [e for e in self.events if e.kind == kind]

    @property
    def waits(self) -> int:
        return sum(e.wait for e in self.events)

    def bytes(self, kind: str) -> int:
        return sum(e.nbytes for e in self.of(kind))

    def uploads(self, min_elements: int = 1) -> int:
        """h2d copies of at least `min_elements` elements (a frame's pixels: the frame-sized uploads)."""
        return sum(1 for e in self.of("h2d") if _elements(e.shape) >= min_elements)

    def overlapped(self) -> tuple[int, int]:
        """(batches, overlapped batches): a batch overlaps when the next batch's forward is queued before the
        queuing thread waits for it (a copy back, a sync or a join there, with no later forward queued yet, leaves
        the device idle until the host queues again). The last batch has no next one: at most batches - 1."""
        latest, drained = -1, set()
        for e in self.events:
            if e.kind == "forward":
                latest = max(latest, e.batch)
            elif e.thread == "queue" and latest >= 0 and (e.wait or e.kind == "join"):
                if e.kind != "join" or e.batch >= latest:  # a sync on the stream waits for everything queued
                    drained.add(latest)
        batches = latest + 1
        return batches, sum(1 for b in range(batches - 1) if b not in drained)

    def summary(self) -> dict:
        batches, overlapped = self.overlapped()
        return {"forwards": len(self.of("forward")), "batches": batches, "overlapped_batches": overlapped,
                "waits": self.waits, "h2d": len(self.of("h2d")), "h2d_bytes": self.bytes("h2d"),
                "d2h": len(self.of("d2h")), "d2h_bytes": self.bytes("d2h"), "launches": self.launches}

    def table(self) -> str:
        """The waits and copies grouped by place in our code (most first): where to look."""
        counts: dict[tuple, list[int]] = {}
        for e in self.events:
            if e.kind in ("h2d", "d2h", "wait"):
                entry = counts.setdefault((e.kind, e.what, e.where, e.thread), [0, 0, 0])
                entry[0] += 1
                entry[1] += e.wait
                entry[2] += e.nbytes
        rows = sorted(counts.items(), key=lambda item: (-item[1][1], -item[1][2]))
        return "\n".join(f"{kind:4} {what:10} x{n:<5} waits {w:<5} {nbytes / 1e6:10.2f} MB  {thread:6} {where}"
                         for (kind, what, where, thread), (n, w, nbytes) in rows)

    # -- recording (the hooks below call these) -------------------------------------------------------------
    def forward(self, name: str, batch: bool = True) -> int:
        """A model forward queued: a new batch when frames were uploaded since the last one (the second model on
        the same frames, e.g. the body-part mask's, and the flip test's mirrored forward are not), unless `batch`
        is False (the person detector)."""
        with self._lock:
            if batch and (self._fresh or self.batches == 0):
                self.batches += 1
                self._frames, self._pending = self._pending, set()
            self._fresh = self._fresh and not batch
            index = self.batches - 1
        self.add(Event("forward", name, batch=index))
        return index

    def copy_in(self, tensor, what: str = "upload", blocking: bool = True, source=None) -> None:
        self._frame_upload(what, source)
        self.add(Event("h2d", what, _nbytes(tensor), _dtype(tensor), tuple(tensor.shape), wait=blocking,
                       batch=self.batches - 1))

    def _frame_upload(self, what: str, source) -> None:
        """Frames brought up: a new batch begins at the next forward, unless they are this batch's frames again
        (`source`: the host array's address; a second model on the same frames is the same batch)."""
        if what in FRAME_UPLOADS:
            with self._lock:
                self._fresh = self._fresh or source is None or source not in self._frames
                self._pending.add(source)

    def copy_in_once(self, tensor, what: str = "implicit") -> None:
        """A host tensor met on the device: an upload the first time this tensor object is seen by any recording of
        this process (a cached table crosses once on CUDA too)."""
        seen = _UPLOADED.get(id(tensor))
        if seen is not None and seen() is tensor:
            return
        _UPLOADED[id(tensor)] = weakref.ref(tensor)
        self.copy_in(tensor, what, blocking=not getattr(tensor, "_ledger_pinned", False))  # upload_once's: no wait


def _nbytes(tensor) -> int:
    return int(tensor.numel() * tensor.element_size()) if tensor is not None and hasattr(tensor, "numel") else 0


def _dtype(tensor) -> str:
    return str(getattr(tensor, "dtype", "")).replace("torch.", "")


def _elements(shape) -> int:
    count = 1
    for n in shape:
        count *= int(n)
    return count if shape else 0


def _caller() -> str:
    """The innermost frame in our package (not this module): file:line function."""
    frame = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if path.startswith(_HERE) and not path.startswith(_LEDGER):
            return f"{os.path.relpath(path, os.path.dirname(_HERE))}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


def answer_bytes(render_size: int, files) -> int:
    """What an answer holds, uncompressed, to hold the bytes copied back against: the render's `render_size` bytes
    plus every file's pixels (PNG) or array (.npy), other files as they are."""
    from pathlib import Path

    import cv2
    import numpy as np

    total = int(render_size)
    for path in map(Path, files):
        if path.suffix == ".png":
            total += cv2.imread(str(path), cv2.IMREAD_UNCHANGED).nbytes
        elif path.suffix == ".npy":
            total += np.load(path, mmap_mode="r").nbytes
        else:
            total += path.stat().st_size
    return total

"""The transfer ledger: every host<->device copy and every wait on the device, in order with the forwards.

On with `with ledger.recording() as book:` or for a whole process with SAPIENS2_LEDGER=1 (a summary is logged at
exit; SAPIENS2_LEDGER=PATH.json also writes every event there). Off, each hook costs one global read.

What it records (`Event.kind`):
- "h2d": a copy to the device (bytes, dtype, shape; `wait` when it is pageable, i.e. blocking: on CUDA a copy
  from pageable memory waits for everything queued on the stream first);
- "d2h": a copy back (`.cpu()`, `.numpy()`, `.item()`, `.tolist()`, `float()`..., `wait` unless non-blocking);
- "wait": a wait without a copy: a synchronize, an event wait, an operation whose output size depends on the data
  (boolean-mask indexing, `nonzero`: CUDA reads the count back);
- "forward": a model forward queued (`batch` counts batches of frames: a forward after frames not yet in this batch
  were uploaded starts one; a second model on the same frames, the flip test's mirrored forward and the person
  detector do not);
- "join": the queuing thread waiting for the post-processing worker of batch `batch` (overlap.py).
Each with the place in our code that caused it and the thread ("queue": the one that queues forwards, or
"worker").

On CUDA it counts what crosses. On any other device (the CPU) a recording ledger makes the pipelines take the CUDA
road (`device_road`: device post-processing and drawing, overlapped batches; streams, events and pinned memory
stay no-ops) and counts what would cross: tensors "on the device" are `DeviceTensor`s (uploads and model outputs,
and everything computed from them, and what our code makes with `device=`), and a host tensor that meets one in an
operation is an upload (once per tensor object and process, as a cached table crosses once). Inside a forward and
the processor nothing is looked at (on CUDA the model is one queued unit, compiled by default).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import os
import sys
import threading
import weakref
from dataclasses import asdict, dataclass, field

log = logging.getLogger(__name__)

ENV = "SAPIENS2_LEDGER"
FRAME_UPLOADS = ("upload", "preprocess")  # the copies that bring a batch's frames: the next forward is a new batch
_BOOK: Ledger | None = None  # the ledger being recorded into, None when off
_UPLOADED: dict = {}  # id -> weakref of the host tensors counted as uploaded (process-wide)
_HERE = os.path.dirname(os.path.abspath(__file__))
_SELF = os.path.abspath(__file__)
_MODELS = os.path.join(_HERE, "models")


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

    # -- reading -------------------------------------------------------------------------------------------
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
                "d2h": len(self.of("d2h")), "d2h_bytes": self.bytes("d2h")}

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


# -- the switch ---------------------------------------------------------------------------------------------

def active() -> Ledger | None:
    """The recording ledger, or None (the fast path: one global read)."""
    return _BOOK


@contextlib.contextmanager
def recording(simulate: bool = True):
    """Record into a fresh Ledger for the duration (one at a time, process-wide)."""
    global _BOOK
    if _BOOK is not None:
        raise RuntimeError("A ledger is recording already.")
    restore = _born_on_device()
    _BOOK = book = Ledger(simulate=simulate)
    try:
        yield book
    finally:
        _BOOK = None
        restore()


FACTORIES = ("arange", "zeros", "ones", "full", "empty", "linspace", "eye")  # allocate where `device=` says


def _born_on_device():
    """While recording, a tensor made in our code by a factory with `device=` is on the device (made there on CUDA, not
    copied); torch.tensor(data, device=...) is an upload (counted where it meets the device); a CUDA synchronize
    (device, stream, event) is a wait. Returns the undo."""
    import torch

    saved = {name: getattr(torch, name) for name in FACTORIES}

    def wrap(factory):
        def made(*args, **kwargs):
            out = factory(*args, **kwargs)
            # ours (not the model loading's warm-up inputs) or torchvision's functions, never a library's models
            caller = sys._getframe(1).f_code.co_filename
            ours = (caller.startswith(_HERE) and not caller.startswith(_MODELS)) or "torchvision/transforms" in caller
            made_here = ours and kwargs.get("device") is not None and out.device.type == "cpu"  # the simulated device
            return on_device(out, batch_mark()) if made_here else out
        return made

    for name, factory in saved.items():
        setattr(torch, name, wrap(factory))
    # the host waits on CUDA: a synchronize of the device, of a stream or of an event (no-ops that never run on a CPU)
    waits = {torch.cuda: "synchronize", torch.cuda.Stream: "stream.synchronize", torch.cuda.Event: "event.synchronize"}
    held = [(owner, what, owner.synchronize) for owner, what in waits.items()]

    def waiting(real, what):
        def waited(*args, **kwargs):
            wait(what)
            return real(*args, **kwargs)
        return waited

    for owner, what, real in held:
        owner.synchronize = waiting(real, what)

    def restore():
        for name, factory in saved.items():
            setattr(torch, name, factory)
        for owner, _, real in held:
            owner.synchronize = real

    return restore


def device_road(device) -> bool:
    """Whether the device's road is taken: CUDA, or any device while a simulating ledger records."""
    if str(device).split(":")[0] == "cuda":
        return True
    return _BOOK is not None and _BOOK.simulate


# -- tensors on the (simulated) device ------------------------------------------------------------------------

def _torch_subclass():
    import torch
    from torch.utils._pytree import tree_flatten

    copies_back = {"cpu", "numpy", "item", "tolist", "__float__", "__int__", "__bool__", "__index__", "__array__",
                   "__complex__"}
    data_sized = {"nonzero", "masked_select", "unique", "unique_consecutive", "argwhere", "bincount", "repeat_interleave"}

    class DeviceTensor(torch.Tensor):
        """A tensor on the simulated device: what a copy back of it, or a wait on it, costs is recorded."""

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            kwargs = kwargs or {}
            book = _BOOK
            name = getattr(func, "__name__", "")
            if book is None:
                return super().__torch_function__(func, types, args, kwargs)
            flat, _ = tree_flatten((args, kwargs))
            tensors = [t for t in flat if isinstance(t, torch.Tensor)]
            batch = max((getattr(t, "_ledger_batch", -1) for t in tensors if isinstance(t, DeviceTensor)), default=-1)
            this = args[0] if args else None
            if name in copies_back or (name == "to" and _to_host(args, kwargs)):
                nonblocking = bool(kwargs.get("non_blocking", False))
                book.add(Event("d2h", name, _nbytes(this), _dtype(this), tuple(this.shape),
                               wait=not nonblocking, batch=batch))
                with torch._C.DisableTorchFunctionSubclass():
                    out = func(*args, **kwargs)
                return out.as_subclass(torch.Tensor) if isinstance(out, torch.Tensor) else out
            if name in data_sized or (name == "__getitem__" and _bool_index(args)):
                book.add(Event("wait", name, batch=batch, wait=True))
            if name == "new_tensor":
                book.add(Event("h2d", name, 0, "", (), wait=True, batch=batch))
            for t in tensors:  # a host tensor met here would have been uploaded (CUDA refuses mixed devices)
                if not isinstance(t, DeviceTensor) and t.ndim > 0 and t.device.type == "cpu":
                    book.copy_in_once(t)
            out = super().__torch_function__(func, types, args, kwargs)
            _mark(out, batch)
            return out

    return DeviceTensor


def _mark(out, batch: int) -> None:
    from torch.utils._pytree import tree_flatten

    for t in tree_flatten(out)[0]:
        if isinstance(t, DEVICE_TENSOR()):
            t._ledger_batch = batch


_SUBCLASS = None


def DEVICE_TENSOR():  # noqa: N802 - a class, built on first use (torch imported lazily)
    global _SUBCLASS
    if _SUBCLASS is None:
        _SUBCLASS = _torch_subclass()
    return _SUBCLASS


def on_device(value, batch: int = -1):
    """Tensors (or a dict / list of them) marked as on the device; anything else as it is. With no ledger
    recording: unchanged."""
    book = _BOOK
    if book is None:
        return value
    import torch

    cls = DEVICE_TENSOR()
    if isinstance(value, dict):
        return {k: on_device(v, batch) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(on_device(v, batch) for v in value)
    if isinstance(value, torch.Tensor) and not isinstance(value, cls):
        value = value.as_subclass(cls)
        value._ledger_batch = batch
    return value


def off_device(value):
    """DeviceTensors back to plain tensors (what a model forward is given: nothing inside it is counted)."""
    import torch

    cls = _SUBCLASS
    if cls is None:
        return value
    if isinstance(value, dict):
        return {k: off_device(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(off_device(v) for v in value)
    return value.as_subclass(torch.Tensor) if isinstance(value, cls) else value


def to_device(array, device, non_blocking: bool = False):
    """A host array or tensor copied to `device`, counted (a steady filter's maps, a background...). non_blocking:
    on CUDA through pinned memory, so the copy waits for nothing queued before it."""
    import numpy as np
    import torch

    tensor = torch.as_tensor(np.ascontiguousarray(array)) if isinstance(array, np.ndarray) else array
    if non_blocking and str(device).split(":")[0] == "cuda" and not tensor.is_pinned():
        tensor = tensor.pin_memory()
    out = tensor.to(device, non_blocking=non_blocking)
    book = _BOOK
    if book is not None:
        book.copy_in(tensor, "to_device", blocking=not non_blocking)
        out = on_device(out, book.batches - 1)
    return out


def upload_once(array, device):
    """A small table a process uploads once and keeps (a cache's): on CUDA from pinned memory, so the copy waits for
    nothing queued before it (the caller's next copy back on that stream orders it before any other stream's use). A
    plain tensor either way (a cache holds nothing of the ledger's, so it stays free when off); a recording ledger
    counts it where it first meets the device, as an upload without a wait."""
    import numpy as np
    import torch

    tensor = torch.as_tensor(np.ascontiguousarray(array)) if isinstance(array, np.ndarray) else array
    cuda = str(device).split(":")[0] == "cuda"
    out = (tensor.pin_memory() if cuda else tensor).to(device, non_blocking=cuda)
    out._ledger_pinned = True
    return out


def record(kind: str, what: str, shape: tuple = (), dtype: str = "uint8", itemsize: int = 1,
           wait: bool = True, source=None) -> None:
    """A copy or wait the hooks cannot see (inside another library: the person detector's upload), by shape."""
    book = _BOOK
    if book is not None:
        if kind == "h2d":
            book._frame_upload(what, source)
        book.add(Event(kind, what, _elements(shape) * itemsize, dtype, tuple(shape), wait=wait,
                       batch=book.batches - 1))


def wait(what: str = "synchronize") -> None:
    """A wait the hooks cannot see (a synchronize, an event wait in another library)."""
    book = _BOOK
    if book is not None:
        book.add(Event("wait", what, wait=True, batch=book.batches - 1))


def join(batch: int) -> None:
    """The queuing thread waits for the worker finishing `batch` (overlap.py)."""
    book = _BOOK
    if book is not None:
        book.add(Event("join", "worker", batch=batch))


def forward(name: str, outputs, batch: bool = True):
    """A model forward was queued: record it and mark its outputs as on the device (their batch with them)."""
    book = _BOOK
    if book is None:
        return outputs
    index = book.forward(name, batch)
    return on_device(outputs, index)


def batch_mark() -> int:
    """The newest batch queued so far (-1 before any; also when off)."""
    book = _BOOK
    return -1 if book is None else book.batches - 1


# -- helpers ----------------------------------------------------------------------------------------------------

def address(array) -> int:
    """Where a host array's data is: a frame uploaded twice has one address."""
    return int(array.__array_interface__["data"][0]) if hasattr(array, "__array_interface__") else id(array)


def _to_host(args, kwargs) -> bool:
    """Whether a `.to(...)` call moves to the host: the literal "cpu" (on the simulated device `.to(x.device)`
    is a torch.device("cpu"), a no-op on CUDA, and is not counted)."""
    return any(isinstance(value, str) and value.split(":")[0] == "cpu" for value in [*args[1:], kwargs.get("device")])


def _bool_index(args) -> bool:
    import torch

    index = args[1] if len(args) > 1 else None
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


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
        if path.startswith(_HERE) and path != _SELF:
            return f"{os.path.relpath(path, os.path.dirname(_HERE))}:{frame.f_lineno} {frame.f_code.co_name}"
        frame = frame.f_back
    return "?"


def _from_environment() -> None:
    """SAPIENS2_LEDGER=1 (or a .json path): record the whole process; log the summary (and write it) at exit."""
    global _BOOK
    value = os.environ.get(ENV, "").strip()
    if value in ("", "0"):
        return
    _BOOK = book = Ledger()
    _born_on_device()

    def report():
        log.warning("transfer ledger: %s\n%s", book.summary(), book.table())
        if value.endswith(".json"):
            with open(value, "w", encoding="utf-8") as out:
                json.dump({"summary": book.summary(), "events": [asdict(e) for e in book.events]}, out)

    atexit.register(report)


_from_environment()

"""The transfer ledger: every host<->device copy and every wait on the device, in order with the forwards.

This module is the switch and the hooks the pipelines call; `book.py` holds a recording (its events and what is read
from them), `device.py` the simulated device (DeviceTensor).

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
Apart from the events, `Ledger.launched` counts by place the operations queued on the device outside the forwards
(anything on a device tensor but metadata and views: each at least one kernel launch on CUDA, host time).
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
from dataclasses import asdict

from . import device as _simulated
from .book import Event, Ledger, _elements, answer_bytes

log = logging.getLogger(__name__)

ENV = "SAPIENS2_LEDGER"
_BOOK: Ledger | None = None  # the ledger being recorded into, None when off

__all__ = ["Event", "Ledger", "answer_bytes", "active", "recording", "device_road", "on_device", "off_device", "to_device",
           "upload_once", "record", "wait", "join", "forward", "batch_mark", "address"]


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
    restore = _simulated.born_on_device()
    _BOOK = book = Ledger(simulate=simulate)
    try:
        yield book
    finally:
        _BOOK = None
        restore()


def device_road(device) -> bool:
    """Whether the device's road is taken: CUDA, or any device while a simulating ledger records."""
    if str(device).split(":")[0] == "cuda":
        return True
    return _BOOK is not None and _BOOK.simulate


def DEVICE_TENSOR():  # noqa: N802 - a class, built on first use (torch imported lazily)
    return _simulated.device_tensor()


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

    cls = _simulated.built()
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


def _from_environment() -> None:
    """SAPIENS2_LEDGER=1 (or a .json path): record the whole process; log the summary (and write it) at exit."""
    global _BOOK
    value = os.environ.get(ENV, "").strip()
    if value in ("", "0"):
        return
    _BOOK = book = Ledger()
    _simulated.born_on_device()

    def report():
        log.warning("transfer ledger: %s\n%s", book.summary(), book.table())
        if value.endswith(".json"):
            with open(value, "w", encoding="utf-8") as out:
                json.dump({"summary": book.summary(), "events": [asdict(e) for e in book.events]}, out)

    atexit.register(report)


_from_environment()

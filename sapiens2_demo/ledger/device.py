"""The simulated device: on a CPU, tensors "on the device" are `DeviceTensor`s, and what a copy back of one, or a
wait on it, would cost on CUDA is recorded; while recording, our code's factories with `device=` make them, and CUDA's
synchronize calls are waits."""

from __future__ import annotations

import os
import sys

from .. import ledger as switch  # the recording ledger (`switch._BOOK`), read at each call
from .book import Event, _dtype, _nbytes

_HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_MODELS = os.path.join(_HERE, "models")

FACTORIES = ("arange", "zeros", "ones", "full", "empty", "linspace", "eye")  # allocate where `device=` says


def born_on_device():
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
            return switch.on_device(out, switch.batch_mark()) if made_here else out
        return made

    for name, factory in saved.items():
        setattr(torch, name, wrap(factory))
    # the host waits on CUDA: a synchronize of the device, of a stream or of an event (no-ops that never run on a CPU)
    waits = {torch.cuda: "synchronize", torch.cuda.Stream: "stream.synchronize", torch.cuda.Event: "event.synchronize"}
    held = [(owner, what, owner.synchronize) for owner, what in waits.items()]

    def waiting(real, what):
        def waited(*args, **kwargs):
            switch.wait(what)
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
            book = switch._BOOK
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
            if _launches(name, args):
                book.launch()
            for t in tensors:  # a host tensor met here would have been uploaded (CUDA refuses mixed devices)
                if not isinstance(t, DeviceTensor) and t.ndim > 0 and t.device.type == "cpu":
                    book.copy_in_once(t)
            out = super().__torch_function__(func, types, args, kwargs)
            _mark(out, batch)
            return out

    return DeviceTensor


# what launches no kernel on CUDA: reading a tensor's metadata, or a view of its memory
METADATA = {"__get__", "__set__", "size", "dim", "numel", "nelement", "stride", "storage_offset", "is_contiguous",
            "element_size", "data_ptr", "__len__", "__repr__", "__format__", "__hash__", "is_floating_point",
            "is_complex", "get_device", "is_pinned", "untyped_storage", "__reduce_ex__", "__getstate__", "__setstate__",
            "__deepcopy__", "as_subclass", "__iter__", "dim_order", "has_names", "__dlpack_device__"}
VIEWS = {"view", "view_as", "permute", "transpose", "t", "unsqueeze", "squeeze", "expand", "expand_as", "unbind",
         "split", "chunk", "narrow", "select", "as_strided", "movedim", "unflatten", "detach", "diagonal", "unfold"}
COPIES_UNLESS_CONTIGUOUS = {"reshape", "flatten", "contiguous"}  # views of a contiguous tensor, copies otherwise


def _launches(name: str, args) -> bool:
    """Whether an operation on a device tensor launches work on the device: anything but metadata and views
    (indexing with a tensor gathers; plain slices are views)."""
    if name in METADATA or name in VIEWS:
        return False
    if name in COPIES_UNLESS_CONTIGUOUS:
        return not args[0].is_contiguous()
    if name == "__getitem__":
        import torch

        index = args[1] if len(args) > 1 else None
        return any(isinstance(i, torch.Tensor) for i in (index if isinstance(index, tuple) else (index,)))
    return True


def _mark(out, batch: int) -> None:
    from torch.utils._pytree import tree_flatten

    for t in tree_flatten(out)[0]:
        if isinstance(t, device_tensor()):
            t._ledger_batch = batch


_SUBCLASS = None  # DeviceTensor once built


def device_tensor():
    """The DeviceTensor class, built on first use (torch imported lazily)."""
    global _SUBCLASS
    if _SUBCLASS is None:
        _SUBCLASS = _torch_subclass()
    return _SUBCLASS


def _to_host(args, kwargs) -> bool:
    """Whether a `.to(...)` call moves to the host: the literal "cpu" (on the simulated device `.to(x.device)`
    is a torch.device("cpu"), a no-op on CUDA, and is not counted)."""
    return any(isinstance(value, str) and value.split(":")[0] == "cpu" for value in [*args[1:], kwargs.get("device")])


def _bool_index(args) -> bool:
    import torch

    index = args[1] if len(args) > 1 else None
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


def built():
    """DeviceTensor if it was built (some tensor was marked), else None."""
    return _SUBCLASS

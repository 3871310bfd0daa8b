"""What keeps loading safe when visitors arrive together: one load at a time in the process, transformers' classes
looked up under that lock, and a model's parameters checked against its road before anyone gets it.

Why a process-wide lock: torch's default dtype is one per process, and transformers sets it for the length of a
model's construction (`from_pretrained(dtype=...)`: save the old value, set ours, restore the old). Two loads side
by side restore each other's values: models come out part bfloat16, part float32, and the process can be left on
a bfloat16 default (the detector's ONNX export then fails too). ultralytics sets torch's thread count when it
loads and exports. And transformers' top-level names (`transformers.AutoModelForPoseEstimation`) are imported
lazily on first access, which is not safe from two threads at once. Loads are seconds each (a compile's warm-up
is separate, compile.py), so serialising them costs the first visitors of different models little.
"""

from __future__ import annotations

import os
import threading

LOADING = threading.RLock()  # every load: Sapiens2's from_pretrained, the detector and its ONNX export


def _fresh_lock() -> None:  # ZeroGPU forks workers: a lock held by another thread at that moment stays held there
    global LOADING
    LOADING = threading.RLock()


os.register_at_fork(after_in_child=_fresh_lock)


class ModelBroken(RuntimeError):
    """A loaded model is not on its road any more (parameters in another dtype or on another device): it has been
    dropped and the next request loads it again. The message is for the visitor."""


def transformers_class(name: str):
    """transformers' `name` (AutoModelForSemanticSegmentation, Sapiens2ImageProcessor), resolved under the lock."""
    with LOADING:
        import transformers

        return getattr(transformers, name)


def off_road(model, device: str, dtype) -> list[str]:
    """The floating parameters not in `dtype` on `device` (name: dtype@device), a few at most; [] when all are.
    Buffers are not checked: some are float32 on purpose (rope's inverse frequencies)."""
    import torch

    wanted = torch.device(device)
    found = []
    for name, param in model.named_parameters():
        if param.is_floating_point() and (param.dtype != dtype or param.device.type != wanted.type
                                          or (wanted.index is not None and param.device.index != wanted.index)):
            found.append(f"{name}: {str(param.dtype).replace('torch.', '')}@{param.device}")
            if len(found) == 3:
                break
    return found


def check_road(model, device: str, dtype, name: str) -> None:
    """Raise ModelBroken when a parameter of `model` is off its road."""
    stray = off_road(model, device, dtype)
    if stray:
        raise ModelBroken(f"{name} has parameters off its road ({str(dtype).replace('torch.', '')} on {device}: "
                          f"{', '.join(stray)}); it is loaded afresh for the next request, try again")

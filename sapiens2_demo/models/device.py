"""Which device and dtype to run on: CUDA, Apple silicon (MPS) or the CPU.

torch is imported inside the functions, never at module import, so `enable_mps_fallback` can run first.
"""

from __future__ import annotations

import os
import re

MPS_FALLBACK_VAR = "PYTORCH_ENABLE_MPS_FALLBACK"
_EXPLICIT_DEVICE = re.compile(r"cpu|mps|cuda(:\d+)?")


def enable_mps_fallback() -> None:
    """Let operators MPS lacks run on the CPU instead of raising NotImplementedError.

    torch reads the variable once, when it is imported: call this before anything imports torch (the entry
    points do it first thing in main()). A value the user set, "0" included, is left alone.
    """
    os.environ.setdefault(MPS_FALLBACK_VAR, "1")


def pick_device(requested: str | None) -> str:
    """'auto' (or None/empty) -> cuda, else mps, else cpu; cpu, cuda, cuda:N and mps pass through as given."""
    device = (requested or "auto").strip().lower()
    if device == "auto":
        import torch

        if torch.cuda.is_available():
            return "cuda"
        if torch.backends.mps.is_available():
            return "mps"
        return "cpu"
    if not _EXPLICIT_DEVICE.fullmatch(device):
        raise ValueError(f"Unknown device {requested!r}; choose auto, cpu, cuda, cuda:N or mps.")
    return device


def default_dtype(device: str) -> str:
    """bf16 on CUDA (Sapiens2 was trained in it); float32 elsewhere: CPUs without bf16 units run it 3-4x
    slower, and on MPS float32 is the safe default (float16 can still be chosen with --dtype)."""
    return "bfloat16" if device.startswith("cuda") else "float32"

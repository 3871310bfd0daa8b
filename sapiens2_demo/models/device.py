"""Which device and dtype to run on: CUDA, Apple silicon (MPS) or the CPU, and on a CPU whether it runs bfloat16
natively (AMX or AVX512-BF16: bf16 plus regional compile is 2.4-4x faster than float32 there, CPU.md) or would
emulate it (slower than float32: such CPUs stay in float32).

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


def cpu_capabilities() -> dict:
    """What torch reports about this CPU (`torch.cpu.get_capabilities()`: cpu_name, amx_bf16, avx512_bf16, ...);
    {} where torch is too old to say (then no bf16 is assumed)."""
    import torch

    try:
        return dict(torch.cpu.get_capabilities())
    except (AttributeError, RuntimeError):
        return {}


def native_bf16(capabilities: dict | None = None) -> str:
    """'AMX' or 'AVX512-BF16' when the CPU has bf16 matrix instructions, '' when bf16 would be emulated."""
    caps = cpu_capabilities() if capabilities is None else capabilities
    if caps.get("amx_bf16") and caps.get("amx_tile"):
        return "AMX"
    return "AVX512-BF16" if caps.get("avx512_bf16") else ""


def cpu_name(capabilities: dict | None = None) -> str:
    caps = cpu_capabilities() if capabilities is None else capabilities
    import platform

    return str(caps.get("cpu_name") or platform.processor() or platform.machine() or "unknown CPU").strip()


def default_dtype(device: str, capabilities: dict | None = None) -> str:
    """bf16 on CUDA (Sapiens2 was trained in it) and on CPUs with native bf16 (AMX, AVX512-BF16); float32 on
    other CPUs (emulated bf16 runs 3-4x slower) and on MPS (float16 can still be chosen with --dtype)."""
    if device.startswith("cuda"):
        return "bfloat16"
    if device == "cpu" and native_bf16(capabilities):
        return "bfloat16"
    return "float32"


def describe_road(device: str, dtype, compiled: bool, capabilities: dict | None = None) -> str:
    """One line naming how models run: 'CPU (AMD EPYC, AVX512-BF16), bfloat16, compiled'."""
    dtype = str(dtype).replace("torch.", "")
    if device == "cpu":
        caps = cpu_capabilities() if capabilities is None else capabilities
        where = f"CPU ({cpu_name(caps)}, {native_bf16(caps) or 'no native bf16'})"
    elif device.startswith("cuda"):
        where = f"GPU ({device})"  # no device query: on ZeroGPU the main process must not initialise CUDA
    else:
        where = "Apple silicon (MPS)" if device == "mps" else device
    return f"{where}, {dtype}, {'compiled' if compiled else 'eager'}"


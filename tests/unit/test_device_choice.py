"""Device and dtype choice: CUDA, then Apple silicon (MPS), then the CPU; the MPS fallback variable."""

import os
from contextlib import ExitStack
from unittest.mock import patch

import pytest
import torch

from sapiens2_demo.models.device import MPS_FALLBACK_VAR, default_dtype, enable_mps_fallback, pick_device
from sapiens2_demo.models.manager import resolve_device


def available(cuda: bool, mps: bool):
    """Patch both probes; returns a context manager."""
    stack = ExitStack()
    stack.enter_context(patch("torch.cuda.is_available", return_value=cuda))
    stack.enter_context(patch("torch.backends.mps.is_available", return_value=mps))
    return stack


@pytest.mark.parametrize("cuda, mps, expected", [(True, True, "cuda"), (False, True, "mps"), (False, False, "cpu")])
@pytest.mark.parametrize("requested", ["auto", None, "AUTO"])
def test_auto_prefers_cuda_then_mps_then_cpu(cuda, mps, expected, requested):
    with available(cuda, mps):
        assert pick_device(requested) == expected


@pytest.mark.parametrize("device", ["cpu", "cuda", "cuda:1", "mps"])
def test_explicit_devices_pass_through(device):
    with available(False, False):  # no probing: an explicit choice is the user's
        assert pick_device(device) == device


@pytest.mark.parametrize("device", ["gpu", "cuda:", "cuda:x", "metal", "mps:0"])
def test_unknown_devices_are_refused(device):
    with pytest.raises(ValueError, match="Unknown device"):
        pick_device(device)


@pytest.mark.parametrize("device, dtype", [("cuda", "bfloat16"), ("cuda:1", "bfloat16"), ("mps", "float32"),
                                           ("cpu", "float32")])
def test_default_dtypes(device, dtype):
    """(A CPU without native bf16; the CPU's choice both ways is in test_cpu_road.py.)"""
    assert default_dtype(device, capabilities={"avx512_bf16": False, "amx_bf16": False}) == dtype


def test_fallback_is_enabled_when_unset(monkeypatch):
    monkeypatch.delenv(MPS_FALLBACK_VAR, raising=False)
    enable_mps_fallback()
    assert os.environ[MPS_FALLBACK_VAR] == "1"


def test_fallback_keeps_the_users_choice(monkeypatch):
    monkeypatch.setenv(MPS_FALLBACK_VAR, "0")
    enable_mps_fallback()
    assert os.environ[MPS_FALLBACK_VAR] == "0"


def test_resolve_device_auto_picks_mps_in_float32(monkeypatch):
    monkeypatch.delenv("SAPIENS2_DEVICE", raising=False)
    monkeypatch.delenv("SAPIENS2_DTYPE", raising=False)
    with available(False, True):
        assert resolve_device("auto") == ("mps", torch.float32)
        assert resolve_device("auto", "float16") == ("mps", torch.float16)  # half precision stays selectable
    with available(True, True):
        assert resolve_device("auto") == ("cuda", torch.bfloat16)

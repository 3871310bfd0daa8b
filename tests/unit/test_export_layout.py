"""`cli export`'s check of a non-contiguous input (models/export.check_non_contiguous), with the file replaced by
stand-ins for what a file can do with it: answer right, refuse it, or read its memory as if contiguous (what an
AOTInductor package does unless AOTI_RUNTIME_CHECK_INPUTS=1): only the last is an error."""

from pathlib import Path

import pytest
import torch

from sapiens2_demo.models import export


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, pixel_values):
        return (self.conv(pixel_values),)


def result(fmt: str) -> export.ExportResult:
    return export.ExportResult(Path(f"model.{fmt}"), fmt, (8, 6), ["logits"], 0.0)


def as_if_contiguous(x):
    """x's memory read in the layout the file was compiled for (B, 3, H, W contiguous): a different picture."""
    return x.permute(0, 2, 3, 1).contiguous().reshape(x.shape)


@pytest.mark.parametrize("fmt", ["onnx", "aoti"])
def test_a_file_that_answers_right_passes(fmt, monkeypatch):
    model = Model().eval()
    monkeypatch.setattr(export, "run_file", lambda path, f, x: [model(x.contiguous())[0].detach().numpy()])
    assert export.check_non_contiguous(result(fmt), model, "cpu", torch.float32).startswith("matches")


def test_a_package_that_refuses_the_layout_passes(monkeypatch):
    def refuse(path, fmt, x):
        raise RuntimeError("input_handles[0]: unmatched stride value at 1, expected: 48, but got: 1")

    monkeypatch.setattr(export, "run_file", refuse)
    said = export.check_non_contiguous(result("aoti"), Model().eval(), "cpu", torch.float32)
    assert said.startswith("refused: ") and "unmatched stride" in said


@pytest.mark.parametrize("fmt", ["onnx", "aoti"])
def test_a_file_that_reads_the_memory_as_contiguous_fails(fmt, monkeypatch):
    model = Model().eval()
    monkeypatch.setattr(export, "run_file", lambda path, f, x: [model(as_if_contiguous(x))[0].detach().numpy()])
    with pytest.raises(export.ExportError, match="different answer for a non-contiguous input"):
        export.check_non_contiguous(result(fmt), model, "cpu", torch.float32)

"""Model files for deployers: a Sapiens2 checkpoint as ONNX or as an AOTInductor package (.pt2), with a dynamic
batch dimension, runnable without this project's code.

    python -m sapiens2_demo.cli export --task seg --size 0.4b --format onnx --output seg.onnx
    python -m sapiens2_demo.cli export --task pose --size 0.4b --format aoti --output pose.pt2 --device cuda

Both take `pixel_values` (B, 3, H, W) as the checkpoint's processor makes them (resize to its size, /255,
ImageNet mean/std) in the exported dtype, and return the model's tensor outputs by name (seg: `logits`, pose:
`heatmaps`, ...), in the order `output_names` gives. The graph is torch.export's; ONNX goes through
torch.onnx's dynamo exporter, the package through `torch._inductor.aoti_compile_and_package`.

Strides: onnxruntime copies any numpy array it is fed, but an AOTInductor package reads its input's memory as
the contiguous layout it was compiled for and does not look at the strides by default: a transposed array
(`rgb.transpose(2, 0, 1)`, which `astype` keeps) gives wrong numbers silently. With AOTI_RUNTIME_CHECK_INPUTS=1
in the caller's environment the package checks every input and refuses another layout ("unmatched stride
value"); the packages are compiled so that this check also takes batch 1 (`check_lowerbound` off). The check
here feeds a non-contiguous input too: ONNX must match eager, the package must refuse it.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

FORMATS = ("onnx", "aoti")
MAX_BATCH = 1024
CHECK_BATCHES = (1, 3)
CHECK_INPUTS_ENV = "AOTI_RUNTIME_CHECK_INPUTS"  # read by the package at its first call: set before it


class ExportError(RuntimeError):
    """The model could not be exported or the file does not reproduce it; the message says which."""


@dataclass
class ExportResult:
    path: Path
    format: str
    input_size: tuple[int, int]  # (height, width) the processor resizes to
    output_names: list[str]
    seconds: float
    checks: dict[int, float] = field(default_factory=dict)  # batch -> largest relative difference to eager
    non_contiguous: str = ""  # what the file did with a non-contiguous input: "matches: ..." or "refused: ..."


def _outputs_module(model, names: list[str]):
    """The model as a module of `pixel_values` returning its tensor outputs as a tuple, in `names` order."""
    import torch

    class Outputs(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, pixel_values):
            outputs = self.model(pixel_values=pixel_values)
            return tuple(outputs[name] for name in names)

    return Outputs().eval()


def output_names(model, example) -> list[str]:
    """The tensor outputs the model gives (e.g. ['logits']), from one run on `example`."""
    import torch

    with torch.inference_mode():
        outputs = model(pixel_values=example)
    return [name for name, value in outputs.items() if torch.is_tensor(value)]


def _export_program(module, example):
    import torch

    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    return torch.export.export(module, (example,), dynamic_shapes={"pixel_values": {0: batch}}, strict=False)


def write_onnx(module, example, names: list[str], path: Path) -> None:
    import torch

    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    program = torch.onnx.export(module, (example,), dynamo=True, input_names=["pixel_values"],
                                output_names=names, dynamic_shapes={"pixel_values": {0: batch}},
                                optimize=True, verbose=False)
    program.save(str(path))


def write_aoti(module, example, path: Path) -> None:
    import torch

    program = _export_program(module, example)
    # the input check (AOTI_RUNTIME_CHECK_INPUTS=1) would otherwise refuse batch 1: export's example of 2 sets
    # the batch dimension's lower bound at 2 (0/1 specialisation), though the graph takes 1
    torch._inductor.aoti_compile_and_package(program, package_path=str(path),
                                             inductor_configs={"aot_inductor.check_lowerbound": False})


def run_file(path: Path, fmt: str, pixel_values) -> list:
    """Run an exported file the way a deployer would (onnxruntime; aoti_load_package); outputs as numpy."""
    import numpy as np
    import torch

    if fmt == "onnx":
        import onnxruntime

        session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        wanted = session.get_inputs()[0]
        numpy_type = np.float16 if wanted.type == "tensor(float16)" else np.float32
        feed = {wanted.name: pixel_values.float().cpu().numpy().astype(numpy_type)}
        return [np.asarray(out) for out in session.run(None, feed)]
    package = torch._inductor.aoti_load_package(str(path))
    with torch.inference_mode():
        outputs = package(pixel_values)
    outputs = outputs if isinstance(outputs, (list, tuple)) else [outputs]
    return [out.float().cpu().numpy() for out in outputs]


def relative_difference(ours, reference) -> float:
    """Largest |a - b| over the largest |b|, across every output (1e-3: 0.1 % of the output's range)."""
    import numpy as np

    worst = 0.0
    for a, b in zip(ours, reference):
        b = np.asarray(b, dtype=np.float64)
        worst = max(worst, float(np.abs(np.asarray(a, np.float64) - b).max() / max(np.abs(b).max(), 1e-12)))
    return worst


def check_file(result: ExportResult, module, device, dtype, batches=CHECK_BATCHES) -> dict[int, float]:
    """Run the file at each batch size on random inputs and compare with the eager model."""
    import torch

    generator = torch.Generator().manual_seed(0)
    checks = {}
    for batch in batches:
        x = torch.randn(batch, 3, *result.input_size, generator=generator).to(device=device, dtype=dtype)
        with torch.inference_mode():
            reference = [out.float().cpu().numpy() for out in module(x)]
        ours = run_file(result.path, result.format, x)
        if [o.shape for o in ours] != [r.shape for r in reference]:
            raise ExportError(f"{result.path} gives shapes {[o.shape for o in ours]} at batch {batch}, "
                              f"PyTorch {[r.shape for r in reference]}")
        checks[batch] = relative_difference(ours, reference)
    return checks


def check_non_contiguous(result: ExportResult, module, device, dtype, tolerance: float = 1e-3) -> str:
    """Feed the file a non-contiguous input (channels last in memory, as `rgb.transpose(2, 0, 1)` makes it): it
    must give eager's answer or refuse the input, never another answer. Returns what it did."""
    import torch

    generator = torch.Generator().manual_seed(1)
    x = torch.randn(2, *result.input_size, 3, generator=generator).to(device=device, dtype=dtype).permute(0, 3, 1, 2)
    with torch.inference_mode():
        reference = [out.float().cpu().numpy() for out in module(x.contiguous())]
    try:
        ours = run_file(result.path, result.format, x)
    except RuntimeError as error:
        if result.format == "aoti" and "stride" in str(error):
            return f"refused: {str(error).strip().splitlines()[0]}"
        raise ExportError(f"{result.path} failed on a non-contiguous input: {error}") from error
    difference = relative_difference(ours, reference)
    if difference > tolerance:
        raise ExportError(f"{result.path} gives a different answer for a non-contiguous input (largest difference "
                          f"{difference:.1e} of the output's range) instead of refusing it"
                          + (f"; is {CHECK_INPUTS_ENV}=0 set?" if result.format == "aoti" else ""))
    return f"matches: largest difference {difference:.1e} of the output's range"


def _require_onnx(check: bool) -> None:
    """ONNX files need packages the app itself does not (they are in requirements-dev.txt): say how to get them."""
    import importlib.util

    missing = [name for name in ("onnx", "onnxscript") + (("onnxruntime",) if check else ())
               if importlib.util.find_spec(name) is None]
    if missing:
        raise ExportError(f"--format onnx needs {', '.join(missing)}: pip install {' '.join(missing)} "
                          "(or pip install -r requirements-dev.txt)")


def export(loaded, fmt: str, output: str | Path, check: bool = True) -> ExportResult:
    """Write `loaded` (a manager's LoadedModel) as `fmt` to `output`; `check` runs it at batch 1 and 3."""
    import torch

    if fmt not in FORMATS:
        raise ExportError(f"Unknown format {fmt!r}; choose onnx or aoti.")
    if fmt == "onnx":
        _require_onnx(check)
    path = Path(output).expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    height, width = int(loaded.processor.size["height"]), int(loaded.processor.size["width"])
    # batch 2, not 1: an example of size 1 would fix the batch dimension at 1 (0/1 specialisation)
    example = torch.zeros(2, 3, height, width, device=loaded.device, dtype=loaded.dtype)
    names = output_names(loaded.model, example)
    module = _outputs_module(loaded.model, names)
    started = time.perf_counter()
    try:
        if fmt == "onnx":
            write_onnx(module, example, names, path)
        else:
            write_aoti(module, example, path)
    except Exception as error:  # noqa: BLE001 - torch's exporters raise many kinds; say which step failed
        raise ExportError(f"exporting to {fmt} failed: {type(error).__name__}: "
                          f"{str(error).strip().splitlines()[0][:300] if str(error).strip() else ''}") from error
    result = ExportResult(path, fmt, (height, width), names, time.perf_counter() - started)
    if check and fmt == "onnx" and loaded.dtype == torch.bfloat16:
        log.warning("not checked: onnxruntime's CPU provider cannot feed bfloat16 (numpy has no such type)")
    elif check:
        before = os.environ.get(CHECK_INPUTS_ENV)
        if fmt == "aoti" and before is None:
            os.environ[CHECK_INPUTS_ENV] = "1"  # as docs/compile.md's caller does: refuse other layouts
        try:
            result.checks = check_file(result, module, loaded.device, loaded.dtype)
            result.non_contiguous = check_non_contiguous(result, module, loaded.device, loaded.dtype)
        finally:
            if before is None:
                os.environ.pop(CHECK_INPUTS_ENV, None)
    return result

"""Ahead-of-time compilation of the repeated blocks for ZeroGPU, with the `spaces` AoT API (COMPILE.md section 5).

ZeroGPU runs every call in a fresh worker process, so a just-in-time compile would be paid again and again;
instead, once at start-up inside one GPU call (`gpu.compile_ahead`):
1. `spaces.aoti_capture` takes the first block's real inputs during a forward;
2. the block is exported as a function of its inputs *and its weights* (`BlockFunction`), batch dimension
   dynamic, and `spaces.aoti_compile_and_save` writes one AOTInductor package of it to a folder of the compile
   cache (`package_dir`: the Space's persistent storage when it has one): one package per model, whatever its
   number of blocks, because the weights are arguments, not constants baked into the package;
3. back in the main process `spaces.aoti_load_from_package_dir` installs the package on a weightless holder
   module, and each block's forward calls the holder with its own weights (`AheadOfTimeBlock`). The blocks keep
   their weights, so a package that fails to load or run falls back to the eager block (logged once), never a
   failed call.

A restart finds the saved package and loads it instead of compiling again. Its name hashes everything the
compiled code depends on that the main process knows (the model's config, dtype, input size, torch and spaces
versions); the GPU it was compiled for is not
known there (ZeroGPU's main process has none), so a package that fails in a worker is deleted: the next start
compiles it again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
from pathlib import Path

from .compile import CompileState, blocks, cache_dir

log = logging.getLogger(__name__)

MAX_BATCH = 1024
FORMAT = 1  # bump when the exported function changes: older saved packages are then not found
PACKAGE = Path("root") / "package.pt2"  # where spaces.aoti_compile_and_save puts a module's package


def package_dir(model, input_size: tuple[int, int], dtype, versions: dict | None = None) -> Path:
    """The folder of this model's saved package: a name per config, dtype, input size and torch/spaces versions."""
    import torch

    if versions is None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            spaces_version = version("spaces")
        except PackageNotFoundError:  # the tests' stand-in
            spaces_version = "stand-in"
        versions = {"torch": torch.__version__, "spaces": spaces_version}
    facts = {"config": model.config.to_dict(), "dtype": str(dtype), "input": list(input_size), "format": FORMAT,
             "max_batch": MAX_BATCH, **versions}
    digest = hashlib.sha256(json.dumps(facts, sort_keys=True, default=str).encode()).hexdigest()[:16]
    name = Path(str(getattr(model.config, "_name_or_path", "") or type(model).__name__)).name
    return cache_dir() / "aot" / f"{name}-{digest}"


def saved(folder: Path) -> bool:
    return (Path(folder) / PACKAGE).is_file()


def _weights(block, detach: bool = True) -> tuple[list[str], list]:
    """The block's parameter and buffer names and tensors. Not detached: the Parameter objects themselves, whose
    data ZeroGPU may swap when it moves the model onto the worker's GPU."""
    named = list(block.named_parameters()) + list(block.named_buffers())
    return [name for name, _ in named], [tensor.detach() if detach else tensor for _, tensor in named]


def _block_function(template, names: list[str]):
    import torch

    class BlockFunction(torch.nn.Module):
        """A block as a function of (hidden_states, cos, sin, weights): no weights of its own to export."""

        def __init__(self):
            super().__init__()
            self._template = [template]  # a list, so the block's weights are not this module's
            self.names = names

        def forward(self, hidden_states, cos, sin, weights):
            params = dict(zip(self.names, weights))
            return torch.func.functional_call(self._template[0], params, (hidden_states,),
                                              {"position_embeddings": (cos, sin)})

    return BlockFunction().eval()


def capture(spaces, model, input_size: tuple[int, int], device, dtype):
    """The first block's (hidden_states, (cos, sin)) in a forward at batch 2 (1 would fix the batch size)."""
    import torch

    first = blocks(model)[0]
    dummy = torch.zeros(2, 3, *input_size, device=device, dtype=dtype)
    with spaces.aoti_capture(first) as call, torch.no_grad():  # export refuses inference-mode tensors
        model(pixel_values=dummy)
    extra = {key for key, value in call.kwargs.items() if key != "position_embeddings" and value is not None}
    if len(call.args) != 1 or extra or call.kwargs.get("position_embeddings") is None:
        raise RuntimeError(f"unexpected block call: {len(call.args)} positional, keywords {sorted(call.kwargs)}")
    cos, sin = call.kwargs["position_embeddings"]
    return call.args[0], cos, sin


def compile_package(spaces, model, input_size: tuple[int, int], device, dtype, folder: Path) -> None:
    """Capture, export and `spaces.aoti_compile_and_save` one block of `model` into `folder` (run inside a GPU
    call; the package is written beside a note of the GPU it was compiled on)."""
    import torch

    hidden, cos, sin = capture(spaces, model, input_size, device, dtype)
    first = blocks(model)[0]
    names, weights = _weights(first)
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    program = torch.export.export(_block_function(first, names), (hidden, cos, sin, weights), strict=False,
                                  dynamic_shapes=({0: batch}, None, None, [None] * len(weights)))
    folder = Path(folder)
    spaces.aoti_compile_and_save(folder, program)
    gpu_name = torch.cuda.get_device_name(device) if torch.device(device).type == "cuda" else str(device)
    (folder / "compiled_on.json").write_text(json.dumps({"device": gpu_name, "torch": torch.__version__}))


class AheadOfTimeBlock:
    """A block's forward through the model's shared package, with this block's weights; eager on failure."""

    def __init__(self, block, holder, failed: threading.Event, folder: Path | None = None):
        self.block, self.holder, self.folder = block, holder, folder
        self.names, self.weights = _weights(block, detach=False)
        self.eager = type(block).forward.__get__(block)
        self._failed = failed  # shared by the model's blocks; per process: a worker whose package broke stays eager

    def __call__(self, hidden_states, attention_mask=None, position_embeddings=None, **kwargs):
        if not self._failed.is_set() and attention_mask is None and position_embeddings is not None:
            try:
                out = self.holder(hidden_states, *position_embeddings, self.weights)
                return out[0] if isinstance(out, (list, tuple)) else out
            except Exception as error:  # noqa: BLE001 - any failure of the package: this block runs eager
                self._failed.set()
                log.warning("ahead-of-time block failed (%s: %s); running it eager", type(error).__name__,
                            str(error).strip().splitlines()[0][:200] if str(error).strip() else "")
                self._forget_package()
        return self.eager(hidden_states, attention_mask=attention_mask, position_embeddings=position_embeddings,
                          **kwargs)


    def _forget_package(self) -> None:
        """A saved package that fails (compiled for another GPU, damaged) is deleted: the next start compiles."""
        if self.folder is None:
            return
        try:
            (self.folder / PACKAGE).unlink(missing_ok=True)
            log.warning("deleted the saved package %s; the next start compiles it again", self.folder)
        except OSError as error:
            log.warning("could not delete the saved package %s (%s)", self.folder, error)


def apply(spaces, model, folder: Path, loaded_from_disk: bool = False) -> CompileState:
    """Install the package saved in `folder` (by `compile_package`, now or at an earlier start) on every block of
    `model` with `spaces.aoti_load_from_package_dir`; returns the model's state."""
    note = "compiled ahead of time (ZeroGPU" + (", loaded from an earlier start)" if loaded_from_disk else ")")
    state = CompileState(status="compiled", note=note, phase="at run time")
    first = blocks(model)[0]
    holder = _block_function(first, _weights(first)[0])  # weightless: the blocks pass their own weights
    spaces.aoti_load_from_package_dir(holder, folder)
    failed = threading.Event()
    for block in blocks(model):
        block.forward = AheadOfTimeBlock(block, holder, failed, Path(folder))
    return state


def remove(model) -> None:
    """Back to the eager blocks."""
    for block in blocks(model):
        block.__dict__.pop("forward", None)

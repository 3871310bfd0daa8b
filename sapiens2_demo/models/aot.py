"""Ahead-of-time compilation of the repeated blocks for ZeroGPU, with the `spaces` AoT API (COMPILE.md section 5).

ZeroGPU runs every call in a fresh worker process, so a just-in-time compile would be paid again and again;
instead, once at start-up inside one GPU call (`gpu.compile_ahead`):
1. `spaces.aoti_capture` takes the first block's real inputs during a forward;
2. the block is exported as a function of its inputs *and its weights* (`BlockFunction`), batch dimension
   dynamic, and `spaces.aoti_compile` makes one AOTInductor package of it: one package per model, whatever
   its number of blocks, because the weights are arguments, not constants baked into the package;
3. back in the main process `spaces.aoti_apply` installs the package on a weightless holder module, and each
   block's forward calls the holder with its own weights (`AheadOfTimeBlock`). The blocks keep their weights,
   so a package that fails to load or run falls back to the eager block (logged once), never a failed call.
"""

from __future__ import annotations

import logging
import threading

from .compile import CompileState, blocks

log = logging.getLogger(__name__)

MAX_BATCH = 1024


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


def compile_package(spaces, model, input_size: tuple[int, int], device, dtype):
    """Capture, export and `spaces.aoti_compile` one block of `model` (run inside a GPU call)."""
    import torch

    hidden, cos, sin = capture(spaces, model, input_size, device, dtype)
    first = blocks(model)[0]
    names, weights = _weights(first)
    batch = torch.export.Dim("batch", min=1, max=MAX_BATCH)
    program = torch.export.export(_block_function(first, names), (hidden, cos, sin, weights), strict=False,
                                  dynamic_shapes=({0: batch}, None, None, [None] * len(weights)))
    return spaces.aoti_compile(program)


class AheadOfTimeBlock:
    """A block's forward through the model's shared package, with this block's weights; eager on failure."""

    def __init__(self, block, holder, failed: threading.Event):
        self.block, self.holder = block, holder
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
        return self.eager(hidden_states, attention_mask=attention_mask, position_embeddings=position_embeddings,
                          **kwargs)


def apply(spaces, model, compiled) -> CompileState:
    """Install `compiled` (from `compile_package`) on every block of `model`; returns the model's state."""
    state = CompileState(status="compiled", note="compiled ahead of time (ZeroGPU)", phase="at run time")
    first = blocks(model)[0]
    holder = _block_function(first, _weights(first)[0])  # weightless: aoti_apply's draining leaves the blocks be
    spaces.aoti_apply(compiled, holder)
    failed = threading.Event()
    for block in blocks(model):
        block.forward = AheadOfTimeBlock(block, holder, failed)
    return state


def remove(model) -> None:
    """Back to the eager blocks."""
    for block in blocks(model):
        block.__dict__.pop("forward", None)

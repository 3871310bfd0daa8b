"""Run by tests/system/test_zerogpu_aot.py with the stand-in `spaces` on PYTHONPATH (a fresh process, so
`gpu` picks the stand-in up at import): ahead-of-time compilation of the tiny seg model as the app does it on
ZeroGPU, then forwards in GPU calls (forked children) against the eager model. Prints one JSON line.

    python tests/zerogpu/aot_check.py TINY_DIR good|again|broken

good: compile and save the package (SAPIENS2_COMPILE_CACHE), forwards; again: a restart with that cache (the package
loaded, no compile), forwards, then a worker whose package fails (the saved package is deleted); broken: the compile
fails.
"""

import json
import logging
import sys
import tempfile
from pathlib import Path

import spaces
import torch

from sapiens2_demo import gpu
from sapiens2_demo.models import aot
from sapiens2_demo.models.manager import ModelManager
from sapiens2_demo.models.registry import checkpoint

logging.basicConfig(level=logging.INFO, format="%(name)s: %(message)s")
tiny_dir, mode = sys.argv[1], sys.argv[2]
SEG = checkpoint("seg", "0.4b")


@spaces.GPU
def forward(model_key: str, pixel_values):
    loaded = gpu._STATE[model_key][0].get(SEG)
    with torch.inference_mode():
        return loaded.model(pixel_values=pixel_values).logits


def relative(a, b) -> float:
    return float((a - b).abs().max() / b.abs().max())


def main() -> None:
    if mode == "broken":
        def aoti_compile(*args, **kwargs):
            raise RuntimeError("no compiler on this worker")

        spaces.aoti_compile_and_save = aoti_compile
    eager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", compile="off").get(SEG).model
    manager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", compile="on")
    report = {"crosses": gpu.CROSSES_PROCESSES, "aot": gpu.use_ahead_of_time(manager)}
    gpu.preload(manager, "seg:0.4b")
    report["statuses"] = gpu.compile_ahead(manager)
    model = manager.get(SEG).model
    forwards = [block.__dict__.get("forward") for block in aot.blocks(model)]
    report["blocks"] = len(forwards)
    report["aot_blocks"] = sum(isinstance(f, aot.AheadOfTimeBlock) for f in forwards)
    report["packages"] = len({id(f.holder.forward) for f in forwards if isinstance(f, aot.AheadOfTimeBlock)})
    folders = {str(f.folder) for f in forwards if isinstance(f, aot.AheadOfTimeBlock)}
    report["saved_before"] = [aot.saved(folder) for folder in folders]
    report["notes"] = manager.take_compile_notes()
    key = gpu.register(manager)
    # every GPU call first, every eager forward after: a process that ran OpenMP work before forking hangs
    # its child in the next parallel region (libgomp), and the app's main process never runs a forward
    inputs = {batch: torch.randn(batch, 3, 256, 192, generator=torch.Generator().manual_seed(batch))
              for batch in (1, 3)}
    outputs = {batch: forward(key, x) for batch, x in inputs.items()}
    if mode == "again":  # a package that cannot load in the worker: the blocks run eager there
        holder = forwards[0].holder
        bad = Path(tempfile.mkdtemp()) / "package.pt2"
        bad.write_bytes(b"not an archive")
        holder.forward = type(holder.forward)(bad)
        inputs["broken_package"] = torch.randn(2, 3, 256, 192)
        outputs["broken_package"] = forward(key, inputs["broken_package"])
    report["saved_after"] = [aot.saved(folder) for folder in folders]
    with torch.inference_mode():
        report["relative"] = {batch: relative(outputs[batch], eager(pixel_values=x).logits)
                              for batch, x in inputs.items()}
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()

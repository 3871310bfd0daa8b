"""The person detector on a CPU: ultralytics' own ONNX export of the user's weights, run by onnxruntime.

Why: ultralytics' torch forward of the letterboxed 1080p frame (640 x 384) is most of a CPU pose request. On one
thread of an AMD EPYC (AVX512-BF16), per forward, torch -> onnxruntime: yolo26n (the default detector) 64-73 ->
36 ms, yolov8n 72 -> 55 ms; the same float32 model, its outputs equal to float32 rounding (1.2e-4 px in the
letterbox at most, scores 1e-7), so the same boxes;
through detect_people 63 -> 43 ms wall a 1080p call for yolo26n (`python -m benchmarks detector`, docs/decisions.md).

The weights are the user's: the manager loads them with `YOLO(path)` as before, and the export is made from that
file once (a second or so) into the app's cache, named by the file's digest; predict then runs ultralytics' own
ONNX road (its letterbox, its NMS) with a session of ours: as many threads as torch has, which sleep when idle
(onnxruntime's default spins them, which on a busy machine cost more than the work: 104 against 57 ms wall).
Without onnx or onnxruntime, or when the export fails, the torch model serves (a log line says so);
SAPIENS2_CPU_DETECTOR=torch keeps it on purpose.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import logging
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)
ROAD_VARIABLE = "SAPIENS2_CPU_DETECTOR"  # "onnx" (default) or "torch"


@contextlib.contextmanager
def threads_kept():
    """Keeps torch's thread count, the whole process's, as it was: ultralytics' predictor, made at the first
    predict, sets it to the cores less one (`select_device`: one thread on 2 cores, at most 8), and from then on
    every forward of the app ran on that many threads, Sapiens2's included."""
    import torch

    threads = torch.get_num_threads()
    try:
        yield
    finally:
        if torch.get_num_threads() != threads:
            torch.set_num_threads(threads)


def onnx_detector(weights: str | Path, threads: int):
    """An ultralytics YOLO running the ONNX export of the detector at `weights` under onnxruntime, on `threads`
    sleeping threads; None where this road is off or cannot be had (the torch model then serves)."""
    if os.environ.get(ROAD_VARIABLE, "onnx").strip().lower() == "torch":
        return None
    missing = [name for name in ("onnx", "onnxruntime") if importlib.util.find_spec(name) is None]
    if missing:
        log.info("person detector: torch on the CPU (%s not installed)", " and ".join(missing))
        return None
    try:
        exported = exported_onnx(Path(weights))
        return _runner(exported, threads)
    except Exception as error:  # noqa: BLE001 - the torch model still serves
        log.warning("person detector: torch on the CPU (its ONNX export failed: %s: %s)", type(error).__name__, error)
        return None


def onnx_folder() -> Path:
    from .. import cache_root

    return cache_root() / "sapiens2-ultralytics" / "onnx"


def exported_onnx(weights: Path) -> Path:
    """The ONNX export of `weights` in the app's cache (made when not there yet): dynamic input sizes, so predict
    letterboxes each image with the least padding, as it does for the torch model."""
    digest = hashlib.sha256(weights.read_bytes()).hexdigest()[:16]
    target = onnx_folder() / f"{weights.stem}-{digest}.onnx"
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    from ultralytics import YOLO

    # ultralytics writes the export beside the weights: a copy in a folder of ours, not the user's folder
    with tempfile.TemporaryDirectory(dir=target.parent) as folder:
        copy = Path(folder) / weights.name
        shutil.copyfile(weights, copy)
        with threads_kept():
            made = YOLO(str(copy)).export(format="onnx", dynamic=True, simplify=False, device="cpu", verbose=False)
        os.replace(made, target)  # whole or not at all: another process may read it
    log.info("person detector: exported %s to %s", weights.name, target)
    return target


def _runner(exported: Path, threads: int):
    import onnxruntime
    from ultralytics import YOLO

    model = YOLO(str(exported), task="detect")
    with threads_kept():  # the predictor is made now (a warm-up), and its ONNX session replaced by ours
        model.predict(np.zeros((64, 64, 3), np.uint8), device="cpu", verbose=False)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = max(int(threads), 1)
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    backend = model.predictor.model.backend
    backend.session = onnxruntime.InferenceSession(str(exported), options, providers=["CPUExecutionProvider"])
    return model

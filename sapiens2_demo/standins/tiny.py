"""Tiny Sapiens2 checkpoints in transformers format, for tests and offline trials.

They go through exactly the loading path of real checkpoints (`--checkpoint-dir` layout:
`DIR/sapiens2-<task>-<size>/{config.json, model.safetensors, preprocessor_config.json}`).
With random weights their outputs are noise, but every shape, pre- and post-processing step is the real one.
The stand-ins (train.py) are these configs trained on synthetic targets. Written from the command line with

    python -m sapiens2_demo.standins DIR [--trained] [--detector]
"""

from __future__ import annotations

import json
from pathlib import Path

from ..models.registry import TASKS, checkpoint

TINY_INPUT = (256, 192)  # (height, width): 4:3 like the real 1024x768, 16x12 patches
TINY_BACKBONE = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
                     num_key_value_attention_heads=2, num_register_tokens=2, image_size=list(TINY_INPUT))


def _flip_pairs() -> list[list[int]]:
    flip = json.loads((Path(__file__).resolve().parents[1] / "data" / "keypoints308.json").read_text())["flip_indices"]
    return [[i, j] for i, j in enumerate(flip) if i < j]


def tiny_config(task: str):
    from transformers import Sapiens2Config, Sapiens2HeadConfig

    if task == "pretrain":  # the backbone alone (Sapiens2Model): no head
        return Sapiens2Config(**TINY_BACKBONE)
    dense = task in ("normal", "pointmap", "matting")
    if dense:  # pixel-shuffle decoder back to full input resolution, like the released dense heads
        head = dict(use_pixel_shuffle=True, upsample_out_channels=[16, 16, 16, 16], upsample_kernel_size=3,
                    conv_out_channels=[8], conv_kernel_size=3)
    else:  # transposed-conv decoder to 1/4 resolution (pose heatmaps are 1/4 of the input)
        head = dict(upsample_out_channels=[16, 16], conv_out_channels=[16])
    if task == "pointmap":
        head.update(scale_conv_out_channels=[8, 8], scale_final_hidden_sizes=[16, 8])
    num_labels = {"pose": 308, "seg": 29, "normal": 3, "pointmap": 3, "matting": 4}[task]
    extra = {"flip_pairs": _flip_pairs()} if task == "pose" else {}
    return Sapiens2Config(**TINY_BACKBONE, num_labels=num_labels, head_config=Sapiens2HeadConfig(**head), **extra)


def write_tiny_checkpoint(task: str, size: str, root: Path, seed: int = 0) -> Path:
    import torch
    import transformers

    torch.manual_seed(seed)
    model_class = getattr(transformers, TASKS[task].auto_class)
    return save_checkpoint(model_class.from_config(tiny_config(task)).eval(), task, root, size)


def save_checkpoint(model, task: str, root: Path, size: str | None = None) -> Path:
    """A tiny-config model (random or a stand-in) and its processor config into root/<checkpoint dirname>."""
    from transformers import Sapiens2ImageProcessor

    out = Path(root) / checkpoint(task, size or TASKS[task].sizes[0]).dirname
    model.save_pretrained(out, safe_serialization=True)
    processor = Sapiens2ImageProcessor(size={"height": TINY_INPUT[0], "width": TINY_INPUT[1]},
                                       do_pad=task in ("normal", "pointmap"))
    processor.save_pretrained(out)
    return out


def write_tiny_detector(path: Path, architecture: str = "yolov8n") -> Path:
    """A random-weight YOLO of `architecture` (an ultralytics model name) saved as a .pt; predict with conf=0 to get
    boxes out of it."""
    from ultralytics import YOLO

    detector = YOLO(f"{architecture}.yaml")
    detector.save(str(path))
    return Path(path)


def write_all(root: Path, sizes: dict[str, tuple[str, ...]] | None = None) -> Path:
    root = Path(root)
    for task in TASKS.values():
        for size in (sizes or {}).get(task.name, task.sizes[:1]):
            write_tiny_checkpoint(task.name, size, root)
    return root

"""Full-size 0.4b random-weight Sapiens2 checkpoints, for benchmarks only (never tests).

The backbone is `Sapiens2Config()`'s defaults (the 0.4b: 1024 wide, 24 layers) at 1024x768, with Meta's head
shapes per task (the table "Head shapes of the 0.4b task models" in ../shared/reference/SAPIENS2.md). The
weights are noise, but every tensor has its real size, so a forward costs what the released model's does.

Written once into a cache folder in the --checkpoint-dir layout (`DIR/sapiens2-<task>-0.4b/`), like
sapiens2_demo/standins/tiny.py, and reused afterwards (about 1.6-2.0 GB and a minute each):

    python benchmarks/fullsize.py [--dir /tmp/sapiens2-fullsize] [--tasks seg,pose]

Matting is released at 1b only and its head is not in the reference table, so there is no full-size matting
stand-in here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

DEFAULT_DIR = Path(os.environ.get("SAPIENS2_FULLSIZE_DIR", "/tmp/sapiens2-fullsize"))
INPUT_HW = (1024, 768)
SIZE = "0.4b"
_PIXEL_SHUFFLE = dict(use_pixel_shuffle=True, upsample_kernel_size=3, conv_out_channels=[64, 32, 16],
                      conv_kernel_sizes=[3, 3, 3])
HEADS = {  # Meta's 0.4b head configs, as transformers' Sapiens2HeadConfig fields
    "seg": dict(upsample_out_channels=[512, 256, 128, 64], upsample_kernel_sizes=[4, 4, 4, 4],
                conv_out_channels=[64, 64], conv_kernel_sizes=[1, 1]),
    "pose": dict(upsample_out_channels=[1024, 768], upsample_kernel_sizes=[4, 4],
                 conv_out_channels=[512, 512, 256], conv_kernel_sizes=[1, 1, 1]),
    "normal": dict(_PIXEL_SHUFFLE, upsample_out_channels=[768, 512, 256, 128]),
    "pointmap": dict(_PIXEL_SHUFFLE, upsample_out_channels=[1536, 768, 512, 256],
                     scale_conv_out_channels=[1536, 512, 128], scale_conv_kernel_size=1,
                     scale_final_hidden_sizes=[512, 128]),
}
FULLSIZE_TASKS = tuple(HEADS)
NUM_LABELS = {"pose": 308, "seg": 29, "normal": 3, "pointmap": 3}


def fullsize_config(task: str):
    from transformers import Sapiens2Config, Sapiens2HeadConfig

    from sapiens2_demo.standins.tiny import _flip_pairs

    if task not in HEADS:
        raise ValueError(f"No full-size head for {task!r}; choose from {', '.join(FULLSIZE_TASKS)}.")
    extra = {"flip_pairs": _flip_pairs()} if task == "pose" else {}
    return Sapiens2Config(image_size=list(INPUT_HW), num_labels=NUM_LABELS[task],
                          head_config=Sapiens2HeadConfig(**HEADS[task]), **extra)


def is_complete(folder: Path) -> bool:
    return all((folder / name).is_file() for name in ("config.json", "model.safetensors", "preprocessor_config.json"))


def write_fullsize_checkpoint(task: str, root: Path = DEFAULT_DIR, seed: int = 0) -> Path:
    """DIR/sapiens2-<task>-0.4b/, written once (into a temporary folder renamed at the end, so an
    interrupted write is never mistaken for a checkpoint)."""
    import torch
    import transformers
    from transformers import Sapiens2ImageProcessor

    from sapiens2_demo.models.registry import TASKS, checkpoint

    out = Path(root) / checkpoint(task, SIZE).dirname
    if is_complete(out):
        return out
    started = time.perf_counter()
    torch.manual_seed(seed)
    model_class = getattr(transformers, TASKS[task].auto_class)
    model = model_class.from_config(fullsize_config(task)).eval()
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial, safe_serialization=True)
    processor = Sapiens2ImageProcessor(size={"height": INPUT_HW[0], "width": INPUT_HW[1]},
                                       do_pad=task in ("normal", "pointmap"))
    processor.save_pretrained(partial)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {out} ({params / 1e6:.0f} M parameters) in {time.perf_counter() - started:.0f} s", flush=True)
    return out


def ensure_fullsize(tasks, root: Path = DEFAULT_DIR) -> Path:
    """Write whichever of `tasks` are missing under `root`; returns root (a --checkpoint-dir)."""
    for task in tasks:
        write_fullsize_checkpoint(task, root)
    return Path(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", "--checkpoint-dir", dest="dir", type=Path, default=DEFAULT_DIR,
                        help="where the checkpoints are written (the --checkpoint-dir layout)")
    parser.add_argument("--tasks", default=",".join(FULLSIZE_TASKS), help="comma-separated: seg,pose,normal,pointmap")
    args = parser.parse_args()
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    ensure_fullsize([t.strip() for t in args.tasks.split(",") if t.strip()], args.dir)
    print(f"full-size checkpoints in {args.dir}")


if __name__ == "__main__":
    main()

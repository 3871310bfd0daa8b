"""The CPU's forward roads at full size, and the full-size random-weight checkpoints they need.

    python -m benchmarks cpu [--tasks seg,pose-noflip] [--roads float32,auto] [--reps 1]
    python -m benchmarks fullsize [--dir DIR] [--tasks seg,pose]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from benchmarks import harness

# -- fullsize ------------------------------------------------------------------------------------------------------
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


def fullsize(argv: list[str], run: harness.Run) -> None:
    """Full-size 0.4b random-weight checkpoints (Sapiens2Config's 0.4b backbone at 1024x768, Meta's head shapes,
    ../shared/reference/SAPIENS2.md) in the --checkpoint-dir layout, written once and reused (1.6-2.0 GB and a minute
    each): a forward costs what the released model's does. No matting (released at 1b only)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks fullsize", description=fullsize.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", "--checkpoint-dir", dest="dir", type=Path, default=DEFAULT_DIR,
                        help="where the checkpoints are written (the --checkpoint-dir layout)")
    parser.add_argument("--tasks", default=",".join(FULLSIZE_TASKS), help="comma-separated: seg,pose,normal,pointmap")
    args = parser.parse_args(argv)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    ensure_fullsize([t.strip() for t in args.tasks.split(",") if t.strip()], args.dir)
    print(f"full-size checkpoints in {args.dir}")


# -- cpu -----------------------------------------------------------------------------------------------------------
ROADS = {"float32": ("float32", "off"), "bfloat16": ("bfloat16", "off"), "auto": ("auto", "auto")}
TASKS = {"seg": ("segment", {}), "pose": ("pose", {"flip_test": True}), "pose-noflip": ("pose", {"flip_test": False}),
         "normal": ("normals", {}), "pointmap": ("pointmap", {})}
ASSETS = Path(__file__).resolve().parent.parent / "assets"


def load_average() -> str:
    return "load average {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


def photo_1080p():
    from PIL import Image

    from sapiens2_demo.media.image import load_image

    return load_image(Image.open(ASSETS / "astronaut.jpg").convert("RGB").resize((1920, 1080)))


def cpu_header() -> dict:
    from sapiens2_demo.models.device import cpu_capabilities, cpu_name, default_dtype, native_bf16

    caps = cpu_capabilities()
    return {"cpu": cpu_name(caps), "amx_bf16": bool(caps.get("amx_bf16")), "amx_tile": bool(caps.get("amx_tile")),
            "avx512_bf16": bool(caps.get("avx512_bf16")), "native_bf16": native_bf16(caps) or "none",
            "auto_dtype": default_dtype("cpu", caps), "cores": os.cpu_count()}


def forward_seconds(manager, task: str, image, flip: bool) -> float:
    """One forward as the request runs it (pose: the crop of the whole photo, mirrored twin included)."""
    import numpy as np

    from sapiens2_demo.models.inference import forward, preprocess
    from sapiens2_demo.models.registry import checkpoint
    from sapiens2_demo.pipelines.pose import forward_with_flip, model_flip_pairs

    family = "pose" if task.startswith("pose") else task
    loaded = manager.get(checkpoint(family, "0.4b"))
    started, cpu = time.perf_counter(), time.process_time()
    if family == "pose":
        h, w = image.rgb.shape[:2]
        pixel_values = preprocess(loaded, [image.rgb], "pose", [np.float32([[0, 0, w, h]])])
        forward_with_flip(loaded, pixel_values, model_flip_pairs(loaded.model) if flip else None)
    else:
        forward(loaded, preprocess(loaded, [image.rgb], family))
    return time.perf_counter() - started, time.process_time() - cpu


def request_seconds(ctx, task: str, image, run_dir: Path) -> float:
    from sapiens2_demo.jobs.image import run_task
    from sapiens2_demo.pipelines.dense import SegmentationCache

    name, options = TASKS[task]
    ctx.seg_cache = SegmentationCache()  # a new photo: the request runs its models (no cached segmentation)
    started, cpu = time.perf_counter(), time.process_time()
    run_task(ctx, image, task=name, run_dir=run_dir, **options)
    return time.perf_counter() - started, time.process_time() - cpu


def bench_task(task: str, roads: list[str], reps: int, checkpoints: Path, detector: str, image, out: Path,
               warm: bool = False) -> dict:
    from sapiens2_demo import tasks
    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.models.registry import checkpoint

    family = "pose" if task.startswith("pose") else task
    contexts, rows = {}, {}
    for road in roads:
        dtype, compile_mode = ROADS[road]
        manager = ModelManager(checkpoint_dir=checkpoints, device="cpu", dtype=dtype, compile=compile_mode,
                               detector=detector)
        started = time.perf_counter()
        loaded = manager.get(checkpoint(family, "0.4b"))
        rows[road] = {"road": manager.road, "load_s": round(time.perf_counter() - started, 1),
                      "compile": loaded.compiled.note if loaded.compiled else "off", "forward_s": [], "request_s": [],
                      "forward_cpu_s": [], "request_cpu_s": []}
        contexts[road] = AppContext(manager=manager)
        print(f"  {task} {road}: loaded in {rows[road]['load_s']} s ({rows[road]['road']}; "
              f"{rows[road]['compile']}); {load_average()}", flush=True)
        if family == "pose":
            manager.get_detector()
        if tasks.get(TASKS[task][0]).uses_mask:  # the background is removed with the body parts: loaded now too
            manager.get(checkpoint("seg", "0.4b"))
        if warm:  # a first request (full size: about as long as the timed ones, so off by default)
            request_seconds(contexts[road], task, image, out / f"warm-{task}-{road}")
    flip = TASKS[task][1].get("flip_test", False)
    for rep in range(reps):
        for road in roads:
            for kind, (wall, cpu) in (("forward", forward_seconds(contexts[road].manager, task, image, flip)),
                                      ("request", request_seconds(contexts[road], task, image,
                                                                  out / f"{task}-{road}-{rep}"))):
                rows[road][f"{kind}_s"].append(wall)
                rows[road][f"{kind}_cpu_s"].append(cpu)
            print(f"  {task} {road} rep {rep}: forward {rows[road]['forward_s'][-1]:.2f} s "
                  f"(CPU {rows[road]['forward_cpu_s'][-1]:.1f} s), request {rows[road]['request_s'][-1]:.2f} s "
                  f"(CPU {rows[road]['request_cpu_s'][-1]:.1f} s); {load_average()}", flush=True)
    for road in roads:
        row = rows[road]
        row["forward"] = round(statistics.median(row["forward_s"]), 2)
        row["request"] = round(statistics.median(row["request_s"]), 2)
        row["request/forward"] = round(row["request"] / row["forward"], 2)
        row["forward_cpu"] = round(statistics.median(row["forward_cpu_s"]), 1)
        row["request_cpu"] = round(statistics.median(row["request_cpu_s"]), 1)
        if "float32" in rows:
            row["speed-up request"] = round(rows["float32"]["request"] / row["request"], 2)
            row["speed-up forward"] = round(rows["float32"]["forward"] / row["forward"], 2)
    return rows


def cpu(argv: list[str], run: harness.Run) -> None:
    """The CPU's roads at full size: eager float32 against the auto road (bf16 + regional compile where the CPU runs
    bf16 natively; `bfloat16`: eager bf16), per task on full-size random weights: load (+ compile) seconds, the forward
    (one 1080p photo; pose: one crop, with its mirror under the flip test) and the complete request (run_task with its
    defaults), wall and CPU seconds, request / forward, and each road's speed-up over float32. The roads alternate
    within each repetition, so load drift hits them alike. `pose` has the flip test, `pose-noflip` not."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks cpu", description=cpu.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="seg,pose,pose-noflip,normal,pointmap", help=", ".join(TASKS))
    parser.add_argument("--roads", default="float32,auto", help=", ".join(ROADS))
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (default: torch's, every core)")
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="full-size checkpoints (python -m benchmarks fullsize)")
    parser.add_argument("--warm", action="store_true", help="one untimed request per road first")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import torch

    from sapiens2_demo.standins.tiny import write_tiny_detector

    if args.threads:
        torch.set_num_threads(args.threads)
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()]
    roads = [r.strip() for r in args.roads.split(",") if r.strip()]
    unknown = [t for t in tasks if t not in TASKS] + [r for r in roads if r not in ROADS]
    if unknown:
        parser.error(f"unknown task or road: {', '.join(unknown)}")
    families = {"pose" if t.startswith("pose") else t for t in tasks}
    checkpoints = ensure_fullsize(sorted(families | ({"seg"} if families & {"normal", "pointmap"} else set())),
                                  args.checkpoint_dir or DEFAULT_DIR)
    detector = checkpoints / "yolov8n-random.pt"
    if not detector.exists():
        write_tiny_detector(detector)
    header = {**cpu_header(), "torch": torch.__version__, "threads": torch.get_num_threads()}
    print("CPU: " + ", ".join(f"{k} {v}" for k, v in header.items()) + f"; {load_average()}", flush=True)
    figures = {"machine": header, "tasks": {}}
    image = photo_1080p()
    with tempfile.TemporaryDirectory() as tmp:
        for task in tasks:
            figures["tasks"][task] = bench_task(task, roads, args.reps, checkpoints, str(detector), image, Path(tmp),
                                                 args.warm)
            figures["tasks"][task]["load_after"] = load_average()
            for road, row in figures["tasks"][task].items():
                if isinstance(row, dict):
                    print(f"{task:12s} {road:9s} forward {row['forward']:7.2f} s  request {row['request']:7.2f} s  "
                          f"request/forward {row['request/forward']:.2f}  vs float32: forward "
                          f"{row.get('speed-up forward', '-')}x request {row.get('speed-up request', '-')}x  CPU "
                          f"seconds: forward {row['forward_cpu']} request {row['request_cpu']}  "
                          f"[{row['road']}; load {row['load_s']} s]", flush=True)
            print(f"  ({load_average()})", flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
        print(f"wrote {args.json}")

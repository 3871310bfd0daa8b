"""The forward's roads: the CPU's at full size (and the full-size random-weight checkpoints they need), and pose's
DARK-UDP decode on the host and device roads.

    python -m benchmarks cpu [--tasks seg,pose-noflip] [--roads float32,auto] [--reps 1]
    python -m benchmarks fullsize [--dir DIR] [--tasks seg,pose]
    python -m benchmarks pose [--people 3] [--frames 8] [--road host|device] [--force-reference]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from unittest import mock

import numpy as np
import torch

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


def load_average() -> str:
    return "load " + " ".join(f"{x:.1f}" for x in harness.load())


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
    header = {**harness.machine(), "torch": torch.__version__, "threads": torch.get_num_threads()}
    print("CPU: " + ", ".join(f"{k} {v}" for k, v in header.items()) + f"; {load_average()}", flush=True)
    figures = {"machine": header, "tasks": {}}
    from sapiens2_demo.media.image import load_image

    with tempfile.TemporaryDirectory() as tmp:
        image = load_image(str(harness.astronaut(Path(tmp) / "astronaut_1080p.jpg")))
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
    run.figures, run.weights = figures, "full-size 0.4b random weights"


# -- pose ----------------------------------------------------------------------------------------------------------
HEATMAP = (308, 256, 192)
INPUT = (1024, 768)


def model_like_heatmaps(people: int, seed: int = 0) -> np.ndarray:
    """Sigma-6 Gaussian peaks (the training target's width) of varied height plus a little noise."""
    rng = np.random.default_rng(seed)
    k, h, w = HEATMAP
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    out = np.empty((people, k, h, w), np.float32)
    for p in range(people):
        cx = rng.uniform(0, w, (k, 1, 1)).astype(np.float32)
        cy = rng.uniform(0, h, (k, 1, 1)).astype(np.float32)
        amp = rng.uniform(0.05, 1.0, (k, 1, 1)).astype(np.float32)
        out[p] = amp * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 72.0)
        out[p] += rng.normal(0, 0.01, (k, h, w)).astype(np.float32)
    return out


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def best_of(fn, repeat: int, device: str = "cpu") -> float:
    times = []
    for _ in range(repeat):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return min(times)


def bench_decode(repeat: int, people_counts: list[int], device: str, force_reference: bool) -> None:
    from transformers import Sapiens2ImageProcessor
    from transformers.models.sapiens2.modeling_sapiens2 import Sapiens2PoseEstimatorOutput

    from sapiens2_demo.pipelines.device_post import pose_keypoints
    from sapiens2_demo.pose.decode import decode_heatmaps

    processor = Sapiens2ImageProcessor(size={"height": INPUT[0], "width": INPUT[1]})
    print(f"== decode: {HEATMAP[0]}x{HEATMAP[1]}x{HEATMAP[2]} heatmaps per person on {device}, "
          f"{torch.get_num_threads()} torch threads, force_reference={force_reference}; best of {repeat}")
    print(f"{'heatmaps':<12}{'people':>7}{'host road (s)':>15}{'device road (s)':>17}{'transformers (s)':>18}"
          f"{'max |dx| px host/device':>26}")
    for kind in ("model-like", "uniform"):
        for people in people_counts:
            if kind == "model-like":
                heatmaps = model_like_heatmaps(people)
            else:
                heatmaps = np.random.default_rng(1).random((people, *HEATMAP), dtype=np.float32)
            boxes = np.array([[10 + 40 * i, 20, 300 + 40 * i, 700] for i in range(people)], np.float32)
            xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], 1).tolist()
            tensor = torch.from_numpy(heatmaps).to(device)
            host = partial(decode_heatmaps, tensor, boxes, INPUT, force_reference=force_reference)
            on_device = partial(pose_keypoints, tensor, boxes, INPUT, force_reference=force_reference)

            def theirs(t=tensor, xywh=xywh):
                return processor.post_process_pose_estimation(Sapiens2PoseEstimatorOutput(heatmaps=t), boxes=[xywh])

            times = [best_of(host, repeat, device), best_of(on_device, repeat, device),
                     best_of(theirs, max(1, repeat // 2), device)]
            ref = theirs()[0]
            diffs = [max(float(np.abs(got[i] - r["keypoints"].cpu().numpy()).max()) for i, r in enumerate(ref))
                     for got in (host()[0], on_device()[0])]
            print(f"{kind:<12}{people:>7}{times[0]:>15.4f}{times[1]:>17.4f}{times[2]:>18.3f}"
                  f"{diffs[0]:>16.2e}/{diffs[1]:.2e}")
            del heatmaps, tensor


def astronaut_frame() -> np.ndarray:
    """The astronaut photo scaled to 720x720 on a grey 1280x720 frame."""
    import cv2
    from PIL import Image

    photo = np.asarray(Image.open(Path(__file__).resolve().parent.parent / "assets" / "astronaut.jpg").convert("RGB"))
    frame = np.full((720, 1280, 3), 128, np.uint8)
    frame[:, 280:1000] = cv2.resize(photo, (720, 720), interpolation=cv2.INTER_LINEAR)
    return frame


def fixed_boxes(people: int) -> np.ndarray:
    """`people` boxes around the astronaut (x 320-800 of the frame), each a little smaller than the last."""
    return np.array([[320 + 6 * i, 10 + 4 * i, 800 - 6 * i, 720 - 4 * i] for i in range(people)], np.float32)


def bench_pipeline(args) -> None:
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.pipelines import device_post
    from sapiens2_demo.pipelines import pose as pipeline
    from sapiens2_demo.pipelines.pose import Detections, estimate_pose_batch
    from sapiens2_demo.standins.tiny import write_all

    scratch = tempfile.TemporaryDirectory()
    root = args.checkpoint_dir
    if root is None:
        root = Path(scratch.name)
        write_all(root, {"pose": ("0.4b",)})
    kind = "stand-ins (not models)" if (Path(root) / "STANDINS.txt").exists() else "checkpoints"
    manager = ModelManager(checkpoint_dir=root, device=args.device, dtype=args.dtype)
    frames = [astronaut_frame()] * args.frames
    boxes = fixed_boxes(args.people)
    detections = [Detections(boxes, np.ones(len(boxes), np.float32)) for _ in frames]
    copied = []

    def host_road(heatmaps, *a, **kw):
        copied.append(heatmaps.numel() * heatmaps.element_size())  # .cpu() of every heatmap (nothing on a CPU)
        return real_host(heatmaps, *a, force_reference=args.force_reference, **kw)

    def to_host(tensors):
        copied.append(sum(t.numel() * t.element_size() for t in tensors))
        return real_to_host(tensors)

    real_host, real_to_host = pipeline.decode_heatmaps, device_post.to_host
    real_device = device_post.pose_keypoints
    road = args.road if args.road != "auto" else ("device" if device_post.use_device_post(manager.device) else "host")
    patches = [mock.patch.object(pipeline, "decode_heatmaps", host_road),
               mock.patch.object(device_post, "to_host", to_host),
               mock.patch.object(device_post, "pose_keypoints",
                                 partial(real_device, force_reference=args.force_reference)),
               mock.patch.object(device_post, "use_device_post", lambda device: road == "device")]
    for patch in patches:
        patch.start()
    try:
        estimate_pose_batch(frames, manager, detections=detections, batch_size=args.batch_size)  # warm-up
        runs = []
        for _ in range(args.repeat):
            copied.clear()
            timings = {}
            estimate_pose_batch(frames, manager, detections=detections, batch_size=args.batch_size, timings=timings)
            runs.append((timings, sum(copied)))
    finally:
        for patch in patches:
            patch.stop()
        scratch.cleanup()
    persons = args.frames * args.people
    forward = statistics.median(t["forward"] for t, _ in runs) * 1000 / persons
    decode = statistics.median(t["decode"] for t, _ in runs) * 1000 / persons
    crop = statistics.median(t["crop"] for t, _ in runs) * 1000 / persons
    print(f"\n== pipeline: {kind} at {root}, {manager.device} {args.dtype}, {args.frames} frames of 1280x720 with "
          f"{args.people} fixed boxes, flip test, batch {args.batch_size}, {road} road, "
          f"force_reference={args.force_reference}; median of {args.repeat}")
    print(f"per person: crop {crop:.2f} ms, forward {forward:.2f} ms, decode {decode:.2f} ms "
          f"(decode/forward {decode / forward:.2f}), bytes off the device {runs[0][1] / persons:,.0f}")


def pose(argv: list[str], run: harness.Run) -> None:
    """Pose's decode and pipeline: real-size 308x256x192 heatmaps (model-like and noise) decoded on the host road, the
    device road (only keypoints cross) and by transformers, with the largest difference to transformers; then
    estimate_pose_batch on --frames 720p frames with --people fixed boxes, flip test on: forward and decode ms and the
    bytes off the device a person. --force-reference: every map down the full blur; --road host|device."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks pose", description=pose.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--people", type=int, default=10)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default="cpu", help="cpu, cuda")
    parser.add_argument("--dtype", default=None, help="float32 (CPU default), bfloat16 (CUDA default)")
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="checkpoints for the pipeline (default: tiny random weights in a temporary folder)")
    parser.add_argument("--force-reference", action="store_true", help="every keypoint map down the slow path")
    parser.add_argument("--road", choices=("auto", "host", "device"), default="auto")
    parser.add_argument("--skip-decode", action="store_true")
    parser.add_argument("--skip-pipeline", action="store_true")
    args = parser.parse_args(argv)
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    if not args.skip_decode:
        bench_decode(args.repeat, sorted({1, args.people}), args.device, args.force_reference)
    if not args.skip_pipeline:
        bench_pipeline(args)

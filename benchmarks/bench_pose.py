"""Pose benchmark: decoding (ours on the host, ours on the device, transformers') and the pipeline per person.

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 python benchmarks/bench_pose.py [--device cpu|cuda] [--people 10]
        [--frames 8] [--checkpoint-dir DIR] [--force-reference] [--road auto|host|device] [--repeat 3]

1. decode: real-size heatmaps (308 x 256 x 192 per person, model-like peaks and uniform noise) on --device,
   decoded by our host road (pose.decode: every heatmap copied to the host), our device road
   (pipelines.device_post.pose_keypoints: only keypoints and scores cross) and transformers'
   post_process_pose_estimation; max |difference| to transformers in heatmap-scaled image pixels.
2. pipeline: estimate_pose_batch on --frames 720p frames (the astronaut photo) with --people fixed boxes each,
   flip test on: per person, the forward and decode milliseconds and the bytes copied off the device.
   --checkpoint-dir: tiny random-weight checkpoints (default, written to a temporary folder), stand-ins
   (`python -m sapiens2_demo.standins DIR --trained`: tiny configs trained on synthetic targets, not
   models) or real ones. --force-reference: every keypoint map takes the reference's full blur (the worst
   case). --road: the decode road (auto: the device road on CUDA, the host road elsewhere).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402
import torch  # noqa: E402

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
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
    args = parser.parse_args()
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    if not args.skip_decode:
        bench_decode(args.repeat, sorted({1, args.people}), args.device, args.force_reference)
    if not args.skip_pipeline:
        bench_pipeline(args)


if __name__ == "__main__":
    main()

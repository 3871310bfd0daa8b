"""Pose benchmark: our DARK-UDP decoder vs transformers' post-processing, and per-stage pipeline times.

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 python benchmarks/bench_pose.py [--repeat 3] [--people 10]

Decoding runs on real-size heatmaps (308 x 256 x 192 per person). The pipeline stages run on tiny
random-weight checkpoints (input 256x192, heatmaps 64x48) written to a temporary folder, so they time our
code around the model, not a real model's forward.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

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


def best_of(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def bench_decode(repeat: int, people_counts: list[int]) -> None:
    from transformers import Sapiens2ImageProcessor
    from transformers.models.sapiens2.modeling_sapiens2 import Sapiens2PoseEstimatorOutput

    from sapiens2_demo.pose.decode import decode_heatmaps

    processor = Sapiens2ImageProcessor(size={"height": INPUT[0], "width": INPUT[1]})
    print(f"== decode: {HEATMAP[0]}x{HEATMAP[1]}x{HEATMAP[2]} heatmaps per person, CPU, "
          f"{torch.get_num_threads()} torch threads; best of {repeat}")
    print(f"{'heatmaps':<12}{'people':>7}{'ours (s)':>11}{'transformers (s)':>18}{'speed-up':>10}{'max |dx| px':>13}")
    for kind in ("model-like", "uniform"):
        for people in people_counts:
            if kind == "model-like":
                heatmaps = model_like_heatmaps(people)
            else:
                heatmaps = np.random.default_rng(1).random((people, *HEATMAP), dtype=np.float32)
            boxes = np.array([[10 + 40 * i, 20, 300 + 40 * i, 700] for i in range(people)], np.float32)
            xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], 1).tolist()
            tensor = torch.from_numpy(heatmaps)
            ours = best_of(lambda h=heatmaps, b=boxes: decode_heatmaps(h, b, INPUT), repeat)
            theirs = best_of(lambda t=tensor, xywh=xywh: processor.post_process_pose_estimation(
                Sapiens2PoseEstimatorOutput(heatmaps=t), boxes=[xywh]), max(1, repeat // 2))
            got, _ = decode_heatmaps(heatmaps, boxes, INPUT)
            ref = processor.post_process_pose_estimation(Sapiens2PoseEstimatorOutput(heatmaps=tensor), boxes=[xywh])[0]
            diff = max(float(np.abs(got[i] - r["keypoints"].numpy()).max()) for i, r in enumerate(ref))
            print(f"{kind:<12}{people:>7}{ours:>11.4f}{theirs:>18.3f}{theirs / ours:>9.0f}x{diff:>13.2e}")
            del heatmaps, tensor


def bench_stages(repeat: int, people: int) -> None:
    from PIL import Image

    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.models.tiny import write_tiny_checkpoint, write_tiny_detector
    from sapiens2_demo.pipelines.pose import STAGES, estimate_pose
    from sapiens2_demo.render.skeleton import SkeletonAnnotator

    image = np.array(Image.open(Path(__file__).resolve().parent.parent / "assets" / "astronaut.jpg").convert("RGB"))
    with tempfile.TemporaryDirectory() as root:
        write_tiny_checkpoint("pose", "0.4b", Path(root))
        write_tiny_detector(Path(root) / "yolov8n-random.pt")
        manager = ModelManager(checkpoint_dir=root, device="cpu", dtype="float32",
                               detector=str(Path(root) / "yolov8n-random.pt"))
        annotator = SkeletonAnnotator()
        # The random detector only scores ~0: threshold 0 and any class give it `people` boxes.
        kwargs = dict(score_threshold=0.0, detector_classes=None, max_people=people)
        estimate_pose(image, manager, **kwargs)  # warm-up: loading, first-call overheads
        runs = []
        for _ in range(repeat):
            timings = {}
            result = estimate_pose(image, manager, timings=timings, **kwargs)
            start = time.perf_counter()
            annotator.annotate(image, result)
            timings["draw"] = time.perf_counter() - start
            runs.append(timings)
    stages = [s for s in STAGES if s != "load"] + ["draw"]
    print(f"\n== pipeline stages, tiny checkpoints (input 256x192, heatmaps 64x48), {image.shape[1]}x"
          f"{image.shape[0]} image, {result.num_people} people, flip test on, batch 8; median of {repeat}")
    for stage in stages:
        print(f"{stage:<10}{statistics.median(r[stage] for r in runs) * 1000:>9.1f} ms")
    print(f"{'total':<10}{statistics.median(sum(r[s] for s in stages) for r in runs) * 1000:>9.1f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--people", type=int, default=10)
    parser.add_argument("--skip-decode", action="store_true")
    args = parser.parse_args()
    if not args.skip_decode:
        bench_decode(args.repeat, [1, args.people])
    bench_stages(args.repeat, args.people)


if __name__ == "__main__":
    main()

"""The person detector's two CPU roads, side by side (a script, not a test): ultralytics' torch model and its ONNX
export under onnxruntime (models/detector_cpu.py), each through pose.detector.detect_people as a request calls it.

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 .venv/bin/python benchmarks/bench_detector.py [--detector yolo26n.yaml]
        [--reps 15] [--size 1920x1080]

--detector: a .pt file, or an ultralytics model .yaml (random weights, saved to a temporary .pt first: what is
timed is the forward's arithmetic, the same for any weights). The roads alternate call by call (the machine is
shared: both meet the same load); per road the median wall ms and this process's CPU ms a call, and how far the
ONNX road's boxes and scores are from torch's on the 1080p astronaut (random weights tie many anchors, where NMS
picks among equals by rounding: a count or order that differs there is not a different model).
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
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))


def manager_on(road: str, detector: Path, checkpoints: Path):
    from sapiens2_demo.models.manager import ModelManager

    os.environ["SAPIENS2_CPU_DETECTOR"] = road
    manager = ModelManager(checkpoint_dir=checkpoints, device="cpu", detector=str(detector))
    started = time.perf_counter()
    manager.get_detector()
    return manager, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--detector", default="yolo26n.yaml")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--size", default="1920x1080")
    args = parser.parse_args()
    import bench_endpoints as be
    import numpy as np
    import torch

    from sapiens2_demo.pose.detector import detect_people

    width, height = (int(n) for n in args.size.split("x"))
    with tempfile.TemporaryDirectory(prefix="bench_detector_") as folder:
        detector = Path(args.detector)
        if detector.suffix == ".yaml":
            from ultralytics import YOLO

            detector = Path(folder) / f"{detector.stem}-random.pt"
            YOLO(args.detector).save(str(detector))
        import cv2

        image = cv2.cvtColor(cv2.imread(str(be.make_image(Path(folder) / "a.jpg", (width, height)))), cv2.COLOR_BGR2RGB)
        roads = {road: manager_on(road, detector, Path(folder)) for road in ("torch", "onnx")}
        wall = {road: [] for road in roads}
        cpu = {road: [] for road in roads}
        for _ in range(args.reps + 2):
            for road, (manager, _) in roads.items():
                started, used = time.perf_counter(), time.process_time()
                detect_people(image, manager)
                wall[road].append(1000 * (time.perf_counter() - started))
                cpu[road].append(1000 * (time.process_time() - used))
        load = be.load_average()
        found = {road: detect_people(image, manager, score_threshold=0.0, classes=None, max_people=300)
                 for road, (manager, _) in roads.items()}
    cpu_name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), "unknown CPU")
    print(f"{cpu_name}, {os.cpu_count()} CPUs: torch threads {torch.get_num_threads()}, "
          f"load {load}; {args.detector} at {width}x{height}, median of {args.reps} (2 warm-up calls dropped)")
    for road, (_, loading) in roads.items():
        print(f"  {road:6} wall {statistics.median(wall[road][2:]):6.1f} ms  CPU {statistics.median(cpu[road][2:]):6.1f} "
              f"ms  (loading {loading:.1f} s)")
    (boxes, scores), (onnx_boxes, onnx_scores) = found["torch"], found["onnx"]
    if boxes.shape == onnx_boxes.shape:
        print(f"  boxes {len(boxes)} both; max |box diff| {np.abs(boxes - onnx_boxes).max(initial=0):.2e} px, "
              f"|score diff| {np.abs(scores - onnx_scores).max(initial=0):.2e}")
    else:
        print(f"  boxes: torch {len(boxes)}, onnx {len(onnx_boxes)} (ties among random weights' anchors)")


if __name__ == "__main__":
    main()

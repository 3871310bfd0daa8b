"""Post-processing: the numpy/cv2 path (pipelines/postprocess.py, pose.decode.decode_heatmaps) against the
torch path (pipelines/device_post.py), per task, in ms per call. Sets device_post.TORCH_FASTER_ON_CPU.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_post.py [--repeat 5] [--device cpu|cuda]

Model outputs are synthetic, at the released models' sizes, as float32 tensors on --device (what the
pipelines hold after the forward): seg 29x1024x768 logits of a drawn person (bench_dense.person_logits),
normals / pointmap / matting smooth 1024x768 maps, all to a 1080x1920 (HxW) image (normals and pointmap
crop the keep-aspect padding); pose 308x256x192 model-like heatmaps (bench_pose.model_like_heatmaps) for
1 and 10 people, decoded to image keypoints. The numpy path's time includes copying the model output to
the CPU, the torch path's the copy of its results. Best of --repeat, wall clock, torch's default threads.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402
import torch  # noqa: E402
from bench_dense import person_logits, smooth_field  # noqa: E402
from bench_pose import model_like_heatmaps  # noqa: E402

from sapiens2_demo.pipelines import device_post  # noqa: E402
from sapiens2_demo.pipelines.postprocess import (  # noqa: E402
    postprocess_matting,
    postprocess_normals,
    postprocess_pointmap,
    upsample_labels,
)
from sapiens2_demo.pose.decode import decode_heatmaps  # noqa: E402

INPUT_HW = (1024, 768)
IMAGE_HW = (1080, 1920)


def best_ms(fn, repeat: int):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000, result


def difference(a, b) -> str:
    if a.dtype == np.uint8:
        return f"labels equal {float((a == b).mean()):.4%}"
    return f"max |diff| {float(np.abs(a - b).max()):.1e}"


def dense_cases(device: str):
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.float32))[None].to(device)  # noqa: E731
    logits, normals = t(person_logits()), t(smooth_field(3, (16, 12), 1.0, seed=3))
    points, scales = t(smooth_field(3, (16, 12), 1.0, seed=4) + 5.0), torch.tensor([[1.3]], device=device)
    fg, alpha = t(smooth_field(3, (16, 12), 1.0, seed=5)).sigmoid(), t(smooth_field(1, (16, 12), 3.0, seed=6)).sigmoid()
    hw = IMAGE_HW
    return {
        "seg": (lambda: upsample_labels(logits[0].cpu().numpy(), hw),
                lambda: device_post.segmentation_labels(logits, [hw])[0]),
        "normal": (lambda: postprocess_normals(normals[0].cpu(), hw, INPUT_HW),
                   lambda: device_post.normals(normals, [hw], INPUT_HW)[0]),
        "pointmap": (lambda: postprocess_pointmap(points[0].cpu(), float(scales[0, 0]), hw, INPUT_HW),
                     lambda: device_post.pointmaps(points, scales, [hw], INPUT_HW)[0]),
        "matting": (lambda: postprocess_matting(fg[0].cpu(), alpha[0].cpu(), hw)[1],
                    lambda: device_post.matting(fg, alpha, [hw])[0][1]),
    }


def pose_case(device: str, people: int):
    heatmaps = torch.from_numpy(model_like_heatmaps(people)).to(device)
    boxes = np.array([[10 + 40 * i, 20, 300 + 40 * i, 700] for i in range(people)], np.float32)
    return (lambda: decode_heatmaps(heatmaps.cpu(), boxes, INPUT_HW)[0],
            lambda: device_post.pose_keypoints(heatmaps, boxes, INPUT_HW)[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs, device "
          f"{args.device}; {IMAGE_HW[0]}x{IMAGE_HW[1]} output from {INPUT_HW[0]}x{INPUT_HW[1]} maps / 256x192 "
          f"heatmaps; best of {args.repeat}")
    print(f"{'task':12} {'numpy ms':>9} {'torch ms':>9} {'faster':>7}  agreement")
    cases = dense_cases(args.device)
    cases["pose N=1"] = pose_case(args.device, 1)
    cases["pose N=10"] = pose_case(args.device, 10)
    for name, (numpy_path, torch_path) in cases.items():
        numpy_path(), torch_path()  # warm-up
        numpy_ms, expected = best_ms(numpy_path, args.repeat)
        torch_ms, got = best_ms(torch_path, args.repeat)
        faster = "torch" if torch_ms < numpy_ms else "numpy"
        print(f"{name:12} {numpy_ms:>9.1f} {torch_ms:>9.1f} {faster:>7}  {difference(got, expected)}")


if __name__ == "__main__":
    main()

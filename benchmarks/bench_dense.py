"""Dense post-processing and rendering speed on the CPU, against transformers' post_process_*.

    HF_HUB_OFFLINE=1 .venv/bin/python benchmarks/bench_dense.py [--repeat 3] [--quick]

Model outputs are synthetic (no weights needed), at the released models' 1024x768 resolution:
- seg "person": a drawn standing person (19 body-part classes + background) in the 1024x768 input,
  turned into logits: 8 * Gaussian-blurred (sigma 3 px) one-hot + a smooth random field (std 1, 64 px
  scale) per class. Realistic: smooth logits whose argmax changes only along part boundaries.
- seg "coarse": 29 independent random fields (std 4) on a 32x24 grid, bicubic-upsampled: 29 classes
  fighting everywhere (~11% of source cells on a boundary), far harder than a real person.
- seg "noise": i.i.d. N(0, 1) logits per pixel: every cell is a boundary. The worst case; the fast path
  gives up and interpolates every class (still exact), so this is about the reference's speed.
- normals / pointmap / matting: smooth random maps; the image is 1920 (H) x 1080 (W) or 1080 x 1920,
  so normals and pointmap include cropping the keep-aspect padding.
Timings: best of --repeat runs, seconds, wall clock, torch with its default threads.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from sapiens2_demo.pipelines.postprocess import (  # noqa: E402
    postprocess_matting,
    postprocess_normals,
    postprocess_pointmap,
    upsample_labels,
)

INPUT_HW = (1024, 768)
SIZES = [(1920, 1080), (1080, 1920)]


def person_layout(h: int = 1024, w: int = 768) -> np.ndarray:
    """A standing person's body-part label map (seg29 ids) drawn in model-input coordinates."""
    lab = np.zeros((h, w), np.uint8)
    s = h / 1024.0

    def p(x, y):
        return int(round(x * s + (w - 768 * s) / 2)), int(round(y * s))

    def t(v):
        return max(1, int(round(v * s)))

    def line(a, b, width, c):
        cv2.line(lab, p(*a), p(*b), int(c), t(width))

    def ellipse(cx, cy, ax, ay, c):
        cv2.ellipse(lab, p(cx, cy), (t(ax), t(ay)), 0, 0, 360, int(c), -1)

    def poly(points, c):
        cv2.fillPoly(lab, [np.array([p(*q) for q in points], np.int32)], int(c))

    line((350, 560), (330, 760), 70, 13), line((418, 560), (438, 760), 70, 13)  # trousers
    line((330, 760), (325, 940), 52, 17), line((438, 760), (443, 940), 52, 8)  # lower legs
    ellipse(318, 965, 45, 22, 18), ellipse(450, 965, 45, 22, 9)  # shoes
    poly([(300, 520), (468, 520), (480, 620), (288, 620)], 13)  # hips
    line((300, 270), (250, 420), 48, 20), line((468, 270), (518, 420), 48, 11)  # upper arms
    line((250, 420), (235, 560), 40, 16), line((518, 420), (533, 560), 40, 7)  # lower arms
    ellipse(232, 590, 24, 34, 15), ellipse(536, 590, 24, 34, 6)  # hands
    poly([(290, 250), (478, 250), (470, 540), (298, 540)], 23)  # shirt
    line((384, 200), (384, 260), 50, 3)  # neck
    ellipse(384, 150, 62, 78, 4), ellipse(384, 165, 55, 68, 3)  # hair, face
    ellipse(384, 205, 16, 5, 25), ellipse(384, 213, 15, 5, 24)  # lips
    cv2.rectangle(lab, p(345, 140), p(423, 152), 2, -1)  # eyeglasses
    return lab


def person_logits(seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    lab = person_layout(*INPUT_HW)
    h, w = lab.shape
    out = np.empty((29, h, w), np.float32)
    for c in range(29):
        field = cv2.resize(rng.standard_normal((h // 64 + 2, w // 64 + 2)).astype(np.float32), (w, h),
                           interpolation=cv2.INTER_CUBIC)
        out[c] = 8.0 * cv2.GaussianBlur((lab == c).astype(np.float32), (0, 0), 3.0) + field
    return out


def smooth_field(channels: int, grid: tuple[int, int], amplitude: float, seed: int) -> np.ndarray:
    coarse = torch.from_numpy(np.random.default_rng(seed).standard_normal((1, channels, *grid)).astype(np.float32))
    return F.interpolate(coarse * amplitude, size=INPUT_HW, mode="bicubic", align_corners=False)[0].numpy()


def best_of(fn, repeat: int):
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def boundary_share(logits: np.ndarray) -> float:
    low = logits.argmax(0)
    mixed = (low[:-1, :-1] != low[1:, :-1]) | (low[:-1, :-1] != low[:-1, 1:]) | (low[:-1, :-1] != low[1:, 1:])
    return float(mixed.mean())


def bench_segmentation(processor, repeat: int) -> None:
    print("\n== segmentation: 29x1024x768 logits -> labels at the image size (argmax of bilinear upsample)")
    cases = {
        "person": person_logits(),
        "coarse": smooth_field(29, (32, 24), 4.0, seed=1),
        "noise": np.random.default_rng(2).standard_normal((29, *INPUT_HW)).astype(np.float32),
    }
    print(f"{'logits':8} {'image HxW':>10} {'boundary cells':>14} {'transformers s':>14} {'ours s':>8} "
          f"{'speed-up':>8} {'labels equal':>12}")
    for name, logits in cases.items():
        share = boundary_share(logits)
        tensor = torch.from_numpy(logits)[None]
        for hw in SIZES:
            ref_s, ref = best_of(lambda: processor.post_process_semantic_segmentation(
                SimpleNamespace(logits=tensor), target_sizes=[hw])[0].numpy(), repeat)
            ours_s, ours = best_of(lambda: upsample_labels(logits, hw), repeat)
            equal = float((ours == ref).mean())
            print(f"{name:8} {hw[0]:>4}x{hw[1]:<5} {share:>13.2%} {ref_s:>14.3f} {ours_s:>8.3f} "
                  f"{ref_s / ours_s:>7.1f}x {equal:>12.6%}")


def bench_maps(processor, repeat: int) -> None:
    print("\n== normals / pointmap / matting: model output (1024x768) -> image size, crop + resize + normalise")
    print(f"{'task':9} {'image HxW':>10} {'transformers s':>14} {'ours s':>8} {'max |diff|':>10}")
    normals = torch.from_numpy(smooth_field(3, (16, 12), 1.0, seed=3))[None]
    points = torch.from_numpy(smooth_field(3, (16, 12), 1.0, seed=4) + 5.0)[None]
    scales = torch.tensor([[1.3]])
    foreground = torch.from_numpy(smooth_field(3, (16, 12), 1.0, seed=5))[None].sigmoid()
    alpha = torch.from_numpy(smooth_field(1, (16, 12), 3.0, seed=6))[None].sigmoid()
    for hw in SIZES:
        ref_s, ref = best_of(lambda: F.normalize(processor.post_process_normal_estimation(
            SimpleNamespace(normals=normals), source_sizes=[hw])[0]["normals"], dim=0), repeat)
        ours_s, ours = best_of(lambda: postprocess_normals(normals[0], hw, INPUT_HW), repeat)
        diff = np.abs(ours - ref.permute(1, 2, 0).numpy()).max()
        print(f"{'normals':9} {hw[0]:>4}x{hw[1]:<5} {ref_s:>14.3f} {ours_s:>8.3f} {diff:>10.2e}  (reference re-normalised)")
        ref_s, ref = best_of(lambda: processor.post_process_pointmap_estimation(
            SimpleNamespace(pointmaps=points, scales=scales), source_sizes=[hw])[0]["pointmap"], repeat)
        ours_s, ours = best_of(lambda: postprocess_pointmap(points[0], 1.3, hw, INPUT_HW), repeat)
        diff = np.abs(ours - ref.permute(1, 2, 0).numpy()).max()
        print(f"{'pointmap':9} {hw[0]:>4}x{hw[1]:<5} {ref_s:>14.3f} {ours_s:>8.3f} {diff:>10.2e}  (metres, ~3-7 m)")
        ref_s, ref = best_of(lambda: processor.post_process_image_matting(
            SimpleNamespace(foregrounds=foreground, alphas=alpha), target_sizes=[hw])[0], repeat)
        ours_s, (ours_alpha, _) = best_of(lambda: postprocess_matting(foreground[0], alpha[0], hw), repeat)
        diff = np.abs(ours_alpha - ref["alpha"][0].numpy()).max()
        print(f"{'matting':9} {hw[0]:>4}x{hw[1]:<5} {ref_s:>14.3f} {ours_s:>8.3f} {diff:>10.2e}  (alpha)")


def bench_render(repeat: int) -> None:
    from sapiens2_demo.export import image as export
    from sapiens2_demo.render.depth import DepthAnnotator, attach_colorbar, depth_bounds
    from sapiens2_demo.render.matting import MattingAnnotator
    from sapiens2_demo.render.normals import NormalsAnnotator
    from sapiens2_demo.render.parts import PartsAnnotator, legend
    from sapiens2_demo.results import MattingResult, NormalsResult, PointmapResult, SegmentationResult

    hw = SIZES[0]
    print(f"\n== rendering and exports at {hw[0]}x{hw[1]} (synthetic person layout as the mask)")
    rng = np.random.default_rng(7)
    image = rng.integers(0, 256, (*hw, 3), dtype=np.uint8)
    seg = SegmentationResult(upsample_labels(person_logits(), hw))
    mask = seg.foreground
    normals = NormalsResult(postprocess_normals(torch.from_numpy(smooth_field(3, (16, 12), 1.0, 3)), hw, INPUT_HW), mask)
    points = PointmapResult(postprocess_pointmap(torch.from_numpy(smooth_field(3, (16, 12), 1.0, 4) + 5), 1.0, hw,
                                                 INPUT_HW), 1.0, 768.0, mask)
    alpha = mask.astype(np.float32)
    matte = MattingResult(alpha, image.astype(np.float32) / 255 * alpha[..., None])
    with tempfile.TemporaryDirectory() as folder:
        steps = {
            "parts overlay": lambda: PartsAnnotator().annotate(image, seg),
            "parts legend": lambda: legend(seg),
            "normals RGB": lambda: NormalsAnnotator().annotate(image, normals),
            "depth colour": lambda: DepthAnnotator().annotate(image, points),
            "depth + colour bar": lambda: attach_colorbar(DepthAnnotator().annotate(image, points),
                                                          depth_bounds(points, mask)),
            "matting green": lambda: MattingAnnotator().annotate(image, matte),
            "label PNG": lambda: export.write_label_png(seg, folder),
            "normals 16-bit PNG": lambda: export.write_normals_png(normals, folder, bits=16),
            "depth 16-bit PNG": lambda: export.write_depth_png(points, folder),
            "point cloud .ply": lambda: export.write_ply(points, image, folder),
            "point cloud .glb": lambda: export.write_glb(points, image, folder),
            "matting RGBA PNG": lambda: export.write_matting_rgba(matte, image, folder),
        }
        print(f"person pixels: {mask.mean():.1%}; point cloud capped at 200000 points")
        for name, step in steps.items():
            seconds, _ = best_of(step, repeat)
            print(f"{name:20} {seconds:7.3f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-render", action="store_true")
    args = parser.parse_args()
    from transformers import Sapiens2ImageProcessor

    processor = Sapiens2ImageProcessor(size={"height": INPUT_HW[0], "width": INPUT_HW[1]})
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; numpy {np.__version__}; "
          f"cv2 {cv2.__version__}; {os.cpu_count()} CPUs")
    bench_segmentation(processor, args.repeat)
    bench_maps(processor, args.repeat)
    if not args.skip_render:
        bench_render(args.repeat)


if __name__ == "__main__":
    main()

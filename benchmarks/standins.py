"""The stand-ins' structure against random weights, and one build's time.

    python -m benchmarks standins [--checkpoint-dir DIR] [--random-dir DIR] [--build]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import harness

# -- standins ------------------------------------------------------------------------------------------------------
ASTRONAUT_BOX = [[30, 10, 370, 512]]  # x1 y1 x2 y2 around the astronaut


def figures(checkpoint_dir: Path) -> dict[str, float]:
    from unittest import mock

    from sapiens2_demo.export.image import write_normals_png
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.pipelines import pose as pose_pipeline
    from sapiens2_demo.pipelines.dense import estimate_matting, estimate_normals, segment
    from sapiens2_demo.pipelines.features import extract_features
    from sapiens2_demo.pose.decode import slow_path_maps
    from sapiens2_demo.standins.targets import build_scene

    scene = build_scene("astronaut")
    image = scene.image
    manager = ModelManager(checkpoint_dir=checkpoint_dir, device="cpu", dtype="float32")
    out = {}
    labels = segment(image, manager).labels
    with tempfile.TemporaryDirectory() as folder:  # as the normals task writes it: background removed (default)
        normals = estimate_normals(image, manager, mask=labels > 0)
        out["normals16_png_bytes"] = write_normals_png(normals, folder, bits=16).stat().st_size
    out["labels_equal_right"] = float((labels[:, 1:] == labels[:, :-1]).mean())
    out["part_classes_over_1pct"] = int((np.bincount(labels.ravel(), minlength=29) > 0.01 * labels.size).sum())
    captured = []
    real = pose_pipeline.decode_heatmaps

    def capture(heatmaps, *args, **kwargs):
        captured.append(np.array(heatmaps))
        return real(heatmaps, *args, **kwargs)

    with mock.patch.object(pose_pipeline, "decode_heatmaps", capture):
        pose_pipeline.estimate_pose(image, manager, boxes=ASTRONAUT_BOX)
    out["pose_fast_path"] = float(1 - slow_path_maps(np.concatenate(captured)).mean())
    alpha = estimate_matting(image, manager).alpha
    person = scene.parts > 0
    out["matte_iou"] = float(((alpha > 0.5) & person).sum() / ((alpha > 0.5) | person).sum())
    out.update(mesh_figures(image, labels > 0, manager))
    patches = extract_features([image], manager)[0].patches
    rough = (np.square(np.diff(patches, axis=0)).mean() + np.square(np.diff(patches, axis=1)).mean())
    out["feature_roughness"] = float(rough / patches.var(axis=(0, 1)).mean())
    out.update(body_keypoint_figures(manager))
    return out


def body_keypoint_figures(manager) -> dict[str, float]:
    from sapiens2_demo.pipelines import pose as pose_pipeline
    from sapiens2_demo.pose.meta import DEFAULT_KEYPOINT_THRESHOLD
    from sapiens2_demo.standins.targets import PHOTOS, build_scene

    out = {}
    for name in PHOTOS:
        scene = build_scene(name)
        ys, xs = np.nonzero(scene.parts)
        box = [[float(xs.min()), float(ys.min()), float(xs.max() + 1), float(ys.max() + 1)]]
        pose = pose_pipeline.estimate_pose(scene.image, manager, boxes=box)
        placed, scores = pose.keypoints[0, :17], pose.keypoint_scores[0, :17]
        layout = scene.keypoints[:17]
        h, w = scene.parts.shape
        inside = (layout[:, 0] >= 0) & (layout[:, 0] < w) & (layout[:, 1] >= 0) & (layout[:, 1] < h)
        out[f"pose_body_px_{name}"] = float(np.median(np.linalg.norm(placed - layout, axis=1)[inside]))
        # a body keypoint outside the photo drawn anyway (its score at the drawing's threshold or above)
        out[f"pose_drawn_outside_{name}"] = int((scores[~inside] >= DEFAULT_KEYPOINT_THRESHOLD).sum())
    return out


def mesh_figures(image, mask, manager) -> dict[str, float]:
    """The depth task's surface mesh (background removed): height over width of its vertices (2nd to 98th
    percentile), its 2nd singular value over the 1st (0 for a line), and how well the pointmap's x and y follow the
    pixel's column and row on the person (1: seen from the front, it is the silhouette)."""
    from sapiens2_demo.export.mesh import result_mesh
    from sapiens2_demo.pipelines.dense import estimate_pointmap

    result = estimate_pointmap(image, manager, mask=mask)
    vertices = np.asarray(result_mesh(result, image, mask).vertices, dtype=np.float64)
    width, height = np.subtract(*np.percentile(vertices[:, :2], [98, 2], axis=0))
    spread = np.linalg.svd(vertices - vertices.mean(axis=0), compute_uv=False)
    rows, cols = np.nonzero(mask)
    points = result.points[rows, cols]
    return {"mesh_height_over_width": float(height / width), "mesh_not_a_line": float(spread[1] / spread[0]),
            "mesh_x_follows_column": float(np.corrcoef(points[:, 0], cols)[0, 1]),
            "mesh_y_follows_row": float(np.corrcoef(points[:, 1], rows)[0, 1])}


def structure(argv: list[str], run: harness.Run) -> None:
    """The stand-ins against random weights on the astronaut photo: the normals' 16-bit PNG bytes (target <= 0.4x),
    part labels equal to their right-hand neighbour (>= 0.9), pose maps on the fast decode path (>= 0.9), the matte
    against the person mask, the mesh's shape, the features' roughness, and on the three photos the body keypoints'
    median distance from the layout and those drawn outside the photo. --build: one build's wall and CPU seconds."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks standins", description=structure.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="stand-in checkpoints")
    parser.add_argument("--random-dir", type=Path, default=None,
                        help="random-weight tiny checkpoints (written there when missing)")
    parser.add_argument("--build", action="store_true", help="time one build from nothing, then stop")
    args = parser.parse_args(argv)
    if args.build:
        return time_build()
    from sapiens2_demo.standins.tiny import write_all
    from sapiens2_demo.standins.train import cached_standins

    start = time.perf_counter()
    standins = args.checkpoint_dir or cached_standins()
    print(f"stand-ins (not models): {standins} ({time.perf_counter() - start:.0f} s to train or find)")
    with tempfile.TemporaryDirectory() as scratch:
        random_dir = args.random_dir or Path(scratch)
        if not (random_dir / "sapiens2-pose-0.4b").exists():
            write_all(random_dir)
        ours, theirs = figures(standins), figures(random_dir)
    print(f"\n{'astronaut photo':<26}{'random':>12}{'stand-ins':>12}{'ratio':>9}")
    for key in ours:
        ratio = ours[key] / theirs[key] if theirs[key] else float("nan")
        print(f"{key:<26}{theirs[key]:>12.4g}{ours[key]:>12.4g}{ratio:>9.2f}")
    print(f"\ntargets: normals PNG <= 0.4x random ({ours['normals16_png_bytes'] / theirs['normals16_png_bytes']:.2f}x), "
          f"labels equal to their right neighbour >= 0.9 ({ours['labels_equal_right']:.3f}), "
          f"pose maps on the fast path >= 0.9 ({ours['pose_fast_path']:.3f})")
    run.weights, run.figures = "stand-ins against tiny random weights", {"standins": ours, "random": theirs}
    run.table("structure", ["astronaut photo", "random weights", "stand-ins", "target"],
              [[LABELS.get(key, key), f"{theirs[key]:.3g}", f"{ours[key]:.3g}", TARGETS.get(key, "")] for key in ours])


LABELS = {"normals16_png_bytes": "normals 16-bit PNG bytes (background removed)",
          "labels_equal_right": "part-label pixels equal to their right-hand neighbour",
          "pose_fast_path": "pose keypoint maps on the fast decode path (one user box)",
          "matte_iou": "alpha > 0.5 against the synthetic person mask (IoU)",
          "part_classes_over_1pct": "body-part classes over 1 % of the picture",
          "mesh_height_over_width": "mesh: height over width (the silhouette's: 1.1)",
          "mesh_not_a_line": "mesh: 2nd singular value of its vertices over the 1st (0: a line)",
          "mesh_x_follows_column": "mesh: pointmap x against the pixel's column (correlation)",
          "mesh_y_follows_row": "mesh: pointmap y against the pixel's row (correlation)",
          "feature_roughness": "features: neighbouring patches' difference over their variance (noise: 2)",
          **{f"pose_body_px_{photo}": f"body keypoints from the layout's, median px at 512 px ({photo})"
             for photo in ("astronaut", "grace_hopper", "camera")},
          **{f"pose_drawn_outside_{photo}": f"body keypoints outside the photo drawn anyway ({photo})"
             for photo in ("astronaut", "grace_hopper", "camera")}}
TARGETS = {"normals16_png_bytes": "<= 0.4x random", "labels_equal_right": ">= 0.9", "pose_fast_path": ">= 0.9"}


def time_build() -> None:
    import platform

    from sapiens2_demo.standins.train import write_standins

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor()) if Path("/proc/cpuinfo").exists() else "?"
    print(f"CPU: {cpu}, {os.cpu_count()} cores; load average before {os.getloadavg()[0]:.1f}", flush=True)
    with tempfile.TemporaryDirectory() as folder:
        wall, cpu_start = time.perf_counter(), time.process_time()
        write_standins(Path(folder))
        wall, cpu_s = time.perf_counter() - wall, time.process_time() - cpu_start
    print(f"stand-ins built in {wall:.0f} s wall, {cpu_s:.0f} s CPU (all threads); load average after "
          f"(1, 5, 15 min): {' '.join(f'{x:.1f}' for x in os.getloadavg())}")

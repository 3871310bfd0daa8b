"""The checkpoints the benchmarks run on: full-size random weights (a forward costs what the released model's does),
and the stand-ins' structure against random weights (`fullsize`, `standins`)."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks import harness
from sapiens2_demo.standins.tiny import write_tiny_detector

# -- fullsize: full-size random weights ------------------------------------------------------------------------------
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

    extra = {"flip_pairs": _flip_pairs()} if task == "pose" else {}
    return Sapiens2Config(image_size=list(INPUT_HW), num_labels=NUM_LABELS[task],
                          head_config=Sapiens2HeadConfig(**HEADS[task]), **extra)


def write_fullsize_checkpoint(task: str, root: Path = DEFAULT_DIR, seed: int = 0) -> Path:
    """DIR/sapiens2-<task>-0.4b/, written once (into a temporary folder renamed at the end, so an
    interrupted write is never mistaken for a checkpoint)."""
    import torch
    import transformers
    from transformers import Sapiens2ImageProcessor

    from sapiens2_demo.models.registry import TASKS, checkpoint

    out = Path(root) / checkpoint(task, SIZE).dirname
    if all((out / name).is_file() for name in ("config.json", "model.safetensors", "preprocessor_config.json")):
        return out
    started = time.perf_counter()
    torch.manual_seed(seed)
    model_class = getattr(transformers, TASKS[task].auto_class)
    model = model_class.from_config(fullsize_config(task)).eval()
    unfinished = out.with_name(out.name + ".partial")
    shutil.rmtree(unfinished, ignore_errors=True)
    model.save_pretrained(unfinished, safe_serialization=True)
    processor = Sapiens2ImageProcessor(size={"height": INPUT_HW[0], "width": INPUT_HW[1]},
                                       do_pad=task in ("normal", "pointmap"))
    processor.save_pretrained(unfinished)
    shutil.rmtree(out, ignore_errors=True)
    unfinished.rename(out)
    params = sum(p.numel() for p in model.parameters())
    print(f"wrote {out} ({params / 1e6:.0f} M parameters) in {time.perf_counter() - started:.0f} s", flush=True)
    return out


def ensure_fullsize(tasks, root: Path = DEFAULT_DIR) -> Path:
    """Write whichever of `tasks` are missing under `root` (a --checkpoint-dir), the body parts too where normals or
    depth remove the background with them, a random detector beside them; matting has none (released at 1b only)."""
    tasks = {"pose" if task.startswith("pose") else task for task in tasks} & set(HEADS)
    for task in sorted(tasks | ({"seg"} if tasks & {"normal", "pointmap"} else set())):
        write_fullsize_checkpoint(task, root)
    if not (Path(root) / "yolov8n-random.pt").exists():
        write_tiny_detector(Path(root) / "yolov8n-random.pt")
    return Path(root)


def fullsize(argv: list[str], run: harness.Run) -> None:
    """Full-size 0.4b random-weight checkpoints (Sapiens2Config's 0.4b backbone at 1024x768, Meta's head shapes,
    ../shared/reference/SAPIENS2.md) in the --checkpoint-dir layout, written once and reused (1.6-2.0 GB and a minute
    each): a forward costs what the released model's does. No matting (released at 1b only)."""
    parser = harness.parser(run, fullsize.__doc__)
    parser.add_argument("--dir", "--checkpoint-dir", dest="dir", type=Path, default=DEFAULT_DIR,
                        help="where the checkpoints are written (the --checkpoint-dir layout)")
    parser.add_argument("--tasks", default=",".join(FULLSIZE_TASKS), help="comma-separated: seg,pose,normal,pointmap")
    args = parser.parse_args(argv)
    ensure_fullsize(harness.names(args.tasks), args.dir)
    print(f"full-size checkpoints in {args.dir}")


# -- standins: their structure against random weights ----------------------------------------------------------------
ASTRONAUT_BOX = [[30, 10, 370, 512]]  # x1 y1 x2 y2 around the astronaut


def figures(checkpoint_dir: Path) -> dict[str, float]:
    from unittest import mock

    from sapiens2_demo.export.image import write_normals_png
    from sapiens2_demo.pipelines import pose as pose_pipeline
    from sapiens2_demo.pipelines.dense import estimate_matting, estimate_normals, segment
    from sapiens2_demo.pipelines.features import extract_features
    from sapiens2_demo.pose.decode import slow_path_maps
    from sapiens2_demo.standins.targets import build_scene

    scene = build_scene("astronaut")
    image = scene.image
    manager = harness.manager(checkpoint_dir, dtype="float32")
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
    """The stand-ins' structure against random weights on the assets' photos (docs/standins.md: the table, its
    targets). --build: one build's wall and CPU seconds."""
    parser = harness.parser(run, structure.__doc__)
    parser.add_argument("--build", action="store_true", help="time one build from nothing, then stop")
    if parser.parse_args(argv).build:
        return time_build(run)
    start = time.perf_counter()
    standins = harness.standin_checkpoints()
    print(f"stand-ins (not models): {standins} ({time.perf_counter() - start:.0f} s to train or find)")
    ours, theirs = figures(standins), figures(harness.tiny_checkpoints())
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


def time_build(run: harness.Run) -> None:
    from sapiens2_demo.standins.train import write_standins

    with tempfile.TemporaryDirectory() as folder:
        wall, cpu = time.perf_counter(), time.process_time()
        write_standins(Path(folder))
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    run.figures.update(build_s=round(wall), build_cpu_s=round(cpu))
    print(f"stand-ins built in {wall:.0f} s wall, {cpu:.0f} s CPU (all threads); load {harness.load()}")

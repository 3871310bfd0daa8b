"""--compile on against off, as the batch CLI runs it: the inputs (three images of three sizes and a short video), a
launch of the CLI in its own process under TORCH_LOGS=recompiles, and its output files and pose maps compared with
another launch's. tests/system/test_compile_cli.py asserts on these; `python -m benchmarks compile` prints them.
"""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

from tests.videos import write_frames

ROOT = Path(__file__).resolve().parents[1]
IMAGES = (("astronaut", (512, 512)), ("grace_hopper", (320, 400)), ("camera", (640, 360)))
RECOMPILE = re.compile(r"Recompiling function")
LOADED = re.compile(r"loaded facebook/sapiens2-")


def make_inputs(folder: Path, video_frames: int = 20) -> Path:
    """Three images of three sizes and a short video (tests/videos.py's moving pattern)."""
    import numpy as np
    from PIL import Image

    folder.mkdir(parents=True, exist_ok=True)
    for name, size in IMAGES:
        Image.open(ROOT / "assets" / f"{name}.jpg").convert("RGB").resize(size).save(folder / f"{name}.jpg")
    def frame(i: int) -> np.ndarray:  # a yellow box moving right over a blue ramp
        rgb = np.zeros((120, 160, 3), np.uint8)
        rgb[..., 2] = np.linspace(40, 120, 160, dtype=np.uint8)[None, :]
        rgb[40:80, 4 + i * 5:44 + i * 5] = (230, 200, 60)
        return rgb

    write_frames(folder / "clip.mp4", [frame(i) for i in range(video_frames)], fps=10)
    return folder


@dataclass
class Launch:
    seconds: float
    recompiles: int
    after_warm_up: int
    log: str
    output: Path


def run_cli(inputs: Path, output: Path, checkpoint_dir: Path, compile_mode: str, cache: Path, device: str = "cpu",
            tasks: str = "seg,pose", dtype: str | None = None) -> Launch:
    """The batch command in its own process, with TORCH_LOGS=recompiles; raises on a non-zero exit."""
    env = {**os.environ, "SAPIENS2_COMPILE_CACHE": str(cache), "TORCH_LOGS": "recompiles", "HF_HUB_OFFLINE": "1",
           "YOLO_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "PYTHONPATH": str(ROOT)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    detector = checkpoint_dir / "yolov8n-random.pt"
    command = [sys.executable, "-m", "sapiens2_demo.cli", "--input", str(inputs), "--output", str(output),
               "--tasks", tasks, "--checkpoint-dir", str(checkpoint_dir), "--detector", str(detector),
               "--device", device, "--compile", compile_mode, "--quiet", "--overwrite"] + ["--dtype", dtype] * bool(dtype)
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    log = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{log[-3000:]}")
    lines = log.splitlines()
    last_load = max((i for i, line in enumerate(lines) if LOADED.search(line)), default=-1)
    after = sum(1 for line in lines[last_load + 1:] if RECOMPILE.search(line))
    return Launch(seconds, len(RECOMPILE.findall(log)), after, log, output)


def _label_maps(folder: Path) -> dict[str, object]:
    """Every body-part label map of a run: image PNGs and the video's zipped frames, by name."""
    import numpy as np
    from PIL import Image

    maps = {p.relative_to(folder).as_posix(): np.asarray(Image.open(p)) for p in folder.rglob("body_parts_labels.png")}
    for archive in folder.rglob("body_parts_labels.zip"):
        with zipfile.ZipFile(archive) as zipped:
            for name in zipped.namelist():
                maps[f"{archive.relative_to(folder)}/{name}"] = np.asarray(Image.open(io.BytesIO(zipped.read(name))))
    return maps


def _keypoints(folder: Path) -> dict[str, list]:
    """Every person's (keypoints, scores) of a run: pose_sapiens2.json per image, pose_frames.jsonl per frame."""
    found = {}
    for path in folder.rglob("pose_sapiens2.json"):
        found[path.relative_to(folder).as_posix()] = [(p["keypoints"], p["keypoint_scores"])
                                                      for p in json.loads(path.read_text())["instances"]]
    for path in folder.rglob("pose_frames.jsonl"):
        for line in path.read_text().splitlines():
            frame = json.loads(line)
            found[f"{path.relative_to(folder)}#{frame['frame']}"] = [(p["keypoints"], p["keypoint_scores"])
                                                                     for p in frame["people"]]
    return found


def compare(reference: Path, other: Path) -> dict:
    """The output files of two runs: label agreement (the worst map's share of equal pixels) and keypoints (the
    share within 0.05 px, the median and largest move): figures; `pose_parity` says which moves are well-defined."""
    import numpy as np

    labels_a, labels_b = _label_maps(reference), _label_maps(other)
    points_a, points_b = _keypoints(reference), _keypoints(other)
    if labels_a.keys() != labels_b.keys() or points_a.keys() != points_b.keys():
        raise AssertionError(f"different outputs: {sorted(labels_a.keys() ^ labels_b.keys())} "
                             f"{sorted(points_a.keys() ^ points_b.keys())}")
    agreement = min(float((labels_a[k] == labels_b[k]).mean()) for k in labels_a)
    distances = []
    for key in points_a:
        if len(points_a[key]) != len(points_b[key]):
            raise AssertionError(f"{key}: {len(points_a[key])} people against {len(points_b[key])}")
        for (a, _), (b, _) in zip(points_a[key], points_b[key]):
            distances.append(np.abs(np.asarray(a, float) - np.asarray(b, float)).max(axis=1))
    moved = np.concatenate(distances) if distances else np.zeros(0)
    return {"label_maps": len(labels_a), "labels_equal": round(agreement, 6), "keypoints": int(moved.size),
            "keypoints_within_0.05px": round(float((moved <= 0.05).mean()) if moved.size else 1.0, 5),
            "keypoints_median_px": float(np.median(moved)) if moved.size else 0.0,
            "keypoints_max_px": float(moved.max()) if moved.size else 0.0, "further": int((moved > 0.05).sum())}


# -- keypoints: which are well-defined ------------------------------------------------------------------------
PEAK_MARGIN = 1e-5  # of the map's range: 20x the largest compiled-vs-eager map difference measured (5e-7)


def record_pose(inputs: Path, output: Path, checkpoint_dir: Path, compile_mode: str, cache: Path,
                device: str = "cpu", dtype: str | None = None) -> list[tuple]:
    """The batch command's pose task in this process, recording every decoder call: (heatmaps, boxes, keypoints)."""
    import numpy as np

    import sapiens2_demo.pipelines.device_post as device_post
    import sapiens2_demo.pipelines.pose as pipeline
    from sapiens2_demo import cli

    # the host road's decoder and the device road's (CUDA), where the pose pipeline finds them
    roads = ((pipeline, "decode_heatmaps"), (device_post, "pose_keypoints"))
    calls, originals = [], [(module, name, getattr(module, name)) for module, name in roads]

    def recorder(decode):
        def recorded(heatmaps, boxes, *args, **kwargs):
            keypoints, scores = decode(heatmaps, boxes, *args, **kwargs)
            calls.append((heatmaps.detach().float().cpu().numpy(), np.array(boxes, np.float32), np.array(keypoints)))
            return keypoints, scores
        return recorded

    saved = {name: os.environ.get(name) for name in ("SAPIENS2_COMPILE_CACHE", "TORCHINDUCTOR_CACHE_DIR")}
    os.environ["SAPIENS2_COMPILE_CACHE"] = str(cache)
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    try:
        for module, name, decode in originals:
            setattr(module, name, recorder(decode))
        detector = checkpoint_dir / "yolov8n-random.pt"
        status = cli.main(["--input", str(inputs), "--output", str(output), "--tasks", "pose", "--checkpoint-dir",
                           str(checkpoint_dir), "--detector", str(detector), "--device", device, "--compile",
                           compile_mode, "--quiet", "--overwrite"] + ["--dtype", dtype] * bool(dtype))
        if status:
            raise RuntimeError(f"the pose run with --compile {compile_mode} exited {status}")
    finally:
        for module, name, decode in originals:
            setattr(module, name, decode)
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)
    return calls


def pose_parity(reference: list[tuple], other: list[tuple]) -> dict:
    """Keypoints of two recorded runs (`record_pose`), compared where they are well-defined:
    (a) the same crop: video frames between detections take boxes that follow the last frame's keypoints, so an
        earlier difference moves the crop (and the heatmaps with it);
    (b) a unique peak: the map's maximum beats every value outside its 3x3 neighbourhood by PEAK_MARGIN of the
        map's range (else rounding picks between two far-apart peaks of the same height: the flip test makes
        mirror-image twins);
    (c) a well-conditioned sub-pixel step: the decoder settles it on its fast path in both runs (a 1e-6 change of
        the log map moves it by < 0.02 px; pose.decode.slow_path_maps). The others are nearly flat around the
        peak, where the reference's DARK step amplifies float32 rounding up to thousands of pixels.
    Target: every well-defined keypoint within 0.05 px; heatmaps of the same crops within 1e-4 of their range."""
    import numpy as np

    from sapiens2_demo.pose.decode import slow_path_maps

    if len(reference) != len(other):
        raise AssertionError(f"{len(reference)} decoder calls against {len(other)}")
    moved, kinds, map_difference = [], [], 0.0
    for (maps_a, boxes_a, points_a), (maps_b, boxes_b, points_b) in zip(reference, other):
        if maps_a.shape != maps_b.shape:
            raise AssertionError(f"heatmaps {maps_a.shape} against {maps_b.shape}")
        same_crop = np.broadcast_to((boxes_a == boxes_b).all(axis=-1)[:, None], maps_a.shape[:2])
        if same_crop.any():
            rows = same_crop[:, 0]
            span = float(np.ptp(maps_a[rows])) or 1.0
            map_difference = max(map_difference, float(np.abs(maps_a[rows] - maps_b[rows]).max()) / span)
        kind = np.where(~same_crop, "other crop", np.where(~_unique_peak(maps_a), "tied peaks", np.where(
            slow_path_maps(maps_a) | slow_path_maps(maps_b), "ill-conditioned step", "well-defined")))
        moved.append(np.abs(points_a - points_b).max(axis=-1).ravel())
        kinds.append(kind.ravel())
    moved, kinds = (np.concatenate(x) if x else np.zeros(0) for x in (moved, kinds))
    found = {"keypoints": int(moved.size), "same_crop_maps_max_difference": float(f"{map_difference:.2e}")}
    for kind in ("well-defined", "ill-conditioned step", "tied peaks", "other crop"):
        chosen = moved[kinds == kind]
        found[kind] = {"count": int(chosen.size), "within_0.05px": int((chosen <= 0.05).sum()),
                       "max_px": float(f"{chosen.max():.3g}") if chosen.size else 0.0}
    return found


def _unique_peak(maps):
    """(N, K) True where each (h, w) map's maximum beats every value outside its 3x3 neighbourhood by
    PEAK_MARGIN of the map's range."""
    import numpy as np

    n, k, h, w = maps.shape
    flat = maps.reshape(n * k, h * w)
    index = flat.argmax(axis=1)
    top = flat[np.arange(n * k), index]
    ys, xs = np.divmod(np.arange(h * w), w)
    near = (np.abs(ys[None] - (index // w)[:, None]) <= 1) & (np.abs(xs[None] - (index % w)[:, None]) <= 1)
    rest = np.where(near, -np.inf, flat).max(axis=1)
    return (top - rest > PEAK_MARGIN * np.ptp(flat, axis=1)).reshape(n, k)

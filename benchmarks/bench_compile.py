"""--compile on the batch CLI: a cold launch (empty compile cache), a warm one (the cache of the cold one), and
--compile off, over three images of different sizes and a 20-frame video (a script, not a test).

    python benchmarks/bench_compile.py [--device cpu] [--tasks seg,pose] [--video-frames 20] [--keep DIR]

Prints each run's wall time (the whole command: start-up, loading with compile and warm-up, inference,
writing), the warm/cold ratio (target <= 0.5), the recompiles TORCH_LOGS=recompiles shows in each run and after
the models' warm-up at load (target: none after it, at most two per model in all), and the outputs against
--compile off: body-part labels equal on >= 99.9 % of pixels, keypoints within 0.05 px (images and video).
Tiny random-weight checkpoints unless --checkpoint-dir names real ones. tests/system/test_compile_cli.py runs
the same thing as a test.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
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
    import av

    with av.open(str(folder / "clip.mp4"), "w") as container:
        stream = container.add_stream("libx264", rate=10)
        stream.width, stream.height, stream.pix_fmt = 160, 120, "yuv420p"
        for i in range(video_frames):
            frame = np.zeros((120, 160, 3), np.uint8)
            frame[..., 2] = np.linspace(40, 120, 160, dtype=np.uint8)[None, :]
            x = 4 + i * 5
            frame[40:80, x:x + 40] = (230, 200, 60)
            for packet in stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return folder


@dataclass
class Run:
    seconds: float
    recompiles: int
    after_warm_up: int
    log: str
    output: Path


def run_cli(inputs: Path, output: Path, checkpoint_dir: Path, compile_mode: str, cache: Path, device: str = "cpu",
            tasks: str = "seg,pose", detector: Path | None = None) -> Run:
    """The batch command in its own process, with TORCH_LOGS=recompiles; raises on a non-zero exit."""
    env = {**os.environ, "SAPIENS2_COMPILE_CACHE": str(cache), "TORCH_LOGS": "recompiles", "HF_HUB_OFFLINE": "1",
           "YOLO_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "PYTHONPATH": str(ROOT)}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)
    detector = detector or checkpoint_dir / "yolov8n-random.pt"
    command = [sys.executable, "-m", "sapiens2_demo.cli", "--input", str(inputs), "--output", str(output),
               "--tasks", tasks, "--checkpoint-dir", str(checkpoint_dir), "--detector", str(detector),
               "--device", device, "--compile", compile_mode, "--quiet", "--overwrite"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - started
    log = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {done.returncode}:\n{log[-3000:]}")
    lines = log.splitlines()
    last_load = max((i for i, line in enumerate(lines) if LOADED.search(line)), default=-1)
    after = sum(1 for line in lines[last_load + 1:] if RECOMPILE.search(line))
    return Run(seconds, len(RECOMPILE.findall(log)), after, log, output)


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
    """Label agreement (the worst map's share of equal pixels); keypoints: the share within 0.05 px, the largest
    distance, and how many of those further off are ties: a heatmap with two peaks whose heights agree within
    1e-3 (relative), where rounding at the 1e-6 level picks either (random weights make flat, many-peaked maps)."""
    import numpy as np

    labels_a, labels_b = _label_maps(reference), _label_maps(other)
    points_a, points_b = _keypoints(reference), _keypoints(other)
    if labels_a.keys() != labels_b.keys() or points_a.keys() != points_b.keys():
        raise AssertionError(f"different outputs: {sorted(labels_a.keys() ^ labels_b.keys())} "
                             f"{sorted(points_a.keys() ^ points_b.keys())}")
    agreement = min(float((labels_a[k] == labels_b[k]).mean()) for k in labels_a)
    distances, ties = [], 0
    for key in points_a:
        if len(points_a[key]) != len(points_b[key]):
            raise AssertionError(f"{key}: {len(points_a[key])} people against {len(points_b[key])}")
        for (a, score_a), (b, score_b) in zip(points_a[key], points_b[key]):
            moved = np.abs(np.asarray(a, float) - np.asarray(b, float)).max(axis=1)
            score_a, score_b = np.asarray(score_a, float), np.asarray(score_b, float)
            same_peak_height = np.abs(score_a - score_b) <= 1e-3 * np.maximum(np.abs(score_a), 1e-6)
            ties += int((same_peak_height & (moved > 0.05)).sum())
            distances.append(moved)
    moved = np.concatenate(distances) if distances else np.zeros(0)
    far = int((moved > 0.05).sum())
    return {"label_maps": len(labels_a), "labels_equal": round(agreement, 6), "keypoints": int(moved.size),
            "keypoints_within_0.05px": round(float((moved <= 0.05).mean()) if moved.size else 1.0, 5),
            "keypoints_median_px": float(np.median(moved)) if moved.size else 0.0,
            "keypoints_max_px": float(moved.max()) if moved.size else 0.0, "further": far,
            "further_that_are_ties": ties}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--tasks", default="seg,pose")
    parser.add_argument("--video-frames", type=int, default=20)
    parser.add_argument("--checkpoint-dir", type=Path, default=None, help="default: tiny checkpoints, written here")
    parser.add_argument("--detector", type=Path, default=None, help="default: CHECKPOINT_DIR/yolov8n-random.pt")
    parser.add_argument("--keep", type=Path, default=None, help="keep inputs, outputs and the cache in DIR")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="bench_compile_"))
    checkpoints = args.checkpoint_dir
    if checkpoints is None:
        from sapiens2_demo.models.tiny import write_all, write_tiny_detector

        checkpoints = work / "tiny"
        if not (checkpoints / "yolov8n-random.pt").is_file():
            write_all(checkpoints)
            write_tiny_detector(checkpoints / "yolov8n-random.pt")
    inputs = make_inputs(work / "inputs", args.video_frames)
    cache = work / "compile-cache"
    print(f"{len(IMAGES)} images {', '.join(f'{w}x{h}' for _, (w, h) in IMAGES)} and a {args.video_frames}-frame "
          f"video; tasks {args.tasks}; device {args.device}; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} cores", flush=True)
    runs = {}
    for name, mode in (("off", "off"), ("cold", "on"), ("warm", "on")):
        runs[name] = run_cli(inputs, work / f"out_{name}", checkpoints, mode, cache, args.device, args.tasks,
                             args.detector)
        run = runs[name]
        print(f"  --compile {mode:3s} {name:4s}: {run.seconds:6.1f} s, recompiles {run.recompiles} "
              f"({run.after_warm_up} after the warm-up at load)", flush=True)
    print(f"warm / cold wall time: {runs['warm'].seconds / runs['cold'].seconds:.2f} (target <= 0.5)")
    for name in ("cold", "warm"):
        print(f"{name} against off: {compare(runs['off'].output, runs[name].output)}")
    print(f"work folder: {work}")


if __name__ == "__main__":
    main()

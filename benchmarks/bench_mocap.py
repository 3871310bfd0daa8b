"""Motion capture and steady depth on video: speed and flicker figures on one clip (a script, not a test).

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False .venv/bin/python benchmarks/bench_mocap.py \
        [--clip assets/astronaut_pan.mp4] [--frames 48] [--checkpoint-dir /tmp/sapiens2-tiny] [--device cpu]

Speed: frames per second of the `/video` path (`process_video`, the Video tab's defaults) on the same clip for
pose alone, pointmap (depth) alone, and pose with `motion_3d` (pose + each frame's masked pointmap + the lift,
the 3D smoothing and the mocap files), run in the order A B C C B A so load drift evens out (the mean of the two
runs is printed). Flicker: the astronaut photo repeated with light sensor noise (Gaussian, 2 grey levels), depth
with `frame_exports`, the mean absolute frame-to-frame change of the exported 16-bit depth frames (mm) with
`temporal_smoothing` off and on. The tiny random-weight checkpoints are written to --checkpoint-dir when missing:
their maps are noise, so the flicker ratio is the filter's on noisy maps, and no BVH comes out of them.
"""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
import time
import zipfile
from fractions import Fraction
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

RUNS = {"pose": ("pose", {}), "pointmap": ("pointmap", {}), "pose + 3D motion": ("pose", {"motion_3d": True})}


def manager_for(checkpoint_dir: Path, device: str):
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.standins.tiny import write_all, write_tiny_detector

    detector = checkpoint_dir / "yolov8n-random.pt"
    if not detector.exists():
        write_all(checkpoint_dir)
        write_tiny_detector(detector)
    return ModelManager(checkpoint_dir=checkpoint_dir, device=device, dtype="float32", detector=str(detector))


def cut(clip: Path, frames: int, out: Path) -> Path:
    """The clip's first `frames` frames, re-encoded (no audio)."""
    import av

    with av.open(str(clip)) as source, av.open(str(out), "w", format="mp4") as sink:
        stream = source.streams.video[0]
        rate = stream.average_rate or Fraction(24)
        target = sink.add_stream("libx264", rate=rate)
        target.width, target.height, target.pix_fmt = stream.width, stream.height, "yuv420p"
        for i, frame in enumerate(source.decode(stream)):
            if i == frames:
                break
            picture = av.VideoFrame.from_ndarray(frame.to_ndarray(format="rgb24"), format="rgb24")
            picture.pts = i
            sink.mux(target.encode(picture))
        sink.mux(target.encode())
    return out


def still_clip(out: Path, frames: int = 24) -> Path:
    import av
    from PIL import Image

    base = np.asarray(Image.open(ROOT / "assets" / "astronaut.jpg").convert("RGB").resize((320, 240)), np.float32)
    rng = np.random.default_rng(0)
    with av.open(str(out), "w", format="mp4") as sink:
        stream = sink.add_stream("libx264", rate=Fraction(24))
        stream.width, stream.height, stream.pix_fmt = 320, 240, "yuv444p"
        stream.options = {"preset": "ultrafast", "crf": "0"}
        for i in range(frames):
            noisy = np.clip(base + rng.normal(0, 2.0, base.shape), 0, 255).astype(np.uint8)
            picture = av.VideoFrame.from_ndarray(noisy, format="rgb24")
            picture.pts = i
            sink.mux(stream.encode(picture))
        sink.mux(stream.encode())
    return out


def depth_frames(zip_path: Path) -> np.ndarray:
    from PIL import Image

    with zipfile.ZipFile(zip_path) as zf:
        return np.stack([np.asarray(Image.open(io.BytesIO(zf.read(n))), np.float64) for n in sorted(zf.namelist())])


def flicker(frames: np.ndarray) -> float:
    return float(np.abs(np.diff(frames[3:], axis=0)).mean())


def figure(frames: dict, path: Path) -> None:
    """Before/after: a depth frame and its change from the frame before, without and with the option."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    t = len(frames[False]) // 2
    fig, axes = plt.subplots(2, 2, figsize=(7, 5.6), constrained_layout=True)
    depth_range = np.percentile(frames[False][t][frames[False][t] > 0], [2, 98])
    for row, steady in enumerate((False, True)):
        label = "steady over time" if steady else "as the model gives it"
        image = axes[row, 0].imshow(frames[steady][t], cmap="turbo", vmin=depth_range[0], vmax=depth_range[1])
        axes[row, 0].set_title(f"depth (mm), {label}", fontsize=9)
        change = np.abs(frames[steady][t] - frames[steady][t - 1])
        shown = axes[row, 1].imshow(change, cmap="magma", vmin=0, vmax=60)
        axes[row, 1].set_title(f"change from the frame before: mean {change.mean():.1f} mm", fontsize=9)
        for ax in axes[row]:
            ax.axis("off")
    fig.colorbar(image, ax=axes[:, 0], shrink=0.6)
    fig.colorbar(shown, ax=axes[:, 1], shrink=0.6)
    fig.suptitle("A still clip with sensor noise (tiny random-weight checkpoints)", fontsize=10)
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=100)
    from PIL import Image

    Image.open(buffer).convert("RGB").quantize(128).save(path, optimize=True)  # a third of the bytes


def speed(clip: Path, key: str, batch: int, tmp: Path) -> None:
    from sapiens2_demo.jobs.video import process_video

    for task, options in RUNS.values():  # warm-up: models loaded, first calls paid
        process_video(clip, task, key, tmp / "warm", batch_size=batch, **options)
    seconds, frames = {name: [] for name in RUNS}, {}
    for name in [*RUNS, *reversed(RUNS)]:
        task, options = RUNS[name]
        started = time.perf_counter()
        out = process_video(clip, task, key, tmp / name.replace(" ", ""), batch_size=batch, **options)
        seconds[name].append(time.perf_counter() - started)
        frames[name] = out.frames
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    for name in RUNS:
        mean = sum(seconds[name]) / len(seconds[name])
        print(f"  {name:18s} {frames[name] / mean:6.2f} frames/s  ({', '.join(f'{s:.1f}' for s in seconds[name])} s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clip", type=Path, default=ROOT / "assets" / "astronaut_pan.mp4")
    parser.add_argument("--frames", type=int, default=48)
    parser.add_argument("--checkpoint-dir", type=Path, default=Path("/tmp/sapiens2-tiny"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--figure", type=Path, help="also write the before/after picture of the flicker here")
    parser.add_argument("--no-speed", action="store_true", help="only the flicker figures")
    args = parser.parse_args()

    from sapiens2_demo import gpu
    from sapiens2_demo.jobs.video import default_batch_size, process_video

    manager = manager_for(args.checkpoint_dir, args.device)
    key = gpu.register(manager)
    batch = default_batch_size(manager.device)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if not args.no_speed:
            speed(cut(args.clip, args.frames, tmp / "clip.mp4"), key, batch, tmp)
            print(f"  (clip: {args.clip.name}, {args.frames} frames; device {manager.device}, batch {batch})")

        still = still_clip(tmp / "still.mp4")
        frames = {}
        for steady in (False, True):
            out = process_video(still, "pointmap", key, tmp / f"steady{steady}", batch_size=batch,
                                frame_exports=True, temporal_smoothing=steady)
            frames[steady] = depth_frames(next(p for p in out.files if p.name == "depth_mm.zip"))
        values = {steady: flicker(maps) for steady, maps in frames.items()}
        if args.figure:
            figure(frames, args.figure)
        print(f"still clip (24 frames, noise 2 grey levels): depth frame-to-frame change {values[False]:.1f} mm "
              f"-> {values[True]:.1f} mm with temporal_smoothing ({values[False] / max(values[True], 1e-9):.1f}x "
              "less)")


if __name__ == "__main__":
    main()

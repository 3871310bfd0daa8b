"""Video speed, per task, on one 720p clip (a script that prints figures, not a test).

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 .venv/bin/python benchmarks/bench_video.py [--frames 48] [--tasks seg,pose]
        [--batch-size 2] [--fullsize] [--device auto] [--breakdown] [--profile]

Three ways through the same clip and the same checkpoint, frames per second each:
- ours: the app's video path (`process_video`: decoder thread ahead, batches through `gpu.infer`, writer
  thread rendering + encoding + the task's video exports behind), audio kept;
- sequential: the plain loop of the usual scripts, one frame at a time: decode (PyAV) -> transformers'
  Sapiens2ImageProcessor -> model -> simple post-processing (F.interpolate + argmax / normalise / divide by
  the scale) -> simple render (50% palette blend, normal RGB, turbo inverse depth, green composite, keypoint
  dots) -> encode (PyAV libx264, same preset and CRF as ours), no audio, no exports. It does the same model
  work as ours: the detector + flip test for pose, the body-part mask for normals and depth;
- model-only: the forwards alone (the same ones) on frames decoded and pre-processed beforehand, in batches
  of the same size as ours.
Targets (issue 8): ours >= 3x sequential on the tiny checkpoints; ours >= 0.9x model-only on full-size 0.4b
random-weight checkpoints (--fullsize: ~30 s a forward on a 2-core CPU, so 4 frames of seg by default).
--breakdown adds where our path's time goes per thread; --profile prints cProfile's top 15 of its main thread.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import os
import pstats
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

TASKS = ("pose", "seg", "normal", "pointmap", "matting")
MASKED = ("normal", "pointmap")  # ours removes the background with the body-part segmentation by default
CRF, PRESET = "20", "veryfast"  # as sapiens2_demo.media.video (DEFAULT_CRF, DEFAULT_PRESET)


@dataclass
class Checkpoints:
    dir: Path  # --checkpoint-dir layout
    detector: Path
    label: str  # "tiny" or "full-size 0.4b"


def tiny_checkpoints(root: Path) -> Checkpoints:
    from sapiens2_demo.models.tiny import write_all, write_tiny_detector

    quiet_transformers()
    root = Path(root)
    if not (root / "yolov8n-random.pt").exists():
        write_all(root)
        write_tiny_detector(root / "yolov8n-random.pt")
    return Checkpoints(root, root / "yolov8n-random.pt", "tiny")


def fullsize_checkpoints(tasks, detector: Path) -> Checkpoints:
    from fullsize import DEFAULT_DIR, FULLSIZE_TASKS, ensure_fullsize

    missing = [t for t in tasks if t not in FULLSIZE_TASKS]
    if missing:
        raise SystemExit(f"no full-size checkpoint for {', '.join(missing)} (matting is released at 1b only)")
    needed = set(tasks) | ({"seg"} if set(tasks) & set(MASKED) else set())
    quiet_transformers()
    return Checkpoints(ensure_fullsize(sorted(needed)), detector, "full-size 0.4b")


def quiet_transformers():
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def make_manager(ckpts: Checkpoints, device: str = "auto", dtype: str = "auto", **extra):
    from sapiens2_demo.models.manager import ModelManager

    return ModelManager(checkpoint_dir=ckpts.dir, device=device, dtype=dtype, detector=str(ckpts.detector), **extra)


def make_clip(path: Path, frames: int, size=(1280, 720)) -> Path:
    from tests.videos import make_video

    if not path.exists():
        make_video(path, frames=frames, size=size, fps=24, audio=True)
    return path


def _size(task: str) -> str:
    return "1b" if task == "matting" else "0.4b"


def _sync(device) -> None:
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


# -- ours -----------------------------------------------------------------------------------------------
def measure_ours(clip: Path, task: str, manager, out_dir: Path, batch_size: int) -> tuple[int, float]:
    """(frames, seconds) of `process_video` with the models already loaded."""
    from sapiens2_demo import gpu
    from sapiens2_demo.pipelines.video import process_video

    key = gpu.register(manager)
    started = time.perf_counter()
    out = process_video(clip, task, key, out_dir, batch_size=batch_size)
    return out.frames, time.perf_counter() - started


def load_models(manager, task: str) -> None:
    from sapiens2_demo.models.registry import checkpoint

    manager.get(checkpoint(task, _size(task)))
    if task in MASKED:
        manager.get(checkpoint("seg", "0.4b"))
    if task == "pose":
        manager.get_detector()


# -- the plain sequential loop ----------------------------------------------------------------------------
class PlainScript:
    """What the usual scripts do, one frame at a time, with transformers and PyAV only (no code of ours)."""

    def __init__(self, task: str, ckpts: Checkpoints, device: str, dtype):
        import json

        import transformers
        from transformers import Sapiens2ImageProcessor

        from sapiens2_demo.models.registry import TASKS, checkpoint

        self.task, self.device, self.dtype = task, device, dtype

        def load(name):
            folder = ckpts.dir / checkpoint(name, _size(name)).dirname
            model = getattr(transformers, TASKS[name].auto_class).from_pretrained(folder, dtype=dtype)
            return model.to(device).eval(), Sapiens2ImageProcessor.from_pretrained(folder)

        self.model, self.processor = load(task)
        self.seg = load("seg") if task in MASKED else None
        data = ROOT / "sapiens2_demo" / "data"
        self.palette = np.array(json.loads((data / "seg29.json").read_text())["palette_rgb"], np.uint8)
        if task == "pose":
            from ultralytics import YOLO

            self.detector = YOLO(str(ckpts.detector))
            self.flip_pairs = self.model.config.flip_pairs
        if task == "pointmap":
            from matplotlib import colormaps

            self.turbo = (colormaps["turbo"](np.linspace(0, 1, 256))[:, :3] * 255).astype(np.uint8)

    def run(self, clip: Path, out: Path) -> int:
        import av
        import torch

        count = 0
        with av.open(str(clip)) as source, av.open(str(out), "w") as sink:
            stream = source.streams.video[0]
            encoder = sink.add_stream("libx264", rate=stream.average_rate)
            encoder.width, encoder.height, encoder.pix_fmt = stream.width, stream.height, "yuv420p"
            encoder.options = {"crf": CRF, "preset": PRESET}
            with torch.inference_mode():
                for frame in source.decode(stream):
                    rgb = frame.to_ndarray(format="rgb24")
                    picture = self.frame(rgb)
                    sink.mux(encoder.encode(av.VideoFrame.from_ndarray(picture, format="rgb24")))
                    count += 1
            sink.mux(encoder.encode())
        return count

    def _inputs(self, processor, rgb, **kwargs):
        return processor(images=rgb, return_tensors="pt", **kwargs)["pixel_values"].to(self.device, self.dtype)

    def frame(self, rgb: np.ndarray) -> np.ndarray:
        import torch.nn.functional as F

        h, w = rgb.shape[:2]
        if self.task == "seg":
            return self._blend(rgb, self._labels(self.model, self.processor, rgb))
        if self.task == "pose":
            return self._pose(rgb)
        if self.task == "matting":
            out = self.model(pixel_values=self._inputs(self.processor, rgb))
            fg = F.interpolate(out.foregrounds.float(), (h, w), mode="bilinear")[0].permute(1, 2, 0)
            alpha = F.interpolate(out.alphas.float(), (h, w), mode="bilinear")[0].permute(1, 2, 0)
            green = fg.new_tensor([0, 177, 64]) / 255
            return ((fg + (1 - alpha) * green).clamp(0, 1) * 255).byte().cpu().numpy()
        background = self._labels(*self.seg, rgb) == 0
        out = self.model(pixel_values=self._inputs(self.processor, rgb, do_pad=True))
        if self.task == "normal":
            normals = self._uncrop(F.normalize(out.normals.float(), dim=1), h, w)
            normals = F.normalize(normals, dim=1)[0].permute(1, 2, 0).cpu().numpy()
            picture = ((normals + 1) * 127.5).clip(0, 255).astype(np.uint8)
            picture[background] = 0
            return picture
        points = self._uncrop(out.pointmaps.float() / out.scales.float().reshape(-1, 1, 1, 1), h, w)
        depth = points[0, 2].cpu().numpy()
        inverse = 1 / np.clip(depth, 0.1, 250)
        near, far = np.percentile(inverse[~background], [1, 99]) if (~background).any() else (0, 1)
        index = np.clip((inverse - near) / max(far - near, 1e-6) * 255, 0, 255).astype(np.uint8)
        picture = self.turbo[index]
        picture[background] = 100
        return picture

    def _labels(self, model, processor, rgb) -> np.ndarray:
        import torch.nn.functional as F

        logits = model(pixel_values=self._inputs(processor, rgb)).logits.float()
        return F.interpolate(logits, rgb.shape[:2], mode="bilinear").argmax(1)[0].byte().cpu().numpy()

    def _blend(self, rgb, labels) -> np.ndarray:
        return ((rgb.astype(np.uint16) + self.palette[labels]) // 2).astype(np.uint8)

    def _uncrop(self, maps, h, w):
        """Crop the keep-aspect padding of a (1, C, H_in, W_in) map and resize it to (h, w)."""
        import torch.nn.functional as F

        hi, wi = maps.shape[-2:]
        scale = min(hi / h, wi / w)
        rh, rw = round(h * scale), round(w * scale)
        top, left = (hi - rh) // 2, (wi - rw) // 2
        return F.interpolate(maps[..., top:top + rh, left:left + rw], (h, w), mode="bilinear")

    def _pose(self, rgb) -> np.ndarray:
        import cv2
        import torch

        h, w = rgb.shape[:2]
        found = self.detector.predict(rgb[..., ::-1], conf=0.3, iou=0.3, classes=[0], verbose=False,
                                      device=self.device)[0].boxes.xyxy.cpu().numpy()
        boxes = found[:20] if len(found) else np.array([[0, 0, w, h]], np.float32)
        xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], 1)
        pixels = self._inputs(self.processor, rgb, boxes=[xywh.tolist()])
        heatmaps = self.model(pixel_values=pixels).heatmaps
        pairs = torch.as_tensor(self.flip_pairs, device=pixels.device)
        heatmaps = ((heatmaps + self.model(pixel_values=pixels.flip(-1), flip_pairs=pairs).heatmaps) / 2).float()
        n, k, hh, hw = heatmaps.shape
        scores, flat = heatmaps.reshape(n, k, -1).max(-1)
        ys, xs = (flat // hw).cpu().numpy(), (flat % hw).cpu().numpy()
        picture = rgb.copy()
        in_h, in_w = pixels.shape[-2:]
        for person, (x, y, bw, bh) in enumerate(xywh):  # the processor's crop: box x1.25, aspect of the input
            cw, ch = max(bw * 1.25, bh * 1.25 * in_w / in_h), max(bh * 1.25, bw * 1.25 * in_h / in_w)
            px = xs[person] / (hw - 1) * cw + x + bw / 2 - cw / 2
            py = ys[person] / (hh - 1) * ch + y + bh / 2 - ch / 2
            for kx, ky, s in zip(px, py, scores[person].cpu().numpy()):
                if s >= 0.3:
                    cv2.circle(picture, (int(kx), int(ky)), 3, (0, 255, 0), -1)
        return picture


def measure_sequential(clip: Path, task: str, ckpts: Checkpoints, device: str, dtype, out_dir: Path,
                       script: PlainScript | None = None) -> tuple[int, float]:
    script = script or PlainScript(task, ckpts, device, dtype)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    frames = script.run(clip, out_dir / f"sequential_{task}.mp4")
    _sync(device)
    return frames, time.perf_counter() - started


# -- model only ---------------------------------------------------------------------------------------------
def prepared_batches(clip: Path, task: str, manager, batch_size: int) -> list[list]:
    """Per batch of frames, the (loaded model, pixel_values, kwargs) forwards our path makes, prepared ahead."""
    from sapiens2_demo.models.inference import preprocess
    from sapiens2_demo.models.registry import checkpoint
    from sapiens2_demo.media.video import read_frames
    from sapiens2_demo.pipelines.video import VideoLimits
    from sapiens2_demo.pose.boxes import xyxy_to_xywh
    from sapiens2_demo.pose.detector import find_people
    from sapiens2_demo.pose.pipeline import model_flip_pairs

    frames = [f.rgb for f in read_frames(clip, max_side=VideoLimits().max_side)]
    loaded = manager.get(checkpoint(task, _size(task)))
    seg = manager.get(checkpoint("seg", "0.4b")) if task in MASKED else None
    batches = []
    for start in range(0, len(frames), batch_size):
        chunk = frames[start:start + batch_size]
        calls = []
        if task == "pose":
            boxes = [xyxy_to_xywh(find_people(f, manager)[0]) for f in chunk]
            pixels = preprocess(loaded, chunk, "pose", boxes)
            pairs = model_flip_pairs(loaded.model).to(pixels.device)
            calls += [(loaded, pixels, {}), (loaded, pixels.flip(-1), {"flip_pairs": pairs})]  # flip test
        else:
            calls.append((loaded, preprocess(loaded, chunk, task), {}))
        if seg is not None:
            calls.append((seg, preprocess(seg, chunk, "seg"), {}))
        batches.append((len(chunk), calls))
    return batches


def measure_model_only(batches, device) -> tuple[int, float]:
    import torch

    frames = 0
    _sync(device)
    started = time.perf_counter()
    with torch.inference_mode():
        for count, calls in batches:
            for loaded, pixels, kwargs in calls:
                loaded.model(pixel_values=pixels, **kwargs)
            frames += count
    _sync(device)
    return frames, time.perf_counter() - started


# -- where our time goes ---------------------------------------------------------------------------------
class StageClock:
    """Wraps functions of the video path with timers (per thread) to show where its time goes."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self._lock = threading.Lock()
        self._undo = []

    def _add(self, label: str, started: float) -> None:
        with self._lock:
            self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - started

    def wrap(self, owner, name: str, label: str, generator: bool = False) -> None:
        """Time calls of owner.name; a generator function: the work per item, not the time between items."""
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self._add(label, started)

        def timed_items(*args, **kwargs):
            items = original(*args, **kwargs)
            while True:
                started = time.perf_counter()
                try:
                    item = next(items)
                except StopIteration:
                    return
                finally:
                    self._add(label, started)
                yield item

        setattr(owner, name, timed_items if generator else timed)
        self._undo.append((owner, name, original))

    def install(self) -> "StageClock":
        from sapiens2_demo import gpu
        from sapiens2_demo.export.video import VideoExports
        from sapiens2_demo.media import video as media
        from sapiens2_demo.pipelines import dense, video
        from sapiens2_demo.pose import pipeline as pose
        from sapiens2_demo.render.frames import FrameRenderer

        self.wrap(gpu, "infer", "main: gpu.infer (pre + forward + post)")
        for module in (dense, pose):
            self.wrap(module, "preprocess", f"main:   preprocess ({module.__name__.rsplit('.', 1)[1]})")
            self.wrap(module, "forward", f"main:   forward ({module.__name__.rsplit('.', 1)[1]})")
        self.wrap(pose, "detect_batch", "main:   detector (pose)")
        self.wrap(video.VideoJob, "_track", "main: tracking + smoothing (pose)")
        self.wrap(video._Writer, "put", "main: waiting for the writer (queue full)")
        self.wrap(media, "read_frames", "decode thread: decode + to RGB (read_frames)", generator=True)
        self.wrap(FrameRenderer, "render", "writer thread: render")
        self.wrap(media.VideoSink, "write", "writer thread: encode + mux, every VideoSink (exports' too)")
        self.wrap(VideoExports, "add", "writer thread: task exports (VideoExports.add)")
        return self

    def remove(self) -> None:
        for owner, name, original in reversed(self._undo):
            setattr(owner, name, original)
        self._undo.clear()

    def report(self, wall: float, frames: int) -> list[str]:
        lines = [f"  where the time goes ({frames} frames, {wall:.2f} s wall = "
                 f"{1000 * wall / max(frames, 1):.1f} ms/frame; the three threads overlap):"]
        seconds = dict(self.seconds)
        infer = [label for label in seconds if label.startswith("main: gpu.infer")]
        if infer:  # what gpu.infer spends outside the stages timed inside it
            inside = sum(v for label, v in seconds.items() if label.startswith("main:   "))
            seconds["main:   post-processing and the rest (by difference)"] = seconds[infer[0]] - inside
        for label, value in sorted(seconds.items()):
            lines.append(f"    {label:58} {value:7.2f} s  {1000 * value / max(frames, 1):7.1f} ms/frame")
        forward = sum(v for label, v in seconds.items() if label.startswith("main:   forward"))
        lines.append(f"    Sapiens2 forward busy {forward / wall:.1%} of the wall time: ours/model-only measured inside "
                     "this one run, immune to load changing between runs (the table's ratio is not)")
        return lines


# -- the run ---------------------------------------------------------------------------------------------------
def fps(frames: int, seconds: float) -> float:
    return frames / max(seconds, 1e-9)


def bench_task(task, clip, warm_clip, ckpts, manager, args, work: Path) -> tuple[dict, list[str]]:
    """Frames per second of ours / sequential / model-only, and lines of breakdown or profile to print."""
    load_models(manager, task)
    figures, notes = {}, []
    if warm_clip is not None:  # first-call costs (thread pools, x264, torch kernels) out of the timings
        measure_ours(warm_clip, task, manager, work / f"warm_{task}", args.batch_size)
    if args.breakdown:
        clock = StageClock().install()
    try:
        frames, seconds = measure_ours(clip, task, manager, work / f"ours_{task}", args.batch_size)
    finally:
        if args.breakdown:
            clock.remove()
    figures["ours"] = fps(frames, seconds)
    if args.breakdown:
        notes += [f"{task}:"] + clock.report(seconds, frames)
    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        measure_ours(clip, task, manager, work / f"profile_{task}", args.batch_size)
        profile.disable()
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(15)
        notes.append(f"  cProfile of our path's main thread ({task}), top 15 by cumulative time:")
        notes += ["    " + line for line in text.getvalue().splitlines() if line.strip()]
    batches = prepared_batches(clip, task, manager, args.batch_size)
    if warm_clip is not None:
        measure_model_only(batches[:1], manager.device)
    figures["model"] = fps(*measure_model_only(batches, manager.device))
    if not args.no_sequential:
        script = PlainScript(task, ckpts, manager.device, manager.dtype)
        if warm_clip is not None:
            measure_sequential(warm_clip, task, ckpts, manager.device, manager.dtype, work / "warm", script)
        frames_seq, seconds_seq = measure_sequential(clip, task, ckpts, manager.device, manager.dtype, work, script)
        figures["sequential"] = fps(frames_seq, seconds_seq)
        del script
    return figures, notes


def print_row(task: str, figures: dict, fullsize: bool) -> None:
    seq, model = figures.get("sequential"), figures["model"]
    vs_seq = f"{figures['ours'] / seq:6.2f}x" if seq else "     -"
    vs_model = f"{figures['ours'] / model:6.2f}x"
    mark_seq = "" if not seq or fullsize else ("  ok" if figures["ours"] / seq >= 3 else "  MISS")
    mark_model = ("  ok" if figures["ours"] / model >= 0.9 else "  MISS") if fullsize else ""
    print(f"{task:9} {figures['ours']:8.3g} {seq if seq else float('nan'):11.3g} {model:11.3g} "
          f"{vs_seq}{mark_seq:6} {vs_model}{mark_model}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=None, help="clip length (default 48; 4 with --fullsize)")
    parser.add_argument("--tasks", default=None, help=f"comma-separated from {','.join(TASKS)} "
                                                      "(default all; seg with --fullsize)")
    parser.add_argument("--fullsize", action="store_true", help="full-size 0.4b random-weight checkpoints")
    parser.add_argument("--batch-size", type=int, default=None, help="frames per model call (default: ours per device)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda")
    parser.add_argument("--no-sequential", action="store_true", help="skip the plain loop (slow at full size)")
    parser.add_argument("--breakdown", action="store_true", help="time the stages of our path per thread")
    parser.add_argument("--profile", action="store_true", help="cProfile top 15 of our path (one more run)")
    args = parser.parse_args()
    import torch

    from sapiens2_demo.models.manager import resolve_device
    from sapiens2_demo.pipelines.video import default_batch_size

    tasks = [t.strip() for t in (args.tasks or ("seg" if args.fullsize else ",".join(TASKS))).split(",") if t.strip()]
    unknown = set(tasks) - set(TASKS)
    if unknown:
        raise SystemExit(f"unknown task(s) {', '.join(sorted(unknown))}; choose from {', '.join(TASKS)}")
    frames = args.frames or (4 if args.fullsize else 48)
    device, dtype = resolve_device(args.device)
    args.batch_size = args.batch_size or default_batch_size(device)
    with tempfile.TemporaryDirectory(prefix="bench_video_") as tmp:
        work = Path(tmp)
        ckpts = tiny_checkpoints(work / "tiny")
        if args.fullsize:
            ckpts = fullsize_checkpoints(tasks, ckpts.detector)
        manager = make_manager(ckpts, device)
        clip = make_clip(work / f"clip_{frames}.mp4", frames)
        warm = None if args.fullsize and device == "cpu" else make_clip(work / "warm.mp4", 2 * args.batch_size)
        print(f"{ckpts.label} checkpoints on {device}/{str(dtype).replace('torch.', '')}; torch {torch.__version__}, "
              f"{torch.get_num_threads()} threads, {os.cpu_count()} CPUs; load {os.getloadavg()[0]:.2f}")
        print(f"clip: {frames} frames of 1280x720 at 24 fps with AAC audio; batch size {args.batch_size}"
              + ("" if warm else "; no warm-up run (one forward takes tens of seconds here)"))
        print("pose: detector + flip test in all three; normal/pointmap: + the body-part mask forward in all three")
        print(f"\n{'task':9} {'ours fps':>8} {'sequential':>11} {'model-only':>11} {'ours/seq':>8}{'':6} "
              f"{'ours/model':>10}")
        notes = []
        for task in tasks:
            figures, task_notes = bench_task(task, clip, warm, ckpts, manager, args, work)
            print_row(task, figures, args.fullsize)
            notes += task_notes
        if notes:
            print("\n" + "\n".join(notes))
        target = ("ours/model >= 0.9x (full-size 0.4b)" if args.fullsize else "ours/seq >= 3x (tiny checkpoints)")
        print(f"\ntarget: {target}; load at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()

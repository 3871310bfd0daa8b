"""Video speed per task on one 1280x720 clip with audio, against the machine's I/O floor (a script, not a test).

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False .venv/bin/python benchmarks/bench_video.py \
        [--frames 96] [--tasks pose,seg,normal,pointmap,matting] [--checkpoint-dir /tmp/sapiens2-tiny]
        [--content shapes|photo] [--root DIR] [--batch-size N] [--plain-frames 48] [--no-sequential]
        [--no-model-only] [--fullsize] [--device auto] [--breakdown] [--profile] [--set detect_every=1]
        [--overlap auto|on|off|both] [--switch-interval 0.005]

The clip (written here with PyAV): 1280x720 at 24 fps, moving shapes (tests/videos.py's pattern, what issue 15
measured on; --content photo: the astronaut photo panning), with a 440 Hz sine AAC track of the same length.
Per task, in one run, frames per second of:
- floor: the machine's I/O floor, no model: decode the same clip to RGB (PyAV, threaded decoder as ours) and
  encode it again with the app's encoder settings (libx264 yuv420p BT.709, preset superfast with the macroblock tree, CRF 20, faststart
  mp4), audio packets copied. Fixed here (plain PyAV, default encoder threading, as VideoSink today) so the
  package's own changes do not move it; measured right before and right after each task's run of ours (the
  mean of the two times), so load drift does not skew the ratio;
- ours: the `/video` endpoint's path, `process_video(path, task, manager_key, out_dir, **options)` with the
  Video tab's defaults (read from `ui.video_tab.run_video`'s signature when it imports), models loaded and
  warmed up first;
- by CPU: ours/floor in CPU time per frame (this process, all threads: time.process_time), a second view that
  other processes' load moves less than wall time; not a target;
- plain: the plain loop of the usual scripts, on the clip's first --plain-frames (48) frames, one at a time:
  decode (PyAV) -> transformers' Sapiens2ImageProcessor -> model -> simple post-processing -> simple render ->
  encode (same preset and CRF),
  no audio, no exports; the same model work as ours (detector + flip test for pose on a GPU, the body-part mask for
  normals and depth);
- model-only: the forwards alone on frames pre-processed beforehand, batched as ours (internal helpers: shown
  as "-" when the package moved them).
GPU boundary: `sapiens2_demo.gpu.infer` is wrapped to count its calls in the timed run (calls per clip), and,
in the warm-up run only (a separate 24-frame clip, so pickling costs nothing in the timed run), the pickled bytes
of its arguments and of its return value (`len(pickle.dumps(...))`), per frame, as a multiple of the frame's
uint8 RGB bytes (H*W*3).
Targets (issue 15, tiny checkpoints, this 2-core CPU): ours/floor >= 0.5 (seg, normal, pointmap), >= 0.35
(pose, matting); ours/plain >= 3; GPU calls <= ceil(frames / 12); bytes in+out <= 4x the RGB frame.
--root DIR imports `sapiens2_demo` from another checkout (e.g. an export of an older commit for BEFORE figures).
--breakdown adds where our path's time goes per thread; --profile prints cProfile's top 15 of its main thread.
--fullsize: full-size 0.4b random-weight checkpoints (~30 s a forward on a 2-core CPU; 4 frames of seg).
--checkpoint-dir takes either kind of tiny checkpoints: random weights (`python -m sapiens2_demo.standins DIR
--detector`, written there when missing) or the structured stand-ins (`... DIR --trained --detector`, issue 20);
the header names the folder: say which kind it holds when quoting figures.
--overlap: whether a GPU call runs each batch's post-processing, drawing and copy back beside the next batch's
forward (sapiens2_demo/overlap.py; `auto`: the app's default); `both` runs ours four times per task, one batch after the
other, overlapped, again each (the table's row is the first), and notes the best of each and their ratio.
The machine is shared and noisy: compare the ratios, measured in one run, never fps across runs; the load
average is printed on every row.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib
import inspect
import io
import math
import os
import pickle
import pstats
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

import numpy as np  # noqa: E402

TASKS = ("pose", "seg", "normal", "pointmap", "matting")
MASKED = ("normal", "pointmap")  # ours removes the background with the body-part segmentation by default
# the app's encoder settings (sapiens2_demo.media.video DEFAULT_CRF, DEFAULT_PRESET, PRESET_PARAMS), written out so that
# a --root of another checkout meets the same floor
CRF, PRESET, X264_PARAMS = "20", "superfast", "mbtree=1:rc-lookahead=10"
ENCODER_OPTIONS = {"crf": CRF, "preset": PRESET, "x264-params": X264_PARAMS}
TARGET_FLOOR = {"seg": 0.5, "normal": 0.5, "pointmap": 0.5, "pose": 0.35, "matting": 0.35}
TARGET_PLAIN = 3.0
MIN_CHUNK = 12  # frames per GPU call, at least (or the whole clip)
TARGET_BYTES = 4.0  # x the frame's uint8 RGB bytes, in and out together, per frame
BYTES_CLIP_FRAMES = 24  # the warm-up clip, on which the bytes crossing the GPU boundary are measured
DEFAULT_TINY = Path("/tmp/sapiens2-tiny")
# the Video tab's defaults today (ui/video_tab.py); its run_video signature overrides them when it imports
VIDEO_TAB_DEFAULTS = dict(size="0.4b", stride=1, detection_threshold=0.3, max_people=20, tracking=True,
                          smoothing=True, min_cutoff=0.2, beta=0.05, remove_background=True, raw_normals=False,
                          matting_background="colour", colour="#00b140")


def use_root(root: Path) -> None:
    """Import sapiens2_demo (and app) from `root` instead of this checkout; call before any such import."""
    global ROOT
    ROOT = Path(root).resolve()
    sys.path.insert(0, str(ROOT))


def load(attr: str, *modules: str):
    """`attr` from the first of `modules` that has it (the package is being restructured: entry points move)."""
    errors = []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as error:
            errors.append(f"{name}: {error}")
            continue
        if hasattr(module, attr):
            return getattr(module, attr)
        errors.append(f"{name} has no {attr}")
    raise ImportError(f"{attr} not found ({'; '.join(errors)})")


def _mod(*parts: str) -> str:
    """A module name of the package, spelt in parts so that a repo-wide rename (sed) leaves the fallbacks alone."""
    return ".".join(("sapiens2_demo",) + parts)


# where things live, newest layout first (the package is being restructured)
VIDEO_MODULES = (_mod("jobs", "video"), _mod("pipelines", "video"), _mod("video"))
POSE_MODULES = (_mod("pipelines", "pose"), _mod("pose", "pipeline"))


def load_average() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


@dataclass
class Checkpoints:
    dir: Path  # --checkpoint-dir layout
    detector: Path
    label: str  # "tiny" or "full-size 0.4b"


def tiny_checkpoints(root: Path = DEFAULT_TINY) -> Checkpoints:
    """The tiny random-weight checkpoints in `root`, written there with the package's own CLI when missing."""
    root = Path(root)
    if not (root / "yolov8n-random.pt").exists():
        subprocess.run([sys.executable, "-m", "sapiens2_demo.standins", str(root), "--detector"], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})
    quiet_transformers()
    return Checkpoints(root, root / "yolov8n-random.pt", "tiny")


def fullsize_checkpoints(tasks, detector: Path) -> Checkpoints:
    from fullsize import DEFAULT_DIR, FULLSIZE_TASKS, ensure_fullsize  # noqa: F401

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
    ModelManager = load("ModelManager", "sapiens2_demo.models.manager", "sapiens2_demo.models")
    return ModelManager(checkpoint_dir=ckpts.dir, device=device, dtype=dtype, detector=str(ckpts.detector), **extra)


# -- the clip ---------------------------------------------------------------------------------------------
AUDIO_RATE = 48_000


def clip_frame(i: int, frames: int, width: int, height: int, content: str, photo=None) -> np.ndarray:
    """Frame i of the clip: `shapes` (tests/videos.py's pattern: a blue ramp, a square moving corner to corner,
    a red marker top-left; what issue 15's figures were measured on) or `photo` (the astronaut panning)."""
    t = i / max(frames - 1, 1)
    if content == "photo":
        side = photo.shape[0]
        x, y = round((side - width) * t), round((side - height) * t)
        return np.ascontiguousarray(photo[y:y + height, x:x + width])
    img = np.zeros((height, width, 3), np.uint8)
    img[..., 2] = np.linspace(40, 120, width, dtype=np.uint8)[None, :]
    side = max(2, min(width, height) // 4)
    x, y = round((width - side) * t), round((height - side) * t)
    img[y:y + side, x:x + side] = (40 + (i * 37) % 200, 220, 60)
    m = max(2, min(width, height) // 6)
    img[:m, :m] = (255, 0, 0)
    return img


def make_clip(path: Path, frames: int, size=(1280, 720), fps: int = 24, content: str = "shapes") -> Path:
    """A (w, h) H.264 clip of `content` (see clip_frame) with a 440 Hz sine AAC track of the same length."""
    import av

    path = Path(path)
    if path.exists():
        return path
    width, height = size
    photo = None
    if content == "photo":
        import cv2

        photo = cv2.imread(str(Path(__file__).resolve().parent.parent / "assets" / "astronaut.jpg"))[..., ::-1]
        side = int(max(width, height) * 1.15)
        photo = cv2.resize(photo, (side, side), interpolation=cv2.INTER_CUBIC)
    tmp = path.with_name(f".{path.name}.partial.mp4")
    with av.open(str(tmp), "w", format="mp4") as out:
        video = out.add_stream("libx264", rate=fps, options={"crf": "18", "preset": "fast"})
        video.width, video.height, video.pix_fmt = width, height, "yuv420p"
        audio = out.add_stream("aac", rate=AUDIO_RATE, layout="mono")
        for i in range(frames):
            frame = av.VideoFrame.from_ndarray(clip_frame(i, frames, width, height, content, photo), format="rgb24")
            frame.pts, frame.time_base = i, Fraction(1, fps)
            out.mux(video.encode(frame))
        out.mux(video.encode())
        total = round(frames / fps * AUDIO_RATE)
        for start in range(0, total, 1024):
            n = min(1024, total - start)
            samples = (0.3 * np.sin(2 * np.pi * 440 * (start + np.arange(n)) / AUDIO_RATE)).astype(np.float32)
            chunk = av.AudioFrame.from_ndarray(samples[None, :], format="flt", layout="mono")
            chunk.sample_rate, chunk.pts, chunk.time_base = AUDIO_RATE, start, Fraction(1, AUDIO_RATE)
            out.mux(audio.encode(chunk))
        out.mux(audio.encode())
    os.replace(tmp, path)
    return path


def _size(task: str) -> str:
    return "1b" if task == "matting" else "0.4b"


def _sync(device) -> None:
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


# -- the I/O floor --------------------------------------------------------------------------------------------
def measure_floor(clip: Path, out: Path, drawn: list | None = None) -> tuple[int, float]:
    """(frames, seconds): decode to RGB and encode again with the app's settings, audio copied; no model.
    `drawn` (RGB arrays, one a frame, made beforehand): the encoder encodes these in place of the decoded frames
    (a task's rendered frames cost x264 more than the input's), the input still decoded."""
    import av

    started = time.perf_counter()
    count = 0
    with av.open(str(clip)) as source, av.open(str(out), "w", format="mp4",
                                              options={"movflags": "+faststart"}) as sink:
        stream = source.streams.video[0]
        stream.thread_type = "AUTO"  # as the app's reader
        rate = Fraction(stream.average_rate or 24).limit_denominator(1001)
        encoder = sink.add_stream("libx264", rate=rate, options=dict(ENCODER_OPTIONS))
        height, width = drawn[0].shape[:2] if drawn else (stream.height, stream.width)
        encoder.width, encoder.height, encoder.pix_fmt = width, height, "yuv420p"
        cc = encoder.codec_context
        cc.colorspace = cc.color_primaries = cc.color_trc = cc.color_range = 1  # BT.709 limited, as VideoSink
        audio_in = source.streams.audio[0] if source.streams.audio else None
        audio_out = sink.add_stream_from_template(audio_in) if audio_in is not None else None
        for packet in source.demux(*[s for s in (stream, audio_in) if s is not None]):
            if packet.stream is audio_in:
                if packet.dts is not None:
                    packet.stream = audio_out
                    sink.mux(packet)
                continue
            for frame in packet.decode():
                rgb = frame.to_ndarray(format="rgb24")
                if drawn:
                    rgb = drawn[count % len(drawn)]
                picture = av.VideoFrame.from_ndarray(rgb, format="rgb24").reformat(
                    format="yuv420p", dst_colorspace="ITU709", dst_color_range="MPEG")
                picture.pts, picture.time_base = count, 1 / rate
                sink.mux(encoder.encode(picture))
                count += 1
        sink.mux(encoder.encode())
    return count, time.perf_counter() - started


def flips(device) -> bool:
    """Whether pose runs the flip test: the pose option's default on `device`, as our video job takes it."""
    get = load("get", _mod("tasks"))
    return bool(get("pose").defaults(str(device))["flip_test"])


# -- ours -----------------------------------------------------------------------------------------------
def video_tab_options() -> dict:
    """The options the Video tab passes to the video job by default (its handler's signature when it imports)."""
    options = dict(VIDEO_TAB_DEFAULTS)
    try:
        run_video = load("run_video", "sapiens2_demo.ui.video_tab")
    except ImportError:
        return options
    for name, parameter in inspect.signature(run_video).parameters.items():
        if name in options and parameter.default is not inspect.Parameter.empty:
            options[name] = parameter.default
    return {**options, **OVERRIDES}


OVERRIDES: dict = {}  # --set NAME=VALUE: the Video tab's options changed (e.g. detect_every=1)


def default_batch(device) -> int:
    try:
        return load("default_batch_size", *VIDEO_MODULES)(device)
    except ImportError:
        return 8 if str(device).startswith("cuda") else 2


class GpuCalls:
    """Wraps `sapiens2_demo.gpu.infer`: counts calls, and with `measure_bytes` the pickled bytes each way. A local
    video's chunks streamed as one pipeline (`gpu.stream`) count a call each: ZeroGPU's calls."""

    def __init__(self, measure_bytes: bool = False):
        self.measure_bytes = measure_bytes
        self.calls = self.bytes_in = self.bytes_out = 0
        self.unpicklable = 0
        self._gpu = self._original = None

    def __enter__(self) -> GpuCalls:
        from sapiens2_demo import gpu

        self._gpu, self._original = gpu, gpu.infer
        original = self._original

        def counted(*args, **kwargs):
            result = original(*args, **kwargs)
            self.calls += 1
            if self.measure_bytes:
                try:
                    self.bytes_in += len(pickle.dumps((args, kwargs)))
                    self.bytes_out += len(pickle.dumps(result))
                except Exception:  # noqa: BLE001 - an unpicklable answer is itself a finding
                    self.unpicklable += 1
            return result

        gpu.infer = counted
        self._stream = getattr(gpu, "stream", None)
        if self._stream is not None:
            streamed = self._stream

            def chunks(*args, **kwargs):
                for answered in streamed(*args, **kwargs):
                    self.calls += 1
                    yield answered

            gpu.stream = chunks
        return self

    def __exit__(self, *exc) -> None:
        self._gpu.infer = self._original
        if self._stream is not None:
            self._gpu.stream = self._stream


OVERLAP = {"auto": None, "on": "1", "off": "0"}  # --overlap: gpu.OVERLAP for ours (None: the package's default)
OVERLAP_MODE: str | None = None


def measure_ours(clip: Path, task: str, manager, out_dir: Path, batch_size: int | None = None,
                 counter: GpuCalls | None = None, overlap: str | None = None) -> tuple[int, float]:
    """(frames, seconds) of the `/video` path with the models already loaded; GPU calls counted into `counter`;
    `overlap` ("1" / "0"): gpu.OVERLAP for this run (None, or an older checkout: as the package has it)."""
    from sapiens2_demo import gpu

    overlap = overlap or OVERLAP_MODE
    if overlap is not None and hasattr(gpu, "OVERLAP"):
        gpu.OVERLAP = overlap

    process_video = load("process_video", *VIDEO_MODULES)
    options = video_tab_options()
    options["batch_size"] = batch_size or default_batch(manager.device)
    key = gpu.register(manager)
    counting = counter or GpuCalls()
    with counting:
        started = time.perf_counter()
        out = process_video(clip, task, key, out_dir, **options)
        seconds = time.perf_counter() - started
    return out.frames, seconds


def load_models(manager, task: str) -> None:
    checkpoint = load("checkpoint", "sapiens2_demo.models.registry", "sapiens2_demo.models")
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

    def run(self, clip: Path, out: Path, max_frames: int | None = None) -> int:
        import av
        import torch

        count = 0
        with av.open(str(clip)) as source, av.open(str(out), "w") as sink:
            stream = source.streams.video[0]
            encoder = sink.add_stream("libx264", rate=stream.average_rate)
            encoder.width, encoder.height, encoder.pix_fmt = stream.width, stream.height, "yuv420p"
            encoder.options = dict(ENCODER_OPTIONS)
            with torch.inference_mode():
                for frame in source.decode(stream):
                    if max_frames and count >= max_frames:
                        break
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
        heatmaps = self.model(pixel_values=pixels).heatmaps.float()
        if flips(self.device):
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
                       script: PlainScript | None = None, max_frames: int | None = None) -> tuple[int, float]:
    script = script or PlainScript(task, ckpts, device, dtype)
    out_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    frames = script.run(clip, out_dir / f"sequential_{task}.mp4", max_frames)
    _sync(device)
    return frames, time.perf_counter() - started


# -- model only ---------------------------------------------------------------------------------------------
def prepared_batches(clip: Path, task: str, manager, batch_size: int) -> list[list]:
    """Per batch of frames, the (loaded model, pixel_values, kwargs) forwards our path makes, prepared ahead."""
    preprocess = load("preprocess", _mod("models", "inference"))
    checkpoint = load("checkpoint", _mod("models", "registry"))
    read_frames = load("read_frames", _mod("media", "video"))
    VideoLimits = load("VideoLimits", *VIDEO_MODULES)
    xyxy_to_xywh = load("xyxy_to_xywh", _mod("pose", "boxes"))
    find_people = load("find_people", _mod("pose", "detector"))
    model_flip_pairs = load("model_flip_pairs", *POSE_MODULES)

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
            calls.append((loaded, pixels, {}))
            if flips(manager.device):
                pairs = model_flip_pairs(loaded.model).to(pixels.device)
                calls.append((loaded, pixels.flip(-1), {"flip_pairs": pairs}))  # flip test
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
        self.missing: list[str] = []

    def _add(self, label: str, started: float) -> None:
        with self._lock:
            self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - started

    def wrap(self, owner, name: str, label: str, generator: bool = False) -> None:
        """Time calls of owner.name; a generator function: the work per item, not the time between items."""
        original = getattr(owner, name, None)
        if original is None:  # moved by a refactor: that stage is not timed
            self.missing.append(f"{getattr(owner, '__name__', owner)}.{name}")
            return

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

    def install(self) -> StageClock:
        def module(*names):
            for name in names:
                try:
                    return importlib.import_module(name)
                except ImportError:
                    continue
            self.missing.append(" or ".join(names))
            return None

        gpu = module("sapiens2_demo.gpu")
        dense = module("sapiens2_demo.pipelines.dense")
        pose = module(*POSE_MODULES)
        video = module(*VIDEO_MODULES)
        media = module("sapiens2_demo.media.video")
        if gpu:
            self.wrap(gpu, "infer", "main: gpu.infer (pre + forward + post)")
        if dense:
            self.wrap(dense, "preprocess", "main:   preprocess (dense)")
        for part in filter(None, (dense, pose)):
            self.wrap(part, "forward", f"main:   forward ({part.__name__.rsplit('.', 1)[1]})")
        if pose:  # pose cuts its crops itself (models/crops.py), where the processor did before
            self.wrap(pose, "crop_people" if hasattr(pose, "crop_people") else "preprocess", "main:   crops (pose)")
            self.wrap(pose, "detect_batch", "main:   detector (pose)")
        if video:
            self.wrap(getattr(video, "VideoJob", None), "_track", "main: tracking + smoothing (pose)")
        if media:
            self.wrap(media, "read_frames", "decode thread: decode + to RGB (read_frames)", generator=True)
            self.wrap(media.VideoSink, "write", "writer thread: encode + mux, every VideoSink (exports' too)")
        threads = module("sapiens2_demo.jobs.video_threads")  # the decoder and writer around the model
        writer = getattr(threads, "Writer", None) if threads else None
        if writer is not None:  # each task's renderer and per-frame export, timed on the writer's instances
            self.wrap(writer, "put", "main: waiting for the writer (queue full)")
            clock, original_init = self, writer.__init__

            def init(self, renderers, titles, sink, exports, *args, **kwargs):
                original_init(self, renderers, titles, sink, exports, *args, **kwargs)
                for task, renderer in getattr(self, "renderers", {}).items():
                    clock.wrap(renderer, "annotate", f"writer thread: render ({task})")
                for task, export in getattr(self, "exports", {}).items():
                    clock.wrap(export, "add", f"writer thread: per-frame exports ({task})")

            writer.__init__ = init
            self._undo.append((writer, "__init__", original_init))
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
        if self.missing:
            lines.append(f"    not timed (moved by the refactor): {', '.join(self.missing)}")
        forward = sum(v for label, v in seconds.items() if label.startswith("main:   forward"))
        lines.append(f"    Sapiens2 forward busy {forward / wall:.1%} of the wall time: ours/model-only measured inside "
                     "this one run, immune to load changing between runs (the table's ratio is not)")
        return lines


# -- the run ---------------------------------------------------------------------------------------------------
def fps(frames: int, seconds: float) -> float:
    return frames / max(seconds, 1e-9)


def timed_ours(*args, **kwargs) -> tuple[int, float]:
    """`measure_ours` for the timed run: its own name, so that a profiler's samples of it (py-spy's) are told from the
    warm-up's."""
    return measure_ours(*args, **kwargs)


def bench_task(task, clip, warm_clip, ckpts, manager, args, work: Path) -> tuple[dict, list[str]]:
    """One task's figures (fps of floor / ours / plain / model-only, GPU calls and bytes) and notes to print."""
    load_models(manager, task)
    figures, notes = {"load_start": load_average()}, []
    if warm_clip is not None:  # first-call costs out of the timings; the bytes crossing the boundary measured here
        sizing = GpuCalls(measure_bytes=True)
        import sapiens2_demo.gpu as gpu_module

        crosses = getattr(gpu_module, "CROSSES_PROCESSES", True)
        gpu_module.CROSSES_PROCESSES = True  # what ZeroGPU pickles (a local launch skips the float16 packing)
        try:
            frames_warm, _ = measure_ours(warm_clip, task, manager, work / f"warm_{task}", args.batch_size, sizing)
        finally:
            gpu_module.CROSSES_PROCESSES = crosses
        frame_bytes = 1280 * 720 * 3  # the clip's frames, processed at their size (max side 1280)
        figures["bytes_in"] = sizing.bytes_in / frames_warm / frame_bytes
        figures["bytes_out"] = sizing.bytes_out / frames_warm / frame_bytes
        if sizing.unpicklable:
            notes.append(f"{task}: {sizing.unpicklable} GPU call(s) returned something pickle cannot write")
    cpu = time.process_time()
    frames_floor, before = measure_floor(clip, work / f"floor_{task}.mp4")
    floor_cpu = time.process_time() - cpu
    if args.breakdown:
        clock = StageClock().install()
    counter = GpuCalls()
    cpu = time.process_time()
    try:
        frames, seconds = timed_ours(clip, task, manager, work / f"ours_{task}", args.batch_size, counter,
                                       "0" if args.overlap == "both" else None)
        ours_cpu = time.process_time() - cpu
        if args.overlap == "both":  # overlapped and not, alternating twice more, the best of each (load drifts)
            serial, overlapped = [seconds], []
            for mode in ("1", "0", "1"):
                taken = measure_ours(clip, task, manager, work / f"ours_{task}_{mode}", args.batch_size, None,
                                     mode)[1]
                (overlapped if mode == "1" else serial).append(taken)
            notes.append(f"{task}: overlapped {fps(frames, min(overlapped)):.3g} frames/s, one batch after the "
                         f"other {fps(frames, min(serial)):.3g} frames/s (best of 2 each, alternating): "
                         f"{min(serial) / min(overlapped):.2f}x (load {load_average()})")
    finally:
        if args.breakdown:
            clock.remove()
    figures["ours"], figures["calls"], figures["frames"] = fps(frames, seconds), counter.calls, frames
    cpu = time.process_time()
    _, after = measure_floor(clip, work / f"floor_{task}.mp4")  # the floor brackets ours: load drift evens out
    floor_cpu = (floor_cpu + time.process_time() - cpu) / 2
    figures["floor"] = fps(frames_floor, (before + after) / 2)
    figures["cpu_ratio"] = (floor_cpu / frames_floor) / max(ours_cpu / max(frames, 1), 1e-9)
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
    if not args.no_sequential:
        try:
            script = PlainScript(task, ckpts, manager.device, manager.dtype)
            if warm_clip is not None:  # a few frames: the first-call costs, not the 24-frame bytes clip
                short = make_clip(work / "warm_short.mp4", 4, content=getattr(args, "content", "shapes"))
                measure_sequential(short, task, ckpts, manager.device, manager.dtype, work / "warm", script)
            figures["sequential"] = fps(*measure_sequential(clip, task, ckpts, manager.device, manager.dtype, work,
                                                            script, args.plain_frames))
            del script
        except Exception as error:  # noqa: BLE001 - it leans on the registry's layout; say so and go on
            notes.append(f"{task}: plain loop skipped ({type(error).__name__}: {error})")
    if not args.no_model_only:
        try:
            batches = prepared_batches(clip, task, manager, args.batch_size or default_batch(manager.device))
            if warm_clip is not None:
                measure_model_only(batches[:1], manager.device)
            figures["model"] = fps(*measure_model_only(batches, manager.device))
        except Exception as error:  # noqa: BLE001 - internal helpers: they move with the package
            notes.append(f"{task}: model-only skipped ({type(error).__name__}: {error})")
    figures["load_end"] = load_average()
    return figures, notes


def _mark(ok: bool | None) -> str:
    return "" if ok is None else (" ok" if ok else " MISS")


def print_header(frames: int) -> None:
    print(f"\n{'task':9} {'ours fps':>8} {'floor fps':>9} {'ours/floor':>15} {'by CPU':>6} {'plain fps':>9} {'ours/plain':>14} "
          f"{'model fps':>9} {'GPU calls':>14} {'bytes/frame (x RGB)':>26}  load (1/5/15 min) at start / end")
    print(f"{'':9} {'':8} {'':9} {'(target)':>15} {'':6} {'':9} {'(target 3x)':>14} {'':9} "
          f"{f'(<= {math.ceil(frames / MIN_CHUNK)})':>14} {'in + out = total (<= 4x)':>26}")


def print_row(task: str, f: dict, fullsize: bool) -> None:
    ours, floor, seq, model = f["ours"], f["floor"], f.get("sequential"), f.get("model")
    target = TARGET_FLOOR[task]
    vs_floor = f"{ours / floor:5.2f}x ({target:.2f}){_mark(None if fullsize else ours / floor >= target)}"
    vs_seq = f"{ours / seq:5.2f}x{_mark(None if fullsize else ours / seq >= TARGET_PLAIN)}" if seq else "-"
    calls = (f"{f['calls']}{_mark(f['calls'] <= math.ceil(f['frames'] / MIN_CHUNK))}" if f["calls"]
             else "0: not gpu.infer?")
    if "bytes_in" in f:
        total = f["bytes_in"] + f["bytes_out"]
        crossing = f"{f['bytes_in']:.2f} + {f['bytes_out']:.2f} = {total:.2f}{_mark(total <= TARGET_BYTES)}"
    else:
        crossing = "- (no warm-up run)"
    print(f"{task:9} {ours:8.3g} {floor:9.3g} {vs_floor:>15} {f['cpu_ratio']:5.2f}x {seq if seq else float('nan'):9.3g} "
          f"{vs_seq:>14} "
          f"{model if model else float('nan'):9.3g} {calls:>14} {crossing:>26}  {f['load_start']} / {f['load_end']}",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=None, help="clip length (default 96; 4 with --fullsize)")
    parser.add_argument("--tasks", default=None, help=f"comma-separated from {','.join(TASKS)} "
                                                      "(default all; seg with --fullsize)")
    parser.add_argument("--checkpoint-dir", type=Path, default=DEFAULT_TINY,
                        help="tiny checkpoints (written there with `python -m sapiens2_demo.standins` if missing)")
    parser.add_argument("--content", choices=("shapes", "photo"), default="shapes",
                        help="the clip: moving shapes (as issue 15 measured) or the astronaut photo panning")
    parser.add_argument("--root", type=Path, default=None, help="import sapiens2_demo from this checkout")
    parser.add_argument("--fullsize", action="store_true", help="full-size 0.4b random-weight checkpoints")
    parser.add_argument("--batch-size", type=int, default=None, help="frames per model call (default: the app's)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda")
    parser.add_argument("--no-sequential", action="store_true", help="skip the plain loop (slow at full size)")
    parser.add_argument("--plain-frames", type=int, default=48,
                        help="the plain loop runs on the clip's first N frames (its fps is steady; 0: all)")
    parser.add_argument("--no-model-only", action="store_true", help="skip the model-only column")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="change one of the Video tab's options for ours, e.g. --set detect_every=1 (a number "
                             "or true/false)")
    parser.add_argument("--breakdown", action="store_true", help="time the stages of our path per thread")
    parser.add_argument("--profile", action="store_true", help="cProfile top 15 of our path (one more run)")
    parser.add_argument("--overlap", choices=("auto", "on", "off", "both"), default="auto",
                        help="batches overlapped in a GPU call (gpu.OVERLAP); both: ours twice, and their ratio")
    parser.add_argument("--switch-interval", type=float, default=None, metavar="SECONDS",
                        help="sys.setswitchinterval for the whole run (Python's default 0.005): how long a thread "
                             "that wants the GIL waits for the one holding it")
    args = parser.parse_args()
    if args.switch_interval:
        sys.setswitchinterval(args.switch_interval)
    for item in args.set:
        name, _, value = item.partition("=")
        lowered = value.strip().lower()
        OVERRIDES[name.strip()] = (lowered == "true" if lowered in ("true", "false")
                                   else float(value) if "." in value else int(value))
    global OVERLAP_MODE
    OVERLAP_MODE = OVERLAP.get(args.overlap)
    if args.root:
        use_root(args.root)
    import torch

    resolve_device = load("resolve_device", "sapiens2_demo.models.manager", "sapiens2_demo.models.device")
    tasks = [t.strip() for t in (args.tasks or ("seg" if args.fullsize else ",".join(TASKS))).split(",") if t.strip()]
    unknown = set(tasks) - set(TASKS)
    if unknown:
        raise SystemExit(f"unknown task(s) {', '.join(sorted(unknown))}; choose from {', '.join(TASKS)}")
    frames = args.frames or (4 if args.fullsize else 96)
    device, dtype = resolve_device(args.device)
    with tempfile.TemporaryDirectory(prefix="bench_video_") as tmp:
        work = Path(tmp)
        ckpts = tiny_checkpoints(args.checkpoint_dir)
        if args.fullsize:
            ckpts = fullsize_checkpoints(tasks, ckpts.detector)
        manager = make_manager(ckpts, device)
        clip = make_clip(work / f"clip_{frames}.mp4", frames, content=args.content)
        warm = (None if args.fullsize and device == "cpu"
                else make_clip(work / "warm.mp4", BYTES_CLIP_FRAMES, content=args.content))
        measure_floor(warm or clip, work / "floor_warm.mp4")  # x264's first use out of the timings
        options = video_tab_options()
        print(f"sapiens2_demo from {ROOT}; {ckpts.label} checkpoints ({ckpts.dir}) on "
              f"{device}/{str(dtype).replace('torch.', '')}; overlap {args.overlap}; "
              f"torch {torch.__version__}, {torch.get_num_threads()} threads, {os.cpu_count()} CPUs; "
              f"GIL switch interval {1000 * sys.getswitchinterval():g} ms; load {load_average()}")
        print(f"clip: {frames} frames of 1280x720 at 24 fps ({args.content}) with AAC audio; batch size "
              f"{args.batch_size or default_batch(device)} (the app's default on {device} unless --batch-size)")
        print(f"ours: process_video with the Video tab's defaults {options}")
        print("floor: decode to RGB + libx264 superfast (mbtree, lookahead 10) CRF 20 yuv420p, audio copied, no model; measured just "
              "before and after each task's run of ours")
        print("plain/model-only: pose: detector + flip test (on a GPU); normal/pointmap: + the body-part mask forward")
        print("bytes: pickled gpu.infer arguments + return value per frame, on the "
              f"{BYTES_CLIP_FRAMES}-frame warm-up clip")
        print_header(frames)
        notes = []
        for task in tasks:
            try:
                figures, task_notes = bench_task(task, clip, warm, ckpts, manager, args, work)
            except Exception as error:  # noqa: BLE001 - a task that fails is a finding: say so, go on
                message = f"{type(error).__name__}: {error}".splitlines()[0]
                print(f"{task:9} FAILED in our path: {message}  (load {load_average()})", flush=True)
                notes.append(f"{task}: failed:\n" + "".join(traceback.format_exception(error)[-6:]))
                continue
            print_row(task, figures, args.fullsize)
            notes += task_notes
        if notes:
            print("\n" + "\n".join(notes))
        print(f"\ntargets (issue 15): ours/floor >= 0.5 (seg, normal, pointmap) / 0.35 (pose, matting); ours/plain "
              f">= 3x; GPU calls <= ceil(frames/{MIN_CHUNK}); bytes in+out <= {TARGET_BYTES:g}x RGB per frame. "
              f"load at the end {load_average()}")


if __name__ == "__main__":
    main()

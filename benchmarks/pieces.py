"""The pieces around a forward, each alone: pose's decode on each road, post-processing numpy against torch,
pictures drawn on the host against the device, the person detector's CPU roads.

    python -m benchmarks pose [--people 3] [--frames 8] [--road host|device] [--force-reference]
    python -m benchmarks post | draw [--device cuda] | detector [--detector yolo26n.yaml]
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import tempfile
import time
from functools import partial
from pathlib import Path
from unittest import mock

import numpy as np
import torch

from benchmarks import harness
from sapiens2_demo.pipelines import device_post
from sapiens2_demo.pipelines.postprocess import (
    postprocess_matting,
    postprocess_normals,
    postprocess_pointmap,
    upsample_labels,
)
from sapiens2_demo.pose.decode import decode_heatmaps

# -- pose ----------------------------------------------------------------------------------------------------------
HEATMAP = (308, 256, 192)
INPUT = (1024, 768)


def model_like_heatmaps(people: int, seed: int = 0) -> np.ndarray:
    """Sigma-6 Gaussian peaks (the training target's width) of varied height plus a little noise."""
    rng = np.random.default_rng(seed)
    k, h, w = HEATMAP
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    out = np.empty((people, k, h, w), np.float32)
    for p in range(people):
        cx = rng.uniform(0, w, (k, 1, 1)).astype(np.float32)
        cy = rng.uniform(0, h, (k, 1, 1)).astype(np.float32)
        amp = rng.uniform(0.05, 1.0, (k, 1, 1)).astype(np.float32)
        out[p] = amp * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 72.0)
        out[p] += rng.normal(0, 0.01, (k, h, w)).astype(np.float32)
    return out


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def best_of(fn, repeat: int, device: str = "cpu") -> float:
    times = []
    for _ in range(repeat):
        synchronize(device)
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    return min(times)


def bench_decode(repeat: int, people_counts: list[int], device: str, force_reference: bool) -> None:
    from transformers import Sapiens2ImageProcessor
    from transformers.models.sapiens2.modeling_sapiens2 import Sapiens2PoseEstimatorOutput

    from sapiens2_demo.pipelines.device_post import pose_keypoints
    from sapiens2_demo.pose.decode import decode_heatmaps

    processor = Sapiens2ImageProcessor(size={"height": INPUT[0], "width": INPUT[1]})
    print(f"== decode: {HEATMAP[0]}x{HEATMAP[1]}x{HEATMAP[2]} heatmaps per person on {device}, "
          f"{torch.get_num_threads()} torch threads, force_reference={force_reference}; best of {repeat}")
    print(f"{'heatmaps':<12}{'people':>7}{'host road (s)':>15}{'device road (s)':>17}{'transformers (s)':>18}"
          f"{'max |dx| px host/device':>26}")
    for kind in ("model-like", "uniform"):
        for people in people_counts:
            if kind == "model-like":
                heatmaps = model_like_heatmaps(people)
            else:
                heatmaps = np.random.default_rng(1).random((people, *HEATMAP), dtype=np.float32)
            boxes = np.array([[10 + 40 * i, 20, 300 + 40 * i, 700] for i in range(people)], np.float32)
            xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], 1).tolist()
            tensor = torch.from_numpy(heatmaps).to(device)
            host = partial(decode_heatmaps, tensor, boxes, INPUT, force_reference=force_reference)
            on_device = partial(pose_keypoints, tensor, boxes, INPUT, force_reference=force_reference)

            def theirs(t=tensor, xywh=xywh):
                return processor.post_process_pose_estimation(Sapiens2PoseEstimatorOutput(heatmaps=t), boxes=[xywh])

            times = [best_of(host, repeat, device), best_of(on_device, repeat, device),
                     best_of(theirs, max(1, repeat // 2), device)]
            ref = theirs()[0]
            diffs = [max(float(np.abs(got[i] - r["keypoints"].cpu().numpy()).max()) for i, r in enumerate(ref))
                     for got in (host()[0], on_device()[0])]
            print(f"{kind:<12}{people:>7}{times[0]:>15.4f}{times[1]:>17.4f}{times[2]:>18.3f}"
                  f"{diffs[0]:>16.2e}/{diffs[1]:.2e}")
            del heatmaps, tensor


def astronaut_frame() -> np.ndarray:
    """The astronaut photo scaled to 720x720 on a grey 1280x720 frame."""
    import cv2
    from PIL import Image

    photo = np.asarray(Image.open(Path(__file__).resolve().parent.parent / "assets" / "astronaut.jpg").convert("RGB"))
    frame = np.full((720, 1280, 3), 128, np.uint8)
    frame[:, 280:1000] = cv2.resize(photo, (720, 720), interpolation=cv2.INTER_LINEAR)
    return frame


def fixed_boxes(people: int) -> np.ndarray:
    """`people` boxes around the astronaut (x 320-800 of the frame), each a little smaller than the last."""
    return np.array([[320 + 6 * i, 10 + 4 * i, 800 - 6 * i, 720 - 4 * i] for i in range(people)], np.float32)


def bench_pipeline(args) -> None:
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.pipelines import device_post
    from sapiens2_demo.pipelines import pose as pipeline
    from sapiens2_demo.pipelines.pose import Detections, estimate_pose_batch
    from sapiens2_demo.standins.tiny import write_all

    scratch = tempfile.TemporaryDirectory()
    root = args.checkpoint_dir
    if root is None:
        root = Path(scratch.name)
        write_all(root, {"pose": ("0.4b",)})
    kind = "stand-ins (not models)" if (Path(root) / "STANDINS.txt").exists() else "checkpoints"
    manager = ModelManager(checkpoint_dir=root, device=args.device, dtype=args.dtype)
    frames = [astronaut_frame()] * args.frames
    boxes = fixed_boxes(args.people)
    detections = [Detections(boxes, np.ones(len(boxes), np.float32)) for _ in frames]
    copied = []

    def host_road(heatmaps, *a, **kw):
        copied.append(heatmaps.numel() * heatmaps.element_size())  # .cpu() of every heatmap (nothing on a CPU)
        return real_host(heatmaps, *a, force_reference=args.force_reference, **kw)

    def to_host(tensors):
        copied.append(sum(t.numel() * t.element_size() for t in tensors))
        return real_to_host(tensors)

    real_host, real_to_host = pipeline.decode_heatmaps, device_post.to_host
    real_device = device_post.pose_keypoints
    road = args.road if args.road != "auto" else ("device" if device_post.use_device_post(manager.device) else "host")
    patches = [mock.patch.object(pipeline, "decode_heatmaps", host_road),
               mock.patch.object(device_post, "to_host", to_host),
               mock.patch.object(device_post, "pose_keypoints",
                                 partial(real_device, force_reference=args.force_reference)),
               mock.patch.object(device_post, "use_device_post", lambda device: road == "device")]
    for patch in patches:
        patch.start()
    try:
        estimate_pose_batch(frames, manager, detections=detections, batch_size=args.batch_size)  # warm-up
        runs = []
        for _ in range(args.repeat):
            copied.clear()
            timings = {}
            estimate_pose_batch(frames, manager, detections=detections, batch_size=args.batch_size, timings=timings)
            runs.append((timings, sum(copied)))
    finally:
        for patch in patches:
            patch.stop()
        scratch.cleanup()
    persons = args.frames * args.people
    forward = statistics.median(t["forward"] for t, _ in runs) * 1000 / persons
    decode = statistics.median(t["decode"] for t, _ in runs) * 1000 / persons
    crop = statistics.median(t["crop"] for t, _ in runs) * 1000 / persons
    print(f"\n== pipeline: {kind} at {root}, {manager.device} {args.dtype}, {args.frames} frames of 1280x720 with "
          f"{args.people} fixed boxes, flip test, batch {args.batch_size}, {road} road, "
          f"force_reference={args.force_reference}; median of {args.repeat}")
    print(f"per person: crop {crop:.2f} ms, forward {forward:.2f} ms, decode {decode:.2f} ms "
          f"(decode/forward {decode / forward:.2f}), bytes off the device {runs[0][1] / persons:,.0f}")


def pose(argv: list[str], run: harness.Run) -> None:
    """Pose's decode and pipeline: real-size 308x256x192 heatmaps (model-like and noise) decoded on the host road, the
    device road (only keypoints cross) and by transformers, with the largest difference to transformers; then
    estimate_pose_batch on --frames 720p frames with --people fixed boxes, flip test on: forward and decode ms and the
    bytes off the device a person. --force-reference: every map down the full blur; --road host|device."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks pose", description=pose.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--people", type=int, default=10)
    parser.add_argument("--frames", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default="cpu", help="cpu, cuda")
    parser.add_argument("--dtype", default=None, help="float32 (CPU default), bfloat16 (CUDA default)")
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="checkpoints for the pipeline (default: tiny random weights in a temporary folder)")
    parser.add_argument("--force-reference", action="store_true", help="every keypoint map down the slow path")
    parser.add_argument("--road", choices=("auto", "host", "device"), default="auto")
    parser.add_argument("--skip-decode", action="store_true")
    parser.add_argument("--skip-pipeline", action="store_true")
    args = parser.parse_args(argv)
    args.dtype = args.dtype or ("bfloat16" if args.device.startswith("cuda") else "float32")
    if not args.skip_decode:
        bench_decode(args.repeat, sorted({1, args.people}), args.device, args.force_reference)
    if not args.skip_pipeline:
        bench_pipeline(args)


# -- post ----------------------------------------------------------------------------------------------------------
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


def smooth_field(channels: int, grid: tuple[int, int], amplitude: float, seed: int) -> np.ndarray:
    """A smooth random map at the model's input size, as a model's maps are (not noise)."""
    import torch.nn.functional as F

    coarse = torch.from_numpy(np.random.default_rng(seed).standard_normal((1, channels, *grid)).astype(np.float32))
    return F.interpolate(coarse * amplitude, size=INPUT_HW, mode="bicubic", align_corners=False)[0].numpy()


def dense_cases(device: str):
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, np.float32))[None].to(device)  # noqa: E731
    logits, normals = t(8 * smooth_field(29, (32, 24), 1.0, seed=2)), t(smooth_field(3, (16, 12), 1.0, seed=3))
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


def post(argv: list[str], run: harness.Run) -> None:
    """Post-processing, numpy / cv2 (pipelines/postprocess.py, pose.decode) against torch (pipelines/device_post.py), ms a
    call on synthetic outputs at the released sizes (smooth 1024x768 maps to a 1080x1920 image; 308x256x192 heatmaps
    for 1 and 10 people), each path's copies included, best of --repeat."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks post", description=post.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
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


# -- draw ----------------------------------------------------------------------------------------------------------
TASKS = {"segment": {}, "normals": {"remove_background": True}, "pointmap": {"remove_background": True}, "matting": {}}


def draw(argv: list[str], run: harness.Run) -> None:
    """Video pictures drawn on the host (results back, then the renderer) against where the model runs (TaskSpec.draw:
    one uint8 picture back a frame): ms a 1280x720 frame of gpu.answers + drawing, best of --repeat, and the bytes back
    a frame against the frame's RGB bytes."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks draw", description=draw.__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--checkpoint-dir", default=str(harness.TINY))
    parser.add_argument("--frames", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from sapiens2_demo import gpu, tasks
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.pipelines import device_post
    from sapiens2_demo.results import Job

    harness.tiny_checkpoints(Path(args.checkpoint_dir))
    manager = ModelManager(args.checkpoint_dir, device=args.device)
    key = gpu.register(manager)
    rng = np.random.default_rng(0)
    base = np.zeros((720, 1280, 3), np.uint8)
    base[100:650, 500:800] = (200, 150, 120)  # a person-sized block over a plain background
    frames = [np.clip(base + rng.integers(0, 20, base.shape), 0, 255).astype(np.uint8) for _ in range(args.frames)]
    rgb_bytes = frames[0].nbytes
    print(f"{args.frames} frames of 1280x720, batch {args.batch_size}, device {manager.device}; "
          f"load {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"{'task':10s} {'host ms/frame':>14s} {'device ms/frame':>16s} {'host/device':>12s} "
          f"{'bytes back host':>16s} {'device':>7s}")
    real_switch = device_post.use_device_post
    for name, options in TASKS.items():
        spec = tasks.get(name)
        job = spec.job(None, options)
        drawn_job = Job(job.task, job.size, {**job.options, "draw": dict(options)})
        renderer = spec.renderer(**options)

        def host():
            [results] = gpu.answers(key, frames, [job], args.batch_size)
            return [renderer.annotate(f, r) for f, r in zip(frames, results)], results

        def device():
            device_post.use_device_post = lambda _device: True
            try:
                [results] = gpu.answers(key, frames, [drawn_job], args.batch_size)
            finally:
                device_post.use_device_post = real_switch
            return [r.image for r in results], results

        timings = {}
        back = {}
        for label, run in (("host", host), ("device", device)):
            run()  # warm up: models loaded
            best = float("inf")
            for _ in range(args.repeat):
                started = time.perf_counter()
                _, results = run()
                best = min(best, time.perf_counter() - started)
            timings[label] = best * 1000 / args.frames
            back[label] = len(pickle.dumps(results[0])) / rgb_bytes
        print(f"{name:10s} {timings['host']:14.1f} {timings['device']:16.1f} "
              f"{timings['host'] / timings['device']:11.2f}x {back['host']:15.2f}x {back['device']:6.2f}x")
    print(f"load at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


# -- detector ------------------------------------------------------------------------------------------------------
def manager_on(road: str, detector: Path, checkpoints: Path):
    from sapiens2_demo.models.manager import ModelManager

    os.environ["SAPIENS2_CPU_DETECTOR"] = road
    manager = ModelManager(checkpoint_dir=checkpoints, device="cpu", detector=str(detector))
    started = time.perf_counter()
    manager.get_detector()
    return manager, time.perf_counter() - started


def detector_roads(argv: list[str], run: harness.Run) -> None:
    """The person detector's two CPU roads through detect_people, alternating call by call: ultralytics' torch model and
    its ONNX export under onnxruntime (models/detector_cpu.py); median wall and CPU ms a call, and the ONNX road's
    boxes and scores against torch's on the 1080p astronaut. --detector: a .pt, or a model .yaml (random weights)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks detector", description=detector_roads.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--detector", default="yolo26n.yaml")
    parser.add_argument("--reps", type=int, default=15)
    parser.add_argument("--size", default="1920x1080")
    args = parser.parse_args(argv)
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

        image = cv2.cvtColor(cv2.imread(str(harness.astronaut(Path(folder) / "a.jpg", (width, height)))), cv2.COLOR_BGR2RGB)
        roads = {road: manager_on(road, detector, Path(folder)) for road in ("torch", "onnx")}
        wall = {road: [] for road in roads}
        cpu = {road: [] for road in roads}
        for _ in range(args.reps + 2):
            for road, (manager, _) in roads.items():
                started, used = time.perf_counter(), time.process_time()
                detect_people(image, manager)
                wall[road].append(1000 * (time.perf_counter() - started))
                cpu[road].append(1000 * (time.process_time() - used))
        load = harness.load()
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

"""The transfer ledger (sapiens2_demo/ledger.py) over the GPU road at 1080p: what crosses between host and device,
and how often the host waits, per image request, per video frame and per live frame (a script, not a test).

    HF_HUB_OFFLINE=1 YOLO_OFFLINE=1 GRADIO_ANALYTICS_ENABLED=False .venv/bin/python benchmarks/bench_ledger.py \
        [--frames 96] [--tasks pose,seg,normal,pointmap,matting,mocap] [--only image,live,video] [--json PATH] \
        [--device cpu] [--where]

On a CPU the ledger makes the pipelines take the CUDA road (device post-processing and drawing, overlapped batches)
and counts what would cross; on CUDA (--device cuda) it counts what does. The stand-ins (standins/train.py, trained
once and cached under /tmp) run; the person detector is a random-weight YOLOv8n, so its boxes are replaced by the
three people's (its upload, forward and copies back still run and count).
- image: one request per task (the image tabs' and API's `run_task`, default options) on a 1080p frame of three
  people: bytes copied back, the bytes the answer holds (the render's pixels plus every file's pixels or arrays,
  uncompressed), waits;
- video: a --frames 1080p clip per task (`process_video`, CUDA's batch of 8, chunks of 16 frames): pose with the
  three people, mocap (pose with motion_3d), body parts, normals and depth with temporal_smoothing, matting over an
  image background. Per frame: waits, frame-sized uploads, bytes each way, the bytes the answer needs (the drawn
  frame, and pose's keypoints: 12 bytes a keypoint, 17 more lifted), and the batches whose next forward was
  queued before the host waited for them (overlapped);
- live: one webcam frame per live task (downscaled as the Live tab does), drawn where the model runs: the second
  frame, the first one's one-off uploads (colour tables) counted apart.
It takes about 6 to 12 minutes on a 2-core CPU (--only image,live: about a minute).
Each part also counts the operations our code queues on the device outside the forwards ("ops": each a kernel
launch on CUDA). --where prints, per task, the places in our code that copy or wait, and those that queue the most
operations. --json PATH writes {"image": {TASK: {"d2h_bytes", "answer_bytes", "waits", "launches"}}, "video": {TASK:
{"frames", "waits_per_frame", "uploads_per_frame", "h2d_bytes_per_frame", "d2h_bytes_per_frame",
"needed_bytes_per_frame", "batches", "overlapped_batches", "launches_per_frame", "queue_launches_per_frame"}},
"live": {TASK: {"d2h_bytes", "waits", "launches"}}}: "queue" counts the operations of the thread that queues the
forwards (each delays the next forward), the rest run beside them in the post-processing worker.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

HEIGHT, WIDTH = 1080, 1920
PEOPLE = 3
KEYPOINTS = 308
TASKS = {"pose": "pose", "seg": "segment", "normal": "normals", "pointmap": "pointmap", "matting": "matting"}
VIDEO_OPTIONS = {"pose": {}, "mocap": {"motion_3d": True}, "seg": {}, "normal": {"temporal_smoothing": True},
                 "pointmap": {"temporal_smoothing": True}, "matting": {"matting_background": "image"}}


SIDE, WIDE, STEP, TOP = 640, 560, 600, 300  # each person: a 640 px tall, 560 px wide tile, 600 px apart


def scene_frame(i: int = 0) -> tuple[np.ndarray, list[list[float]]]:
    """A 1080p frame of three astronauts on grey, moving right half a pixel a frame; their boxes."""
    import cv2

    from sapiens2_demo.standins.targets import load_photo

    person = cv2.resize(load_photo("astronaut"), (SIDE, SIDE), interpolation=cv2.INTER_AREA)[:, 40:40 + WIDE]
    frame = np.full((HEIGHT, WIDTH, 3), 96, np.uint8)
    for k in range(PEOPLE):
        x = 20 + k * STEP + i // 2
        frame[TOP:TOP + SIDE, x:x + WIDE] = person
    return frame, people_boxes(20 + i // 2)


def people_boxes(left: int) -> list[list[float]]:
    return [[left + k * STEP + 30.0, TOP + 10.0, left + k * STEP + WIDE - 30.0, TOP + SIDE - 1.0]
            for k in range(PEOPLE)]


def three_people(monkeypatch_target):
    """The detector runs (and counts), then its random boxes are replaced by the three people's."""
    from sapiens2_demo.pipelines import pose as pipeline

    def placed(frame) -> tuple[np.ndarray, np.ndarray, list]:
        tile = (np.abs(frame[TOP:TOP + SIDE].astype(np.int16) - 96) > 12).any(axis=(0, 2))
        return np.asarray(people_boxes(int(np.argmax(tile))), np.float32), np.full(PEOPLE, 0.9, np.float32), []

    real_one, real_queued = pipeline.find_people, getattr(pipeline, "find_people_queued", None)

    def one(frame, *args, **kwargs):
        real_one(frame, *args, **kwargs)
        return placed(frame)

    def queued(frames, *args, **kwargs):  # each frame's boxes when its detector's copy back has come
        found = real_queued(frames, *args, **kwargs)
        return [lambda get=get, frame=frame: (get(), placed(frame))[1] for get, frame in zip(found, frames)]

    monkeypatch_target.setattr(pipeline, "find_people", one)
    if real_queued is not None:  # the batched detector (the device road's)
        monkeypatch_target.setattr(pipeline, "find_people_queued", queued)


def image_figures(ctx, task: str, where: bool) -> dict:
    from sapiens2_demo import ledger
    from sapiens2_demo.jobs.image import run_task
    from sapiens2_demo.media.image import LoadedImage

    rgb, _ = scene_frame()
    with tempfile.TemporaryDirectory() as folder, ledger.recording() as book:
        out = run_task(ctx, LoadedImage(rgb, rgb.shape[:2]), task=TASKS[task], run_dir=Path(folder))
        answer = ledger.answer_bytes(rgb.size, out.files)  # the render: one RGB uint8 picture
    if where:
        print(f"-- image {task}\n{book.table()}\n{book.launch_table()}")
    return {"d2h_bytes": book.bytes("d2h"), "answer_bytes": answer, "waits": book.waits, "launches": book.launches}


def write_clip(path: Path, frames: int) -> None:
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = WIDTH, HEIGHT, "yuv420p"
        stream.options = {"preset": "ultrafast", "crf": "18"}
        for i in range(frames):
            out.mux(stream.encode(av.VideoFrame.from_ndarray(scene_frame(i)[0], format="rgb24")))
        out.mux(stream.encode())


def video_figures(key: str, clip: Path, task: str, frames: int, where: bool) -> dict:
    from sapiens2_demo import ledger
    from sapiens2_demo.jobs.video import VideoLimits, process_video

    options = dict(VIDEO_OPTIONS[task])
    if task == "matting":
        from sapiens2_demo.standins.targets import load_photo

        options["background_image"] = load_photo("camera")  # a photo, resized to cover each frame
    name = "pose" if task == "mocap" else TASKS[task]
    with tempfile.TemporaryDirectory() as folder, ledger.recording() as book:
        out = process_video(clip, name, key, folder, batch_size=8, limits=VideoLimits(max_side=WIDTH), **options)
    if where:
        print(f"-- video {task}\n{book.table()}\n{book.launch_table()}")
    n = out.frames
    batches, overlapped = book.overlapped()
    needed = HEIGHT * WIDTH * 3
    if task in ("pose", "mocap"):
        needed += PEOPLE * KEYPOINTS * (12 + (17 if task == "mocap" else 0))
    return {"frames": n, "waits_per_frame": round(book.waits / n, 3),
            "uploads_per_frame": round(book.uploads(HEIGHT * WIDTH) / n, 3),
            "h2d_bytes_per_frame": book.bytes("h2d") // n, "d2h_bytes_per_frame": book.bytes("d2h") // n,
            "needed_bytes_per_frame": needed, "batches": batches, "overlapped_batches": overlapped,
            "launches_per_frame": round(book.launches / n, 1),
            "queue_launches_per_frame": round(book.launches_on("queue") / n, 1)}


def live_figures(ctx, task: str, where: bool) -> dict:
    from sapiens2_demo import ledger
    from sapiens2_demo.ui.live_tab import live_frame

    rgb, _ = scene_frame()
    with ledger.recording():  # the first frame loads the model and uploads the colour tables (once a process)
        live_frame(ctx, rgb, TASKS[task])
    with ledger.recording() as book:  # the second is the one counted
        live_frame(ctx, scene_frame(1)[0], TASKS[task])
    if where:
        print(f"-- live {task}\n{book.table()}\n{book.launch_table()}")
    return {"d2h_bytes": book.bytes("d2h"), "waits": book.waits, "launches": book.launches}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=96)
    parser.add_argument("--tasks", default=",".join([*TASKS, "mocap"]))
    parser.add_argument("--only", default="image,live,video", help="the parts to run: image, live, video")
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--where", action="store_true", help="the places in our code that copy or wait")
    args = parser.parse_args()
    import pytest

    from sapiens2_demo import tasks as catalog
    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.standins.train import cached_standins

    chosen = [t.strip() for t in args.tasks.split(",") if t.strip()]
    parts = {p.strip() for p in args.only.split(",") if p.strip()}
    if not parts <= {"image", "live", "video"}:
        parser.error(f"--only takes image, live, video; got {args.only!r}")
    standins = cached_standins(log=lambda message: print(message, file=sys.stderr))
    manager = ModelManager(checkpoint_dir=standins, device=args.device, dtype="float32",
                           detector=str(standins / "yolov8n-random.pt"))
    ctx = AppContext(manager)
    figures: dict = {"image": {}, "video": {}, "live": {}}
    started = time.perf_counter()
    with pytest.MonkeyPatch.context() as patch, tempfile.TemporaryDirectory() as folder:
        three_people(patch)
        for task in (t for t in chosen if t in TASKS):
            if "image" in parts:
                figures["image"][task] = image_figures(ctx, task, args.where)
            if "live" in parts and TASKS[task] in catalog.names(live=True):
                figures["live"][task] = live_figures(ctx, task, args.where)
        if "video" in parts:
            clip = Path(folder) / "three_people.mp4"
            write_clip(clip, args.frames)
            for task in chosen:
                figures["video"][task] = video_figures(ctx.manager_key, clip, task, args.frames, args.where)
    print(f"transfer ledger, {args.device} ({'counted' if 'cuda' in args.device else 'the CUDA road simulated'}), "
          f"{WIDTH}x{HEIGHT}, stand-ins, {time.perf_counter() - started:.0f} s")
    if figures["image"]:
        print(f"{'image':10}{'d2h MB':>10}{'answer MB':>11}{'waits':>7}{'ops':>7}")
    for task, f in figures["image"].items():
        print(f"{task:10}{f['d2h_bytes'] / 1e6:10.2f}{f['answer_bytes'] / 1e6:11.2f}{f['waits']:7d}{f['launches']:7d}")
    if figures["live"]:
        print(f"{'live':10}{'d2h MB':>10}{'waits':>18}{'ops':>7}")
    for task, f in figures["live"].items():
        print(f"{task:10}{f['d2h_bytes'] / 1e6:10.2f}{f['waits']:18d}{f['launches']:7d}")
    if figures["video"]:
        print(f"{'video':10}{'frames':>7}{'waits/fr':>9}{'uploads/fr':>11}{'h2d MB/fr':>10}{'d2h MB/fr':>10}"
              f"{'needed MB/fr':>13}{'overlapped':>12}{'ops/fr':>8}{'queue':>7}")
    for task, f in figures["video"].items():
        print(f"{task:10}{f['frames']:7d}{f['waits_per_frame']:9.3f}{f['uploads_per_frame']:11.2f}"
              f"{f['h2d_bytes_per_frame'] / 1e6:10.2f}{f['d2h_bytes_per_frame'] / 1e6:10.2f}"
              f"{f['needed_bytes_per_frame'] / 1e6:13.2f}{f['overlapped_batches']:>7d}/{f['batches']:<4}"
              f"{f['launches_per_frame']:8.1f}{f['queue_launches_per_frame']:7.1f}")
    if args.json is not None:
        args.json.write_text(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()

"""A video on ZeroGPU: one GPU call per chunk of frames (each call is a trip through ZeroGPU's queue), few bytes
across the process boundary per frame, and the same output as a local run. Runs the real video job in a
subprocess with the stand-in `spaces` (tests/zerogpu), which logs each call's pickled bytes both ways."""

import json
import math
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.videos import make_video

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = ROOT / "tests" / "zerogpu"
FRAMES, SIZE = 20, (160, 120)  # 20 frames: chunks of 16 and 4
DONE = re.compile(r"^\[zerogpu\] done infer .* bytes_in=(\d+) bytes_out=(\d+) result=(\w+)$", re.M)
SCRIPT = """
import json, sys
from sapiens2_demo import gpu
from sapiens2_demo.jobs.video import process_video
from sapiens2_demo.models.manager import ModelManager
tiny, clip, out, task, exports = sys.argv[1:6]
task, _, option = task.partition(":")  # e.g. pose:motion_3d, pose with that option on
manager = ModelManager(checkpoint_dir=tiny, device="cpu", dtype="float32", detector=tiny + "/yolov8n-random.pt")
result = process_video(clip, task, gpu.register(manager), out, frame_exports=exports == "1", max_people=2,
                       **({option: True} if option else {}))
print("FILES", json.dumps([str(p) for p in result.files]))
"""


def run(tiny_dir, clip, out, task, *, zerogpu: bool, exports: bool = False) -> tuple[str, list[str]]:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "YOLO_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    if zerogpu:
        env["PYTHONPATH"] = f"{STAND_IN}{os.pathsep}{ROOT}"
        env.pop("SAPIENS2_NO_SPACES", None)
    else:
        env["PYTHONPATH"], env["SAPIENS2_NO_SPACES"] = str(ROOT), "1"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tiny_dir), str(clip), str(out), task,
                           "1" if exports else "0"], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    files = json.loads(done.stdout.split("FILES ", 1)[1])
    return done.stdout + done.stderr, files


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return make_video(tmp_path_factory.mktemp("zerogpu-clip") / "clip.mp4", frames=FRAMES, size=SIZE, fps=20)


@pytest.mark.parametrize("task", ["segment", "normals", "pointmap", "matting", "pose", "pose:motion_3d",
                                  "pointmap:temporal_smoothing"])
def test_one_gpu_call_per_chunk_and_few_bytes_per_frame(tiny_dir, clip, tmp_path, task):
    log, _ = run(tiny_dir, clip, tmp_path / "out", task, zerogpu=True)
    calls = DONE.findall(log)
    assert len(calls) == math.ceil(FRAMES / 16) and all(result == "ok" for *_, result in calls), log[-3000:]
    crossing = sum(int(a) + int(b) for a, b, _ in calls) / FRAMES
    frame_bytes = SIZE[0] * SIZE[1] * 3
    assert crossing <= 4 * frame_bytes, f"{task}: {crossing / frame_bytes:.2f}x the frame's bytes per frame"


def test_chunked_zerogpu_video_equals_the_local_one(tiny_dir, clip, tmp_path):
    outputs = {}
    for where in ("zerogpu", "local"):
        _, files = run(tiny_dir, clip, tmp_path / where, "segment", zerogpu=where == "zerogpu", exports=True)
        with zipfile.ZipFile(next(f for f in files if f.endswith("body_parts_labels.zip"))) as zf:
            outputs[where] = {name: zf.read(name) for name in zf.namelist()}
    assert len(outputs["local"]) == FRAMES and outputs["zerogpu"] == outputs["local"]


THREAD_IMPORTS = """
import json, sys, threading
imported = []
sys.addaudithook(lambda event, args: imported.append((threading.current_thread().name, args[0]))
                 if event == "import" and threading.current_thread() is not threading.main_thread() else None)
from sapiens2_demo import gpu
from sapiens2_demo.jobs.video import process_video
from sapiens2_demo.models.manager import ModelManager
tiny, clip, out = sys.argv[1:4]
manager = ModelManager(checkpoint_dir=tiny, device="cpu", dtype="float32", detector=tiny + "/yolov8n-random.pt")
key = gpu.register(manager)
assert gpu.CROSSES_PROCESSES
for task, options in (("pointmap", {"temporal_smoothing": True}), ("pose", {"motion_3d": True}), ("matting", {})):
    process_video(clip, task, key, out + "/" + task, max_people=2, **options)
print("IMPORTED", json.dumps(imported))
"""


def test_threads_beside_the_gpu_calls_import_nothing(tiny_dir, clip, tmp_path):
    """Each ZeroGPU call forks this process; a module another thread is importing at that moment stays locked in
    the worker, which hangs on its first import of it (a video's writer importing PIL's plugins and matplotlib
    while the next chunk's call forked: its worker imported transformers, which imports PIL). `gpu.register`
    imports on ZeroGPU what the calls and the threads import inside functions, so a video's threads import
    nothing while calls fork."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "YOLO_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error",
           "PYTHONPATH": f"{STAND_IN}{os.pathsep}{ROOT}"}
    env.pop("SAPIENS2_NO_SPACES", None)
    done = subprocess.run([sys.executable, "-c", THREAD_IMPORTS, str(tiny_dir), str(clip), str(tmp_path)], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    imported = json.loads(done.stdout.split("IMPORTED ", 1)[1])
    assert imported == [], imported[:40]

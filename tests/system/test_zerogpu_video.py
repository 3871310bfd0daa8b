"""A video on ZeroGPU: one GPU call per chunk of frames (each call is a trip through ZeroGPU's queue), few bytes
across the process boundary per frame, and the same output as a local run. Runs the real video job in a
subprocess with the stand-in `spaces` (tests/zerogpu), which logs each call's pickled bytes both ways.

One subprocess runs every case in turn (a process's start, imports and model loads cost more than the tiny video
jobs), marking on stderr where each begins, so that each test reads its own case's calls."""

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
TASKS = ["segment", "normals", "pointmap", "matting", "pose", "pose:motion_3d", "pointmap:temporal_smoothing"]
# each case: "task[:option]" or "task+exports" (per-frame data written too); the threads beside the GPU calls are
# watched by an audit hook from the first import on
SCRIPT = """
import json, sys, threading
imported = []
sys.addaudithook(lambda event, args: imported.append((threading.current_thread().name, args[0]))
                 if event == "import" and threading.current_thread() is not threading.main_thread() else None)
from sapiens2_demo import gpu
from sapiens2_demo.jobs.video import process_video
from sapiens2_demo.models.manager import ModelManager
tiny, clip, out, cases = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
manager = ModelManager(checkpoint_dir=tiny, device="cpu", dtype="float32", detector=tiny + "/yolov8n-random.pt")
key = gpu.register(manager)
files = {}
for case in cases:
    print("CASE", case, file=sys.stderr, flush=True)
    spec, _, exports = case.partition("+")
    task, _, option = spec.partition(":")  # e.g. pose:motion_3d, pose with that option on
    result = process_video(clip, task, key, f"{out}/{case}", frame_exports=exports == "exports", max_people=2,
                           **({option: True} if option else {}))
    files[case] = [str(p) for p in result.files]
print("END", file=sys.stderr, flush=True)
print("RESULT", json.dumps({"files": files, "imported": imported, "crosses": gpu.CROSSES_PROCESSES}))
"""


def run(tiny_dir, clip, out, cases, *, zerogpu: bool) -> tuple[dict[str, str], dict]:
    """Runs `cases` in one fresh process; returns each case's log (stderr from its start to the next case's) and
    the script's result (each case's files, the imports made by threads other than the main one)."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "YOLO_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error"}
    if zerogpu:
        env["PYTHONPATH"] = f"{STAND_IN}{os.pathsep}{ROOT}"
        env.pop("SAPIENS2_NO_SPACES", None)
    else:
        env["PYTHONPATH"], env["SAPIENS2_NO_SPACES"] = str(ROOT), "1"
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tiny_dir), str(clip), str(out), *cases], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-4000:]
    parts = re.split(r"^CASE (\S+)\n", done.stderr.split("\nEND\n", 1)[0], flags=re.M)
    logs = dict(zip(parts[1::2], parts[2::2]))
    assert list(logs) == list(cases), done.stderr[-4000:]
    return logs, json.loads(done.stdout.split("RESULT ", 1)[1])


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return make_video(tmp_path_factory.mktemp("zerogpu-clip") / "clip.mp4", frames=FRAMES, size=SIZE, fps=20)


@pytest.fixture(scope="module")
def on_zerogpu(tiny_dir, clip, tmp_path_factory):
    return run(tiny_dir, clip, tmp_path_factory.mktemp("zerogpu-out"), [*TASKS, "segment+exports"], zerogpu=True)


@pytest.mark.parametrize("task", TASKS)
def test_one_gpu_call_per_chunk_and_few_bytes_per_frame(on_zerogpu, task):
    log = on_zerogpu[0][task]
    calls = DONE.findall(log)
    assert len(calls) == math.ceil(FRAMES / 16) and all(result == "ok" for *_, result in calls), log[-3000:]
    crossing = sum(int(a) + int(b) for a, b, _ in calls) / FRAMES
    frame_bytes = SIZE[0] * SIZE[1] * 3
    assert crossing <= 4 * frame_bytes, f"{task}: {crossing / frame_bytes:.2f}x the frame's bytes per frame"


def test_chunked_zerogpu_video_equals_the_local_one(on_zerogpu, tiny_dir, clip, tmp_path):
    _, local = run(tiny_dir, clip, tmp_path, ["segment+exports"], zerogpu=False)
    outputs = {}
    for where, files in (("zerogpu", on_zerogpu[1]["files"]), ("local", local["files"])):
        with zipfile.ZipFile(next(f for f in files["segment+exports"] if f.endswith("body_parts_labels.zip"))) as zf:
            outputs[where] = {name: zf.read(name) for name in zf.namelist()}
    assert len(outputs["local"]) == FRAMES and outputs["zerogpu"] == outputs["local"]


def test_threads_beside_the_gpu_calls_import_nothing(on_zerogpu):
    """Each ZeroGPU call forks this process; a module another thread is importing at that moment stays locked in
    the worker, which hangs on its first import of it (a video's writer importing PIL's plugins and matplotlib
    while the next chunk's call forked: its worker imported transformers, which imports PIL). `gpu.register`
    imports on ZeroGPU what the calls and the threads import inside functions, so a video's threads import
    nothing while calls fork (every case above: each task, pose's motion, steady depth, matting, the exports)."""
    result = on_zerogpu[1]
    assert result["crosses"]
    assert result["imported"] == [], result["imported"][:40]

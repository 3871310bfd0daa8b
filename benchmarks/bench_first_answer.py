"""The first answers of a launch (a script that prints figures, not a test): per launch kind, the app's first three
answers on three different photos, then three more once the compiled form is swapped in; and the batch CLI's wall
time on 1 and 20 photos per compile mode.

    .venv/bin/python -m benchmarks first-answer [--tasks segment] [--dtype bfloat16] [--checkpoint-dir DIR]
        [--cli-photos 1,20] [--swap-wait 600] [--json PATH]

Launch kinds (each its own `python app.py`, the default road `--compile auto` unless said): `empty cache` (a new
compile cache folder), `warm cache` (the same folder again), `compile off`. The app serves each model eager from its
first request and compiles it in the background (models/compile.py, compile_beside): `first 3` are answers while
that compile may still run (what a request loses to it on this machine's cores), `after swap` the three after
the log says the compiled form serves. The CLI runs `--compile auto` (compiles only when it pays, from the timings
kept beside the compile cache), `off` and `on` (compiled at load), on the warm cache.
Tiny random-weight checkpoints unless --checkpoint-dir names others (`python -m benchmarks fullsize` writes full-size
random-weight ones: a 0.4b forward takes seconds, the whole run many minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.bench_first_burst import PHOTOS, launch, load_average, tiny_checkpoints  # noqa: E402

ENDPOINT = {"segment": "/segment", "pose": "/pose", "normals": "/normals", "pointmap": "/pointmap",
            "matting": "/matting"}
SWAPPED = re.compile(r"requests run compiled from then on")


def answers(url: str, endpoint: str, photos) -> list[float]:
    from gradio_client import Client, handle_file

    client = Client(url, verbose=False)
    times = []
    for photo in photos:
        started = time.perf_counter()
        client.predict(handle_file(str(ROOT / "assets" / photo)), api_name=endpoint)
        times.append(round(time.perf_counter() - started, 2))
    return times


def wait_for_swap(log_path: Path, timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if SWAPPED.search(log_path.read_text(errors="replace")):
            return round(time.monotonic() - started, 1)
        time.sleep(0.5)
    return None


def app_launch(checkpoint_dir: Path, task: str, dtype: str, compile_mode: str, cache: Path, log_path: Path,
               swap_wait: float) -> dict:
    process, url = launch(checkpoint_dir, dtype, compile_mode, log_path, env={"SAPIENS2_COMPILE_CACHE": str(cache)})
    try:
        first = answers(url, ENDPOINT[task], PHOTOS)
        figures = {"first_3": first}
        if compile_mode != "off":
            figures["swap_waited_s"] = wait_for_swap(log_path, swap_wait)
            later = [f"later_{photo}" for photo in PHOTOS]  # new photos: no answer cached from the first three
            folder = Path(tempfile.mkdtemp(prefix="sapiens2-photos-"))
            for photo, name in zip(PHOTOS, later):
                shutil.copy(ROOT / "assets" / photo, folder / name)
            figures["after_swap"] = answers(url, ENDPOINT[task], [folder / name for name in later])
        return figures
    finally:
        process.terminate()
        process.wait(30)


def cli_wall(checkpoint_dir: Path, photos: int, compile_mode: str, dtype: str, task: str, cache: Path,
             work: Path) -> float:
    inputs = work / f"photos-{photos}"
    if not inputs.exists():
        inputs.mkdir(parents=True)
        for n in range(photos):
            shutil.copy(ROOT / "assets" / PHOTOS[n % len(PHOTOS)], inputs / f"photo{n:02d}.jpg")
    env = {**os.environ, "SAPIENS2_COMPILE_CACHE": str(cache), "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-m", "sapiens2_demo.cli", "--input", str(inputs), "--output",
               str(work / f"out-{photos}-{compile_mode}"), "--tasks", task, "--checkpoint-dir", str(checkpoint_dir),
               "--detector", str(checkpoint_dir / "yolov8n-random.pt"), "--device", "cpu", "--dtype", dtype,
               "--compile", compile_mode, "--quiet", "--overwrite"]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"the CLI exited {done.returncode}: {(done.stdout + done.stderr)[-2000:]}")
    return round(time.perf_counter() - started, 2)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", default="segment", help=f"comma-separated, of {', '.join(ENDPOINT)}")
    parser.add_argument("--dtype", default="bfloat16", help="the launches' --dtype (bfloat16: the AMX CPU's road)")
    parser.add_argument("--checkpoint-dir", type=Path)
    parser.add_argument("--cli-photos", default="1,20", help="the CLI's runs (empty: none)")
    parser.add_argument("--swap-wait", type=float, default=600, help="seconds to wait for the compiled form")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sapiens2-first-answer-"))
    checkpoint_dir = tiny_checkpoints(args.checkpoint_dir or work / "checkpoints")
    from sapiens2_demo.models.device import cpu_name

    print(f"CPU {cpu_name()}, {os.cpu_count()} cores, load {load_average()}; checkpoints {checkpoint_dir.name} "
          f"({'tiny random weights' if args.checkpoint_dir is None else 'as given'}); --dtype {args.dtype}")
    figures: dict = {"cpu": cpu_name(), "load_start": load_average(), "dtype": args.dtype, "app": {}, "cli": {}}
    cache = work / "compile-cache"
    for task in args.tasks.split(","):
        kinds = {"empty cache": "auto", "warm cache": "auto", "compile off": "off"}
        if task != args.tasks.split(",")[0]:
            kinds.pop("empty cache")  # the cache is warm for every width after the first task's launch
        for kind, mode in kinds.items():
            run = app_launch(checkpoint_dir, task, args.dtype, mode, cache, work / f"{task}-{kind}.log", args.swap_wait)
            figures["app"][f"{task}, {kind}"] = run
            print(f"{task:9} {kind:12} first 3: {run['first_3']} s"
                  + (f"; swapped {run['swap_waited_s']} s after them; next 3: {run['after_swap']} s"
                     if "after_swap" in run else ""), flush=True)
    first_task = args.tasks.split(",")[0]
    for photos in filter(None, args.cli_photos.split(",")):
        for mode in ("auto", "off", "on"):
            wall = cli_wall(checkpoint_dir, int(photos), mode, args.dtype, first_task, cache, work)
            figures["cli"][f"{photos} photos, --compile {mode}"] = wall
            print(f"CLI {first_task} {photos:>2} photos --compile {mode:4}: {wall} s wall", flush=True)
    figures["load_end"] = load_average()
    print(f"load at the end {figures['load_end']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return figures


if __name__ == "__main__":
    main()

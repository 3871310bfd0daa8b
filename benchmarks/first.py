"""The app's first minutes (`burst`, `first-answer`), each launching the real app on tiny random-weight checkpoints
unless --checkpoint-dir names others (`python -m benchmarks fullsize` writes full-size random-weight ones)."""

from __future__ import annotations

import collections
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from benchmarks import harness
from benchmarks.harness import ROOT

ASSETS = ROOT / "assets"
ENDPOINTS = ("/segment", "/pose", "/normals", "/pointmap", "/matting")
ENDPOINT = {endpoint.strip("/"): endpoint for endpoint in ENDPOINTS}
PHOTOS = ("astronaut.jpg", "grace_hopper.jpg", "camera.jpg")
SERVER_ERROR = "Something went wrong on the server"
SWAPPED = re.compile(r"requests run compiled from then on")


@contextlib.contextmanager
def launched(checkpoint_dir: Path, dtype: str, compile_mode: str, log_path: Path, env: dict | None = None):
    """python app.py on a free port (`env` added to this process's), its url once it answers; ended on leaving."""
    port = harness.free_port()
    log = open(log_path, "w")
    process = subprocess.Popen(
        [sys.executable, "app.py", "--checkpoint-dir", str(checkpoint_dir), "--detector",
         str(checkpoint_dir / "yolov8n-random.pt"), "--device", "cpu", "--dtype", dtype, "--compile", compile_mode,
         "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})})
    url, deadline = f"http://127.0.0.1:{port}/", time.monotonic() + 180
    try:
        while True:
            if process.poll() is not None:
                raise SystemExit(f"the app exited ({process.returncode}); see {log_path}")
            if time.monotonic() > deadline:
                raise SystemExit(f"the app did not start within 180 s; see {log_path}")
            try:
                with urllib.request.urlopen(url + "config", timeout=2):
                    break
            except OSError:
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(30)


def call(url: str, endpoint: str, photo: str) -> str:
    """'ok', 'server error', 'queue full' or '<error type>: <message>'."""
    from gradio_client import Client, handle_file

    try:  # a patient client: on a loaded machine its default 20 s to connect is not a refusal of the app's
        Client(url, verbose=False, httpx_kwargs={"timeout": 600}).predict(handle_file(str(ASSETS / photo)),
                                                                          api_name=endpoint)
        return "ok"
    except Exception as error:  # noqa: BLE001 - sorted below
        text = str(error)
        if SERVER_ERROR in text:
            return "server error"
        return "queue full" if "queue is full" in text.lower() else f"{type(error).__name__}: {text[:100]}"


def crowd(url: str, clients: int) -> dict:
    jobs = [(ENDPOINTS[i % len(ENDPOINTS)], PHOTOS[i % len(PHOTOS)]) for i in range(clients)]
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        outcomes = list(pool.map(lambda job: call(url, *job), jobs))
    after = {endpoint: call(url, endpoint, "camera.jpg") for endpoint in ENDPOINTS}
    return {"counts": dict(collections.Counter(outcomes)), "after_ok": all(value == "ok" for value in after.values()), "after": after,
            "wall_s": round(time.perf_counter() - started, 1)}


def one_launch(checkpoint_dir: Path, dtype: str, clients: int, log: Path) -> dict:
    with launched(checkpoint_dir, dtype, "auto", log) as url:
        return crowd(url, clients)


def burst(argv: list[str], run: harness.Run) -> None:
    """Visitors arriving together after a restart: cold launches, each its own `python app.py` (transformers' lazy
    names looked up afresh too), then --clients concurrent first requests across the five image endpoints before
    any model is loaded, then one request per endpoint; and one launch with --crowd at once (more than the queue
    holds: only gradio's "Queue is full" may refuse them). tests/app/test_first_burst.py is the smaller version."""
    parser = harness.parser(run, burst.__doc__)
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--crowd", type=int, default=64, help="requests at once in the last launch (0: none)")
    parser.add_argument("--checkpoint-dir", type=Path, help="default: tiny random weights")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="sapiens2-burst-"))
    checkpoint_dir = harness.tiny_checkpoints(args.checkpoint_dir or scratch / "checkpoints")
    run.weights = str(args.checkpoint_dir or "tiny random weights")
    print(f"app logs in {scratch}")
    figures = run.figures.setdefault("runs", {})
    for dtype in harness.names(args.dtypes):
        runs = [one_launch(checkpoint_dir, dtype, args.clients, scratch / f"{dtype}-{n}.log")
                for n in range(args.launches)]
        figures[dtype] = runs
        for n, launch in enumerate(runs, 1):  # not `run`: that is the results file's
            print(f"{dtype} launch {n}: {args.clients} at once -> {launch['counts']} in {launch['wall_s']} s; every "
                  f"endpoint answers after: {launch['after_ok']}")
        errors = sum(launch["counts"].get("server error", 0) for launch in runs)
        print(f"{dtype}: {errors} server errors over {args.launches} launches x {args.clients}; every endpoint "
              f"answered after each burst: {all(launch['after_ok'] for launch in runs)}")
    if args.crowd:
        many = one_launch(checkpoint_dir, harness.names(args.dtypes)[0], args.crowd, scratch / "crowd.log")
        run.figures["crowd"] = many
        print(f"{args.crowd} at once: {many['counts']}; every endpoint answers after: {many['after_ok']}")
    rows = [[dtype, f"{len(runs)} x {args.clients}", str(sum(launch["counts"].get("server error", 0) for launch in runs)),
             ", ".join(f"{k} {v}" for k, v in sum((collections.Counter(launch["counts"]) for launch in runs),
                                                   collections.Counter()).items()),
             str(all(launch["after_ok"] for launch in runs))] for dtype, runs in figures.items()]
    if args.crowd:
        rows.append([f"{harness.names(args.dtypes)[0]}, crowd", f"1 x {args.crowd}",
                     str(many["counts"].get("server error", 0)), ", ".join(f"{k} {v}" for k, v in many["counts"].items()),
                     str(many["after_ok"])])
    run.table("burst", ["dtype", "launches x requests at once", "server errors", "answers, all launches",
                        "every endpoint answers after"], rows, caption="Cold launches, concurrent first requests.")


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
    with launched(checkpoint_dir, dtype, compile_mode, log_path, env={"SAPIENS2_COMPILE_CACHE": str(cache)}) as url:
        figures = {"first_3": answers(url, ENDPOINT[task], PHOTOS)}
        if compile_mode != "off":
            figures["swap_waited_s"] = wait_for_swap(log_path, swap_wait)
            from PIL import Image, ImageOps

            # the same photos mirrored: the same cost, new content (the segmentation cache is keyed by content)
            later = [f"mirrored_{photo}" for photo in PHOTOS]
            folder = Path(tempfile.mkdtemp(prefix="sapiens2-photos-"))
            for photo, name in zip(PHOTOS, later):
                ImageOps.mirror(Image.open(ROOT / "assets" / photo)).save(folder / name, quality=95)
            figures["after_swap"] = answers(url, ENDPOINT[task], [folder / name for name in later])
        return figures


def cli_wall(checkpoint_dir: Path, photos: int, compile_mode: str, dtype: str, task: str, cache: Path,
             work: Path) -> float:
    """The batch CLI's wall seconds on `photos` photos (tests/compile_parity.run_cli, as `compile` runs it)."""
    from tests.compile_parity import run_cli

    inputs = work / f"photos-{photos}"
    if not inputs.exists():
        inputs.mkdir(parents=True)
        import numpy as np
        from PIL import Image

        for n in range(photos):  # each its own content (one pixel): the segmentation cache answers no repeat
            pixels = np.array(Image.open(ROOT / "assets" / PHOTOS[n % len(PHOTOS)]).convert("RGB"))
            pixels[0, 0] = (n, 255 - n, n // 2)
            Image.fromarray(pixels).save(inputs / f"photo{n:02d}.png")
    return round(run_cli(inputs, work / f"out-{photos}-{compile_mode}", checkpoint_dir, compile_mode, cache,
                         tasks=task, dtype=dtype).seconds, 2)


def first_answer(argv: list[str], run: harness.Run) -> None:
    """Per launch kind (`empty cache`: a new compile cache folder; `warm cache`: the same folder again; `compile
    off`), the first three answers on three photos while the background compile may still run, then three more
    once the log says the compiled form serves; and the batch CLI's wall time on --cli-photos photos with
    `--compile auto` (compiles only when it pays), `off` and `on`, on the warm cache."""
    parser = harness.parser(run, first_answer.__doc__)
    parser.add_argument("--tasks", default="segment", help=f"comma-separated, of {', '.join(ENDPOINT)}")
    parser.add_argument("--dtype", default="bfloat16", help="the launches' --dtype (bfloat16: the AMX CPU's road)")
    parser.add_argument("--cli-photos", default="1,20", help="the CLI's runs (empty: none)")
    parser.add_argument("--checkpoint-dir", type=Path, help="default: tiny random weights")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="sapiens2-first-answer-"))
    checkpoint_dir = harness.tiny_checkpoints(args.checkpoint_dir or work / "checkpoints")
    run.weights = str(args.checkpoint_dir or "tiny random weights")
    figures, cache, tasks = run.figures, work / "compile-cache", harness.names(args.tasks)
    figures.update(dtype=args.dtype, app={}, cli={})
    for task in tasks:
        kinds = {"empty cache": "auto", "warm cache": "auto", "compile off": "off"}
        if task != tasks[0]:
            kinds.pop("empty cache")  # the cache is warm for every width after the first task's launch
        for kind, mode in kinds.items():
            found = app_launch(checkpoint_dir, task, args.dtype, mode, cache, work / f"{task}-{kind}.log", 600)
            figures["app"][f"{task}, {kind}"] = found
            print(f"{task:9} {kind:12} first 3: {found['first_3']} s"
                  + (f"; swapped {found['swap_waited_s']} s after them; next 3: {found['after_swap']} s"
                     if "after_swap" in found else ""), flush=True)
    first_task = tasks[0]
    for photos in harness.names(args.cli_photos):
        for mode in ("auto", "off", "on"):
            wall = cli_wall(checkpoint_dir, int(photos), mode, args.dtype, first_task, cache, work)
            figures["cli"][f"{photos} photos, --compile {mode}"] = wall
            print(f"CLI {first_task} {photos:>2} photos --compile {mode:4}: {wall} s wall", flush=True)
    off = figures["app"].get(f"{first_task}, compile off", {}).get("first_3", [None])[0]
    rows = [[name, " / ".join(f"{t:g}" for t in found["first_3"]),
             f"{found['first_3'][0] / off:.2f}x" if off else "-", f"{found['swap_waited_s']:g}" if "swap_waited_s" in found
             else "-", " / ".join(f"{t:g}" for t in found.get("after_swap", [])) or "-"]
            for name, found in figures["app"].items()]
    rows += [[f"CLI, {name}", f"{wall:g}", "-", "-", "-"] for name, wall in figures["cli"].items()]
    run.table("launches", ["launch", "first 3 answers, s", "first against compile off", "swap, s after them",
                           "next 3 after the swap, s"], rows, caption=f"--dtype {args.dtype}; the CLI's wall time in "
              "its first column, on the warm cache.")

"""Visitors arriving together after a restart (a script that prints figures, not a test): cold launches of the
real app, each in its own process (python app.py, so transformers' lazy names are looked up afresh too), then N
concurrent first requests across the five image endpoints before any model is loaded, then one request per
endpoint; and one launch with 64 requests at once (more than the queue holds: only gradio's "Queue is full" may
refuse them).

    .venv/bin/python -m benchmarks burst [--launches 5] [--clients 10] [--dtypes bfloat16,float32] [--crowd 64]
        [--compile auto] [--checkpoint-dir DIR] [--json PATH]

Tiny random-weight checkpoints (`python -m sapiens2_demo.standins DIR --detector`, written into a temporary folder
unless --checkpoint-dir is given). Per launch it prints the answers, the server errors ("Something went wrong on
the server") and other refusals of the burst, and whether every endpoint answered after it. tests/app/
test_first_burst.py is the suite's smaller version (3 launches in one process).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
ASSETS = ROOT / "assets"
ENDPOINTS = ("/segment", "/pose", "/normals", "/pointmap", "/matting")
PHOTOS = ("astronaut.jpg", "grace_hopper.jpg", "camera.jpg")
SERVER_ERROR = "Something went wrong on the server"


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tiny_checkpoints(root: Path) -> Path:
    if not (root / "sapiens2-seg-0.4b").is_dir():
        subprocess.run([sys.executable, "-m", "sapiens2_demo.standins", str(root), "--detector"], cwd=ROOT,
                       check=True, stdout=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return root


def launch(checkpoint_dir: Path, dtype: str, compile_mode: str, log_path: Path, env: dict | None = None):
    """python app.py on a free port (`env` added to this process's); (process, url) once it answers."""
    port = free_port()
    log = open(log_path, "w")
    process = subprocess.Popen(
        [sys.executable, "app.py", "--checkpoint-dir", str(checkpoint_dir), "--detector",
         str(checkpoint_dir / "yolov8n-random.pt"), "--device", "cpu", "--dtype", dtype, "--compile", compile_mode,
         "--host", "127.0.0.1", "--port", str(port)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})})
    url = f"http://127.0.0.1:{port}/"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"the app exited ({process.returncode}); see {log_path}")
        try:
            with urllib.request.urlopen(url + "config", timeout=2):
                return process, url
        except OSError:
            time.sleep(0.5)
    process.kill()
    raise SystemExit(f"the app did not start within 180 s; see {log_path}")


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


def burst(url: str, clients: int) -> dict:
    jobs = [(ENDPOINTS[i % len(ENDPOINTS)], PHOTOS[i % len(PHOTOS)]) for i in range(clients)]
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        outcomes = list(pool.map(lambda job: call(url, *job), jobs))
    counts: dict = {}
    for outcome in outcomes:
        counts[outcome] = counts.get(outcome, 0) + 1
    after = {endpoint: call(url, endpoint, "camera.jpg") for endpoint in ENDPOINTS}
    return {"counts": counts, "after_ok": all(value == "ok" for value in after.values()), "after": after,
            "wall_s": round(time.perf_counter() - started, 1)}


def one_launch(checkpoint_dir: Path, dtype: str, compile_mode: str, clients: int, logs: Path, name: str) -> dict:
    process, url = launch(checkpoint_dir, dtype, compile_mode, logs / f"{name}.log")
    try:
        return burst(url, clients)
    finally:
        process.terminate()
        process.wait(30)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=5)
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--crowd", type=int, default=64, help="requests at once in the last launch (0: none)")
    parser.add_argument("--compile", default="auto", help="the app's --compile (auto: its default road)")
    parser.add_argument("--checkpoint-dir", type=Path)
    parser.add_argument("--json", type=Path, help="also write the figures here")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="sapiens2-burst-"))
    checkpoint_dir = tiny_checkpoints(args.checkpoint_dir or scratch / "checkpoints")
    from sapiens2_demo.models.device import cpu_name

    print(f"CPU {cpu_name()}, {os.cpu_count()} cores, load {load_average()}; tiny random-weight checkpoints; "
          f"--compile {args.compile}; app logs in {scratch}")
    figures: dict = {"cpu": cpu_name(), "load_start": load_average(), "runs": {}}
    for dtype in args.dtypes.split(","):
        runs = [one_launch(checkpoint_dir, dtype, args.compile, args.clients, scratch, f"{dtype}-{n}")
                for n in range(args.launches)]
        figures["runs"][dtype] = runs
        for n, run in enumerate(runs, 1):
            print(f"{dtype} launch {n}: {args.clients} at once -> {run['counts']} in {run['wall_s']} s; every "
                  f"endpoint answers after: {run['after_ok']}")
        errors = sum(run["counts"].get("server error", 0) for run in runs)
        print(f"{dtype}: {errors} server errors over {args.launches} launches x {args.clients}; every endpoint "
              f"answered after each burst: {all(run['after_ok'] for run in runs)}")
    if args.crowd:
        crowd = one_launch(checkpoint_dir, args.dtypes.split(",")[0], args.compile, args.crowd, scratch, "crowd")
        figures["crowd"] = crowd
        print(f"{args.crowd} at once ({args.dtypes.split(',')[0]}): {crowd['counts']}; every endpoint answers after: "
              f"{crowd['after_ok']}")
    figures["load_end"] = load_average()
    print(f"load at the end {figures['load_end']}")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=1))
    return figures


if __name__ == "__main__":
    main()

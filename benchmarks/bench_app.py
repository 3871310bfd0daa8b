"""App-level figures on tiny random-weight checkpoints, or any --checkpoint-dir (a script, not a test).

Prints the time from `python app.py` to the first HTTP answer, and per tab the time of the first call
(which loads the model) and of a warm call, through gradio_client.

    python benchmarks/bench_app.py [--checkpoint-dir DIR]

--checkpoint-dir: e.g. stand-ins (`python -m sapiens2_demo.standins DIR --trained --detector`: tiny configs
trained on synthetic targets, not models); default: tiny random weights in a temporary folder. The detector is
DIR/yolov8n-random.pt when there, else the app's default.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.update(HF_HUB_OFFLINE="1", YOLO_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False")

CALLS = [("/pose", "astronaut.jpg", {}), ("/segment", "grace_hopper.jpg", {}), ("/normals", "grace_hopper.jpg", {}),
         ("/pointmap", "grace_hopper.jpg", {}), ("/matting", "grace_hopper.jpg", {}), ("/all", "astronaut.jpg", {})]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint-dir", type=Path, default=None)
    args = parser.parse_args()
    from gradio_client import Client, handle_file

    from sapiens2_demo.standins.tiny import write_all, write_tiny_detector

    with tempfile.TemporaryDirectory() as tmp:
        ckpts = args.checkpoint_dir or Path(tmp)
        if args.checkpoint_dir is None:
            write_all(ckpts)
            write_tiny_detector(ckpts / "yolov8n-random.pt")
        detector = ["--detector", str(ckpts / "yolov8n-random.pt")] if (ckpts / "yolov8n-random.pt").exists() else []
        print(f"checkpoints: {ckpts}" + (" (stand-ins, not models)" if (ckpts / "STANDINS.txt").exists() else ""))
        port = free_port()
        started = time.perf_counter()
        server = subprocess.Popen([sys.executable, str(ROOT / "app.py"), "--checkpoint-dir", str(ckpts),
                                   *detector, "--port", str(port)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
        try:
            url = f"http://127.0.0.1:{port}/"
            while True:
                try:
                    urllib.request.urlopen(url, timeout=1).read()
                    break
                except OSError:
                    if server.poll() is not None or time.perf_counter() - started > 120:
                        raise SystemExit("the app did not come up")
                    time.sleep(0.1)
            print(f"app start (python app.py -> first HTTP 200): {time.perf_counter() - started:.1f} s")
            client = Client(url, verbose=False)
            print(f"{'endpoint':10} {'first call (s)':>15} {'warm call (s)':>14}")
            for endpoint, image, kwargs in CALLS:
                times = []
                for _ in range(2):
                    t = time.perf_counter()
                    client.predict(handle_file(str(ROOT / "assets" / image)), api_name=endpoint, **kwargs)
                    times.append(time.perf_counter() - t)
                print(f"{endpoint:10} {times[0]:15.2f} {times[1]:14.2f}")
        finally:
            server.terminate()
            server.wait(timeout=30)


if __name__ == "__main__":
    main()

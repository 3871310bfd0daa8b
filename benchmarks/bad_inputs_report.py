"""Prints what the running app answers to each bad input of tests/app/test_bad_inputs_api.py (a markdown table).

    python benchmarks/bad_inputs_report.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.update(HF_HUB_OFFLINE="1", YOLO_OFFLINE="1", GRADIO_ANALYTICS_ENABLED="False")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="checkpoints with a detector at DIR/yolo.pt (default: tiny random ones, written)")
    args = parser.parse_args()
    from gradio_client import Client, handle_file

    from sapiens2_demo.standins.tiny import write_all, write_tiny_detector
    from tests.app.test_bad_inputs_api import BAD_BOXES, BAD_FILES, build_payload
    from tests.conftest import launch_app

    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        if args.checkpoint_dir is None:
            write_all(tmp)
            write_tiny_detector(tmp / "yolo.pt")
        ckpts = args.checkpoint_dir or tmp
        detector = ckpts / "yolo.pt" if (ckpts / "yolo.pt").exists() else ckpts / "yolov8n-random.pt"
        demo, url = launch_app(ckpts, detector)
        client = Client(url, verbose=False)
        print("| input | endpoint | the app answered |\n|---|---|---|")
        try:
            for label, name, payload, _ in BAD_FILES:
                path = tmp / name
                path.write_bytes(build_payload(name, payload))
                print(f"| {label} | /segment | {answer(client, handle_file(str(path)), '/segment')} |")
            image = handle_file(str(ROOT / "assets" / "astronaut.jpg"))
            for label, boxes, _ in BAD_BOXES:
                print(f"| boxes {label}: `{boxes}` | /pose | {answer(client, image, '/pose', boxes=boxes)} |")
        finally:
            demo.close()


def answer(client, image, endpoint, **kwargs) -> str:
    try:
        outputs = client.predict(image, api_name=endpoint, **kwargs)
    except Exception as error:  # the message a user sees
        return f"error: {error}"
    notes = outputs[-1].replace("\n", " ")
    return f"output; notes: {notes}"


if __name__ == "__main__":
    main()

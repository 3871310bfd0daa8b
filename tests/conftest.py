"""Shared fixtures: tiny random-weight checkpoints and stand-ins in the --checkpoint-dir layout, managers on them."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
# the suite checks the float32 eager road unless a test asks for another: on a CPU with native bf16, 'auto' would
# be bf16 + compile (tests/unit/test_cpu_road.py runs that road; the fidelity test compares it with float32)
os.environ.setdefault("SAPIENS2_DTYPE", "float32")

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

import sapiens2_demo  # noqa: E402, F401 - first: turns ultralytics' run-time installs off before anything imports it

ASSETS = Path(__file__).resolve().parent.parent / "assets"


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """Every task's tiny checkpoint (smallest size) plus a random-weight YOLOv8n at yolov8n-random.pt."""
    from sapiens2_demo.standins.tiny import write_all, write_tiny_detector

    root = tmp_path_factory.mktemp("checkpoints")
    write_all(root)
    write_tiny_detector(root / "yolov8n-random.pt")
    return root


@pytest.fixture(scope="session")
def standin_dir() -> Path:
    """Stand-in checkpoints (standins/train.py: the tiny configs trained a minute or two on synthetic targets, so their
    outputs have structure; stand-ins, not models) plus a random-weight YOLOv8n at yolov8n-random.pt. Trained
    once per version of their training code and kept in the user's cache (~/.cache/sapiens2-demo/standins-<key>,
    shared with make run-standin), so reruns are free; test workers wait for the one that builds them."""
    from sapiens2_demo.standins.train import cached_standins

    return cached_standins(log=lambda message: None, progress=False)


@pytest.fixture()
def standin_manager(standin_dir):
    from sapiens2_demo.models.manager import ModelManager

    return ModelManager(checkpoint_dir=standin_dir, device="cpu", dtype="float32",
                        detector=str(standin_dir / "yolov8n-random.pt"))


@pytest.fixture()
def manager(tiny_dir):
    from sapiens2_demo.models.manager import ModelManager

    return ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32",
                        detector=str(tiny_dir / "yolov8n-random.pt"))


@pytest.fixture(scope="session")
def person_image() -> np.ndarray:
    """NASA astronaut photo (public domain), RGB uint8."""
    return np.asarray(Image.open(ASSETS / "astronaut.jpg").convert("RGB"))


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_app(checkpoint_dir, detector, *flags):
    """The real app (app.create_app) on 127.0.0.1 and a free port; returns (demo, url)."""
    import app

    args = app.parse_args(["--checkpoint-dir", str(checkpoint_dir), "--detector", str(detector), "--device", "cpu",
                           "--host", "127.0.0.1", "--port", str(free_port()), *map(str, flags)])
    demo = app.create_app(args)
    app.launch(demo, args, prevent_thread_lock=True, quiet=True)
    return demo, f"http://127.0.0.1:{args.port}/"


@pytest.fixture(scope="session")
def app_server(tiny_dir):
    demo, url = launch_app(tiny_dir, tiny_dir / "yolov8n-random.pt", "--concurrency", 2)
    yield demo, url
    demo.close()


@pytest.fixture(scope="session")
def client(app_server):
    from gradio_client import Client

    return Client(app_server[1], verbose=False)


def checkpoints_without(tiny_dir: Path, root: Path, *families: str) -> Path:
    """A --checkpoint-dir holding every tiny checkpoint except those of `families` (e.g. "matting"): for the
    tests of a missing model."""
    import shutil

    root.mkdir(parents=True, exist_ok=True)
    for path in tiny_dir.iterdir():
        if path.is_dir() and not any(path.name.startswith(f"sapiens2-{family}-") for family in families):
            shutil.copytree(path, root / path.name)
    return root


# `make test` hands whole files to its workers (--dist loadfile: a module's fixtures, an app or a compile, are made
# once), in this order: the longest files first, so that the run does not end on one worker finishing a long file
# while the other waits (the longest-first rule); the stand-ins' build starts early (test_standins.py) while the
# other files that need them come after the long ones, so no worker waits for it. Seconds on 2 cores in
# docs/tests.md; a file not named keeps its place after these.
LONGEST_FIRST = (
    "system/test_zerogpu_video.py", "system/test_compile_cli.py", "pipelines/test_standins.py",
    "system/test_export_files.py", "system/test_zerogpu_aot.py", "system/test_browser.py",
    "pipelines/test_gpu_road.py", "system/test_cli.py", "system/test_browser_viewers.py",
    "system/test_zerogpu.py", "pipelines/test_overlap.py", "unit/test_compile_beside.py", "app/test_first_burst.py",
    "unit/test_manager.py", "pipelines/test_tasks.py", "system/test_cli_ray.py", "unit/test_motion_truth.py", "pipelines/test_device_drawing.py",
)


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        path = item.nodeid.split("::", 1)[0].removeprefix("tests/")
        return LONGEST_FIRST.index(path) if path in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)  # stable: the other files, and each file's tests, keep their order

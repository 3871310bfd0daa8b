"""Shared fixtures: tiny random-weight checkpoints in the --checkpoint-dir layout, and a manager on them."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("YOLO_OFFLINE", "1")
os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ASSETS = Path(__file__).resolve().parent.parent / "assets"


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory) -> Path:
    """Every task's tiny checkpoint (smallest size) plus a random-weight YOLOv8n at yolov8n-random.pt."""
    from sapiens2_demo.tiny import write_all, write_tiny_detector

    root = tmp_path_factory.mktemp("checkpoints")
    write_all(root)
    write_tiny_detector(root / "yolov8n-random.pt")
    return root


@pytest.fixture()
def manager(tiny_dir):
    from sapiens2_demo.manager import ModelManager

    return ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32",
                        detector=str(tiny_dir / "yolov8n-random.pt"))


@pytest.fixture(scope="session")
def person_image() -> np.ndarray:
    """NASA astronaut photo (public domain), RGB uint8."""
    return np.asarray(Image.open(ASSETS / "astronaut.jpg").convert("RGB"))

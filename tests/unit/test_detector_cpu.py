"""The person detector's CPU road (models/detector_cpu.py): ultralytics' ONNX export of the user's weights under
onnxruntime gives the torch road's boxes, is made once per weights file, and steps aside when it cannot run."""

import numpy as np
import pytest
import torch

from sapiens2_demo.models import detector_cpu
from sapiens2_demo.models.manager import ModelManager
from sapiens2_demo.pose.detector import detect_people


@pytest.fixture(scope="module")
def spread_detector(tmp_path_factory):
    """A random-weight YOLOv8n whose scores spread: random batch-norm statistics and scales, so neighbouring anchors
    differ (a fresh model's identical anchors tie, and NMS then picks among equals by rounding)."""
    from ultralytics import YOLO

    torch.manual_seed(0)
    model = YOLO("yolov8n.yaml")
    for module in model.model.modules():
        if isinstance(module, torch.nn.BatchNorm2d):
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.normal_(0, 0.3)
            module.running_mean.normal_(0, 0.2)
            module.running_var.uniform_(0.5, 2)
    head = model.model.model[-1]
    for classes, boxes in zip(head.cv3, head.cv2):  # scores around 0.1-0.2 rather than 1e-4, boxes of all sizes
        classes[-1].bias.data.fill_(-2.0)
        classes[-1].weight.data.mul_(2)
        boxes[-1].weight.data.mul_(5)
    path = tmp_path_factory.mktemp("spread") / "yolov8n-spread.pt"
    model.save(str(path))
    return path


@pytest.fixture()
def onnx_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(detector_cpu, "onnx_folder", lambda: tmp_path / "onnx")
    return tmp_path / "onnx"


def manager_on(road: str, detector, tiny_dir, monkeypatch) -> ModelManager:
    monkeypatch.setenv(detector_cpu.ROAD_VARIABLE, road)
    manager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", detector=str(detector))
    manager.get_detector()
    return manager


def test_the_onnx_road_gives_the_torch_outputs_and_boxes(spread_detector, tiny_dir, onnx_cache, monkeypatch):
    """The same float32 model, its sums in another order: every anchor's box and scores differ by float32 rounding
    only (1.2e-4 px in the 640-px letterbox seen, a relative 2e-7; 1e-3 px and 1e-5 allowed), and the best box is
    the same. (Random weights give many anchors scores within 1e-7 of each other, where NMS picks among equals by
    rounding: the test compares the whole raw output, and the boxes only where the scores are apart.)"""
    image = np.random.default_rng(1).integers(0, 256, (384, 640, 3), dtype=np.uint8)  # its own letterbox size
    torch_road = manager_on("torch", spread_detector, tiny_dir, monkeypatch)
    onnx_road = manager_on("onnx", spread_detector, tiny_dir, monkeypatch)
    assert torch_road.get_detector().runner is None
    assert onnx_road.get_detector().runner is not None and any(onnx_cache.glob("yolov8n-spread-*.onnx"))
    best = [detect_people(image, road, score_threshold=0.05, classes=None, max_people=1) for road in (torch_road, onnx_road)]
    letterboxed = torch.rand(1, 3, 384, 640, generator=torch.Generator().manual_seed(2))
    with torch.inference_mode():
        expected = torch_road.get_detector().model.predictor.model(letterboxed)
        got = onnx_road.get_detector().runner.predictor.model(letterboxed)
    expected, got = (torch.as_tensor(out[0] if isinstance(out, (list, tuple)) else out) for out in (expected, got))
    assert got.shape == expected.shape == (1, 84, 5040)
    np.testing.assert_allclose(got[:, :4], expected[:, :4], atol=1e-3, rtol=0)
    np.testing.assert_allclose(got[:, 4:], expected[:, 4:], atol=1e-5, rtol=0)
    assert best[0][0].shape == best[1][0].shape == (1, 4)
    np.testing.assert_allclose(best[1][0], best[0][0], atol=0.01, rtol=0)
    np.testing.assert_allclose(best[1][1], best[0][1], atol=1e-5, rtol=0)


def test_the_export_is_made_once_per_weights_file(spread_detector, tiny_dir, onnx_cache, monkeypatch):
    from ultralytics import YOLO

    manager_on("onnx", spread_detector, tiny_dir, monkeypatch)
    [made] = onnx_cache.glob("*.onnx")
    monkeypatch.setattr(YOLO, "export", lambda *a, **k: pytest.fail("exported again"))
    again = manager_on("onnx", spread_detector, tiny_dir, monkeypatch)
    assert again.get_detector().runner is not None and list(onnx_cache.glob("*.onnx")) == [made]
    assert not list(spread_detector.parent.glob("*.onnx"))  # nothing written beside the user's weights


def test_without_onnxruntime_the_torch_model_serves(spread_detector, tiny_dir, onnx_cache, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "onnxruntime" else real(name, *a))
    manager = manager_on("onnx", spread_detector, tiny_dir, monkeypatch)
    assert manager.get_detector().runner is None and not onnx_cache.exists()
    image = np.random.default_rng(1).integers(0, 256, (384, 640, 3), dtype=np.uint8)
    assert len(detect_people(image, manager, score_threshold=0.05, classes=None)[0]) >= 1


def test_a_failed_export_leaves_the_torch_model(spread_detector, tiny_dir, onnx_cache, monkeypatch):
    from ultralytics import YOLO

    def broken(*args, **kwargs):
        raise RuntimeError("no exporter here")

    monkeypatch.setattr(YOLO, "export", broken)
    manager = manager_on("onnx", spread_detector, tiny_dir, monkeypatch)
    assert manager.get_detector().runner is None

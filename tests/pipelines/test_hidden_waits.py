"""What the ledger does not look into, looked into once: transformers' processor and the models' forwards, on the
device road (a recording ledger, tensors marked as on the device passed straight in). The ledger hands them plain
tensors (models/inference.py), so a wait inside would hold a GPU's queue unseen, as the processor's box path did
(four waits a frame; pose cuts its own crops now, models/crops.py)."""

import numpy as np
import pytest


@pytest.mark.parametrize("task", ["seg", "normal"])
def test_the_processor_resizes_without_a_wait(manager, person_image, task):
    """Its resize and normalise path reads nothing back; only its mean and std meet the device (made there once a
    process on CUDA: lru-cached)."""
    from sapiens2_demo import ledger
    from sapiens2_demo.models.inference import PADDED_TASKS, upload
    from sapiens2_demo.models.registry import checkpoint

    loaded = manager.get(checkpoint(task, "0.4b"))
    with ledger.recording() as book:
        frames = upload([person_image, person_image], "cpu")
        loaded.processor(images=list(frames), return_tensors="pt", do_pad=task in PADDED_TASKS)
    assert not book.of("d2h")
    crossing = [e for e in book.events if e.wait]
    assert crossing and all(e.kind == "h2d" and e.shape == (3, 1, 1) for e in crossing), crossing


@pytest.mark.parametrize("task", ["seg", "normal", "pointmap", "matting", "pose"])
def test_a_forward_reads_nothing_back(manager, person_image, task):
    """Nothing inside a model's forward copies back or waits (no `.item()`, no data-sized op): one queued unit.
    (The host tensors that meet the device inside it are the simulated device's: weights and tables made from
    them, which on CUDA are there already.)"""
    import torch

    from sapiens2_demo import ledger
    from sapiens2_demo.models.crops import crop_people
    from sapiens2_demo.models.inference import preprocess, upload
    from sapiens2_demo.models.registry import checkpoint

    loaded = manager.get(checkpoint(task, "1b" if task == "matting" else "0.4b"))
    with ledger.recording() as book:
        frames = upload([person_image, person_image], "cpu")
        pixels = (crop_people(loaded, frames, [0, 1], np.float32([[0, 0, 100, 200], [10, 10, 300, 400]]))
                  if task == "pose" else preprocess(loaded, frames, task))
        before = len(book.events)
        with torch.inference_mode():
            outputs = loaded.model(pixel_values=pixels)
        inside = book.events[before:]
    assert outputs is not None and inside  # looked into: the weights met the simulated device
    assert not [e for e in inside if e.kind != "h2d"], [e for e in inside if e.kind != "h2d"]


def test_the_person_detector_reads_nothing_back(manager):
    """The detector's network, as detect_device.py runs it on the device: nothing inside copies back or waits."""
    import torch

    from sapiens2_demo import ledger
    from sapiens2_demo.pipelines.detect_device import _network

    net, _ = _network(manager.get_detector())
    with ledger.recording() as book:
        x = ledger.to_device(np.zeros((2, 384, 640, 3), np.uint8), "cpu", non_blocking=True)
        x = x.permute(0, 3, 1, 2).float().div_(255)
        before = len(book.events)
        with torch.inference_mode():
            net(x)
        inside = book.events[before:]
    assert inside and not [e for e in inside if e.kind != "h2d"]

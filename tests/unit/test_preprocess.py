"""The CPU's pre-processing (`models.inference.preprocess`): the processor's own steps on frames laid out channels
last, the same bytes as `Sapiens2ImageProcessor` called as usual, for every frame shape and both resize rules."""

import numpy as np
import pytest
import torch
from transformers import Sapiens2ImageProcessor

from sapiens2_demo.models.inference import preprocess, processed_channels_last, upload
from sapiens2_demo.models.manager import LoadedModel

MEAN, STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]  # the released checkpoints' (preprocessor_config.json)


def processor(**extra) -> Sapiens2ImageProcessor:
    return Sapiens2ImageProcessor(size={"height": 64, "width": 48}, image_mean=MEAN, image_std=STD, resample=2,
                                  **extra)


def frames(height: int, width: int, count: int = 3, seed: int = 0) -> list[np.ndarray]:
    """Smooth pictures with edges and noise: every resize weight matters, none of them rounds the same way twice."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:height, 0:width]
    out = []
    for i in range(count):
        base = np.stack([(xx * (3 + i)) % 256, (yy * 5) % 256, ((xx + yy) * 2 + 40 * i) % 256], axis=-1)
        out.append(np.clip(base + rng.integers(-20, 21, base.shape), 0, 255).astype(np.uint8))
    return out


@pytest.mark.parametrize("pad", [False, True], ids=["stretch", "keep-aspect-pad"])
@pytest.mark.parametrize("shape", [(72, 128), (128, 72), (47, 33), (200, 61), (64, 48)])
def test_the_same_bytes_as_the_processor(pad, shape):
    proc, batch = processor(), frames(*shape)
    expected = proc(images=batch, return_tensors="pt", do_pad=pad)["pixel_values"]
    got = processed_channels_last(proc, batch, pad)
    assert got.shape == expected.shape == (3, 3, 64, 48)
    assert got.dtype == expected.dtype and got.is_contiguous()
    assert torch.equal(got, expected)


@pytest.mark.parametrize("pad", [False, True])
def test_frames_of_several_sizes_come_back_in_order(pad):
    proc = processor()
    batch = [frames(72, 128, 1, seed=1)[0], frames(90, 50, 1, seed=2)[0], frames(72, 128, 1, seed=3)[0]]
    expected = proc(images=batch, return_tensors="pt", do_pad=pad)["pixel_values"]
    assert torch.equal(processed_channels_last(proc, batch, pad), expected)


def test_upload_s_tensors_are_read_as_the_frames_they_came_from():
    proc, batch = processor(), frames(72, 128)
    expected = proc(images=batch, return_tensors="pt", do_pad=True)["pixel_values"]
    assert torch.equal(processed_channels_last(proc, upload(batch, "cpu"), True), expected)


def test_a_config_asking_for_more_goes_to_the_processor_itself():
    batch = frames(72, 128)
    assert processed_channels_last(processor(do_center_crop=True, crop_size={"height": 32, "width": 32}),
                                   batch, False) is None
    assert processed_channels_last(processor(do_normalize=False), batch, False) is None
    grey = [f[..., 0] for f in batch]
    assert processed_channels_last(processor(), grey, False) is None


@pytest.mark.parametrize("task", ["seg", "normal"])
def test_preprocess_on_the_cpu_takes_this_road_and_gives_the_model_s_dtype(task, monkeypatch):
    proc, batch = processor(), frames(72, 128)
    loaded = LoadedModel(model=None, processor=proc, nbytes=0, source="test", device="cpu", dtype=torch.bfloat16)
    expected = proc(images=batch, return_tensors="pt", do_pad=task == "normal")["pixel_values"].to(torch.bfloat16)
    calls = []
    monkeypatch.setattr(Sapiens2ImageProcessor, "__call__", lambda self, *a, **k: calls.append(k))
    got = preprocess(loaded, batch, task)
    assert calls == []  # the processor's steps, not its call
    assert got.dtype == torch.bfloat16 and torch.equal(got, expected)

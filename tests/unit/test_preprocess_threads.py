"""The CPU's pre-processing on one torch thread (its small ops cost more in waking torch's pool than in work on a
busy machine), with the values the processor gives on all of them, and the thread count given back after."""

from types import SimpleNamespace

import numpy as np
import torch
from transformers import Sapiens2ImageProcessor

from sapiens2_demo.models.inference import one_thread_on_cpu, preprocess


class _Recording:
    """The processor, recording torch's thread count during each call."""

    def __init__(self, processor):
        self.processor, self.threads = processor, []

    def __call__(self, *args, **kwargs):
        self.threads.append(torch.get_num_threads())
        return self.processor(*args, **kwargs)


def test_preprocessing_on_the_cpu_runs_on_one_thread_with_the_same_values():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        processor = Sapiens2ImageProcessor(size={"height": 64, "width": 48})
        recording = _Recording(processor)
        loaded = SimpleNamespace(processor=recording, device="cpu", dtype=torch.float32)
        frames = [np.random.default_rng(i).integers(0, 256, (90, 160, 3), dtype=np.uint8) for i in range(3)]
        for task in ("seg", "normal"):  # stretched, and padded to keep the aspect
            ours = preprocess(loaded, frames, task)
            expected = processor(images=frames, return_tensors="pt", do_pad=task == "normal")["pixel_values"]
            assert torch.equal(ours, expected)
        assert recording.threads == [1, 1]
        assert torch.get_num_threads() == 2  # given back
    finally:
        torch.set_num_threads(before)


def test_nested_and_cuda_uses_leave_the_thread_count_as_it_was():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with one_thread_on_cpu("cpu"):
            with one_thread_on_cpu("cpu"):
                assert torch.get_num_threads() == 1
            assert torch.get_num_threads() == 1  # the outer one still holds it
        assert torch.get_num_threads() == 2
        with one_thread_on_cpu("cuda:0"):  # the CUDA road's pre-processing runs there: nothing changed here
            assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)

"""Overlapped batches (gpu.overlapped): a GPU call of several batches runs each batch's post-processing,
drawing and copy back in a worker thread beside the next batch's forward, as on CUDA. Forced on here
(gpu.OVERLAP = "1"), on the CPU's numpy path and on the device path CUDA takes: the answers equal the
one-batch-after-the-other path's, in order, and errors come back."""

import dataclasses
import threading
import time

import numpy as np
import pytest

from sapiens2_demo import gpu, tasks
from sapiens2_demo.pipelines import dense, device_post
from sapiens2_demo.results import DrawnFrame, Job

STAGED = ["segment", "normals", "pointmap", "matting"]
OPTIONS = {"segment": {}, "normals": {"remove_background": True}, "pointmap": {"remove_background": True},
           "matting": {}}


@pytest.fixture()
def key(manager):
    return gpu.register(manager)


@pytest.fixture()
def frames(person_image):
    """Five different frames of two sizes: batches of two leave a partial last batch."""
    crops = [person_image[:96, :160], person_image[10:106, 5:165], person_image[:150, :90],
             person_image[20:170, 30:120], person_image[40:136, 40:200]]
    return [np.ascontiguousarray(crop) for crop in crops]


def _answers(key, frames, job, overlap: str, monkeypatch):
    monkeypatch.setattr(gpu, "OVERLAP", overlap)
    [answer] = gpu.answers(key, frames, [job], batch_size=2)
    return answer


def _assert_same(serial, overlapped):
    assert len(serial) == len(overlapped)
    for a, b in zip(serial, overlapped):
        if isinstance(a, DrawnFrame):
            np.testing.assert_array_equal(a.image, b.image)
            continue
        for name, value in vars(a).items():
            if isinstance(value, np.ndarray):
                np.testing.assert_array_equal(value, getattr(b, name), err_msg=name)
            else:
                assert value == getattr(b, name), name


@pytest.mark.parametrize("device_path", [False, True], ids=["numpy", "device"])
@pytest.mark.parametrize("task", STAGED)
def test_overlapped_results_equal_the_serial_ones(key, frames, task, device_path, monkeypatch):
    if device_path:  # CUDA's post-processing, on the CPU
        monkeypatch.setattr(dense, "use_device_post", lambda device: True)
    job = Job(task, tasks.get(task).default_size(), OPTIONS[task])
    calls = []
    start = tasks.get(task).start

    def counted(batch, *args, **kwargs):
        calls.append(len(batch))
        return start(batch, *args, **kwargs)

    serial = _answers(key, frames, job, "0", monkeypatch)
    spec = tasks.get(task)
    tasks.register(dataclasses.replace(spec, start=counted))
    try:
        overlapped = _answers(key, frames, job, "1", monkeypatch)
    finally:
        tasks.register(spec)
    assert calls == [2, 2, 1]  # the overlapped path ran, batch by batch
    if task in ("normals", "pointmap"):  # masked with the body-part segmentation, finished beside too
        assert all(r.mask is not None and r.mask.shape == f.shape[:2] for r, f in zip(overlapped, frames))
    _assert_same(serial, overlapped)


@pytest.mark.parametrize("task", STAGED)
def test_overlapped_drawing_equals_the_serial_drawing(key, frames, task, monkeypatch, staged):
    """The pictures drawn where the model runs (a video that wants only pictures), and the depth colour scale
    they carry over (DrawnFrame.state)."""
    monkeypatch.setattr(device_post, "use_device_post", lambda device: True)
    spec = tasks.get(task)
    drawing = {k: v for k, v in {**spec.defaults(), "opaque": True}.items() if k != "background_image"}
    job = Job(task, spec.default_size(), {**OPTIONS[task], "draw": drawing})
    serial = _answers(key, frames, job, "0", monkeypatch)
    used = staged(task, "draw_start")
    overlapped = _answers(key, frames, job, "1", monkeypatch)
    assert used == [2, 2, 1] and all(isinstance(r, DrawnFrame) for r in overlapped)
    _assert_same(serial, overlapped)
    assert repr(serial[-1].state) == repr(overlapped[-1].state)


def test_a_batch_is_finished_beside_the_next_batchs_start_and_the_order_is_kept():
    events, lock = [], threading.Lock()

    def log(what):
        with lock:
            events.append(what)

    def start(batch):
        log(f"start {batch[0]}")
        time.sleep(0.05)

        def finish():
            log(f"finish {batch[0]} begins")
            time.sleep(0.12 if batch[0] == 0 else 0.01)  # the first batch finishes last of all if unordered
            log(f"finish {batch[0]} ends")
            return [f"result {i}" for i in batch]

        return finish

    results = gpu.overlapped(start, [[0, 1], [2, 3], [4]])
    assert results == [f"result {i}" for i in range(5)]
    assert events.index("start 2") < events.index("finish 0 ends")  # beside, not after
    assert events.index("finish 0 ends") < events.index("finish 2 begins")  # one batch in the worker at a time


@pytest.mark.parametrize("failing", ["start", "finish"])
def test_an_error_in_either_stage_comes_back(failing):
    finished = []

    def start(batch):
        if failing == "start" and batch == [2]:
            raise ValueError("start of batch 2")

        def finish():
            if failing == "finish" and batch == [1]:
                raise ValueError("finish of batch 1")
            finished.append(batch[0])
            return batch

        return finish

    with pytest.raises(ValueError, match=f"{failing} of batch"):
        gpu.overlapped(start, [[0], [1], [2], [3]])
    assert 3 not in finished  # nothing runs on after the error


def test_an_error_in_a_finish_reaches_the_caller_of_a_gpu_call(key, frames, monkeypatch):
    def broken(device):
        raise RuntimeError("post-processing failed")

    monkeypatch.setattr(dense, "upsample_labels", lambda *args: broken(None))
    monkeypatch.setattr(gpu, "OVERLAP", "1")
    with pytest.raises(RuntimeError, match="post-processing failed"):
        gpu.answers(key, frames, [Job("segment", "0.4b", {})], batch_size=2)
    [answer] = gpu.infer(key, frames, [Job("segment", "0.4b", {}, tolerate_errors=True)], batch_size=2)
    assert isinstance(answer, RuntimeError)


def test_only_calls_of_several_batches_and_tasks_that_do_not_follow_frames_overlap(key, frames, monkeypatch,
                                                                                   staged):
    monkeypatch.setattr(gpu, "OVERLAP", "1")
    used, posed = staged("segment"), staged("pose")
    gpu.answers(key, frames[:2], [Job("segment", "0.4b", {})], batch_size=2)  # one batch: nothing to overlap
    gpu.answers(key, frames[:3], [Job("pose", "0.4b", {"boxes": "[[0, 0, 50, 80]]"})], batch_size=1)
    assert used == [] and posed == []  # pose off the device road follows people from frame to frame
    gpu.answers(key, frames[:3], [Job("segment", "0.4b", {})], batch_size=2)
    assert used == [2, 1]


@pytest.mark.parametrize("task", ["normals", "pointmap"])
def test_a_steady_task_overlaps_unless_smoothed_over_time(key, frames, task, monkeypatch, staged):
    """temporal_smoothing makes each batch go on from the one before (the filter's state): then, and only then,
    its batches run one after the other."""
    monkeypatch.setattr(gpu, "OVERLAP", "1")
    used = staged(task)
    gpu.answers(key, frames[:3], [Job(task, "0.4b", {"remove_background": True})], batch_size=2)
    assert used == [2, 1]
    gpu.answers(key, frames[:3], [Job(task, "0.4b", {"remove_background": True, "temporal_smoothing": True})],
                batch_size=2)
    assert used == [2, 1]


def test_the_overlap_setting(monkeypatch):
    monkeypatch.setattr(gpu, "OVERLAP", "auto")  # overlapped wherever it runs: it measured faster on the CPU too
    assert gpu.overlaps("cuda:0") and gpu.overlaps("cpu") and not gpu.overlaps("mps")
    monkeypatch.setattr(gpu, "OVERLAP", "1")
    assert gpu.overlaps("cpu")
    monkeypatch.setattr(gpu, "OVERLAP", "0")
    assert not gpu.overlaps("cuda")

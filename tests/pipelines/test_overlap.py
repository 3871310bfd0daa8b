"""Overlapped batches (sapiens2_demo/overlap.py): a GPU call of several batches runs each batch's post-processing,
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


@pytest.fixture(autouse=True)
def one_thread():
    """One intra-op thread while a test runs: the post-processing in the worker thread runs beside the next
    forward, and torch's CPU kernels split their work by the threads they get at that moment, which moves where
    the vectorised loops end and the scalar ones begin: a 1-16 ulp difference in the device road's float maps (seen
    once in a full run on 2 busy cores, never alone). One thread removes that, so the answers must still be equal
    to the bit: what these tests check is the order and the batching, not the rounding."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


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


@pytest.fixture()
def slow_task():
    """`slow_task(start)`: a task named "slow" whose two stages are `start(batch)` (its frames are any items), for
    the pipeline's order and errors; removed after the test."""
    from sapiens2_demo.tasks.spec import TaskSpec

    def register(start):
        def staged(batch, manager, size, **_):
            return start(batch)

        tasks.register(TaskSpec("slow", "Slow", "Slow", "seg", ("0.4b",),
                                run=lambda batch, *args, **kwargs: start(batch)(), start=staged))

    yield register
    tasks.unregister("slow")


def test_a_batch_is_finished_beside_the_next_batchs_start_and_the_order_is_kept(key, slow_task, monkeypatch):
    events, lock = [], threading.Lock()
    monkeypatch.setattr(gpu, "OVERLAP", "1")

    def log(what):
        with lock:
            events.append(what)

    def start(batch):
        log(f"start {batch[0]}")
        time.sleep(0.05)

        def finish():
            log(f"finish {batch[0]} begins")
            time.sleep(0.12 if batch[0] in (0, 2, 4) else 0.01)  # batch 0 would finish after batch 2 if unordered
            log(f"finish {batch[0]} ends")
            return [f"result {i}" for i in batch]

        return finish

    slow_task(start)
    [results] = gpu.answers(key, list(range(5)), [Job("slow", "0.4b", {})], batch_size=2)
    assert results == [f"result {i}" for i in range(5)]
    assert events.index("start 2") < events.index("finish 0 ends")  # beside, not after
    assert events.index("finish 0 ends") < events.index("finish 2 begins")  # one batch in the worker at a time
    events.clear()  # a video's chunks: the next chunk's first batch starts beside the last one's finish
    chunks = [[0, 1, 2, 3], [4, 5], [6, 7, 8]]
    streamed = list(gpu.stream(key, chunks, [Job("slow", "0.4b", {})], batch_size=2))
    assert [frames for frames, _ in streamed] == chunks
    assert [replies[0] for _, replies in streamed] == [[f"result {i}" for i in chunk] for chunk in chunks]
    assert events.index("start 4") < events.index("finish 2 ends")
    assert events.index("start 6") < events.index("finish 4 ends")


def test_a_streamed_chunk_comes_out_once_its_last_batch_is_back(key, slow_task, monkeypatch):
    """Not after the next chunk's every forward: the writer draws and encodes a chunk while the next one runs
    (a chunk of 16 frames held back behind 16 more forwards left the writer 8-10 frames behind at a video's end)."""
    events = []
    monkeypatch.setattr(gpu, "OVERLAP", "1")

    def start(batch):
        events.append(f"start {batch[0]}")
        return lambda: [f"result {i}" for i in batch]

    slow_task(start)
    chunks = [[0, 1], [2, 3, 4, 5, 6, 7]]
    for frames, replies in gpu.stream(key, chunks, [Job("slow", "0.4b", {})], batch_size=2):
        assert replies == [[f"result {i}" for i in frames]]
        events.append(f"out {frames}")
    assert events == ["start 0", "start 2", "out [0, 1]", "start 4", "start 6", "out [2, 3, 4, 5, 6, 7]"]


@pytest.mark.parametrize("failing", ["start", "finish"])
def test_an_error_in_either_stage_comes_back(key, slow_task, monkeypatch, failing):
    finished = []
    monkeypatch.setattr(gpu, "OVERLAP", "1")

    def start(batch):
        if failing == "start" and batch == [2]:
            raise ValueError("start of batch 2")

        def finish():
            if failing == "finish" and batch == [1]:
                raise ValueError("finish of batch 1")
            finished.append(batch[0])
            return batch

        return finish

    slow_task(start)
    with pytest.raises(ValueError, match=f"{failing} of batch"):
        gpu.answers(key, [0, 1, 2, 3], [Job("slow", "0.4b", {})], batch_size=1)
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


@pytest.mark.parametrize("task", ["pointmap", "pose"])
def test_a_video_streamed_equals_its_chunks_called_one_by_one(key, frames, task, monkeypatch):
    """gpu.stream (a local video's chunks as one pipeline: each chunk's last batch finished beside the next chunk's
    first, the depth scale's running state and the next chunk's people kept on this side) against one `infer` per
    chunk with the drawing's state sent back in (DrawnFrame.state), as a ZeroGPU video runs."""
    monkeypatch.setattr(device_post, "use_device_post", lambda device: True)  # pictures drawn, people per chunk
    monkeypatch.setattr(gpu, "OVERLAP", "1")
    spec = tasks.get(task)
    if task == "pose":
        job = Job(task, "0.4b", {"detect_every": 4, "frame_index": 0, "previous": None})
    else:
        drawing = {k: v for k, v in {**spec.defaults(), "opaque": True}.items() if k != "background_image"}
        job = Job(task, "0.4b", {"remove_background": True, "draw": drawing})
    chunks = [frames[:2], frames[2:4], frames[4:]]
    assert gpu.streams(key, [job])
    streamed = [replies[0] for _, replies in gpu.stream(key, chunks, [job], batch_size=1)]
    called, state = [], None
    for chunk in chunks:
        [answer] = gpu.answers(key, chunk, [Job(job.task, job.size, {**job.options, "draw_state": state})],
                               batch_size=1)
        called.append(answer)
        state = getattr(answer[-1], "state", None)
    assert [len(r) for r in streamed] == [2, 2, 1]
    for a, b in zip(called, streamed):
        _assert_same(a, b)


def test_a_streamed_chunks_error_is_its_reply_and_the_next_chunks_go_on(key, frames, monkeypatch):
    monkeypatch.setattr(gpu, "OVERLAP", "1")
    spec = tasks.get("segment")

    def start(batch, *args, **kwargs):
        if batch[0] is frames[2]:
            raise ValueError("a bad frame")
        return spec.start(batch, *args, **kwargs)

    tasks.register(dataclasses.replace(spec, start=start))
    try:
        chunks = [frames[:2], frames[2:4], frames[4:]]
        replies = [r[0] for _, r in gpu.stream(key, chunks, [Job("segment", "0.4b", {}, tolerate_errors=True)], 1)]
        with pytest.raises(ValueError, match="a bad frame"):
            list(gpu.stream(key, chunks, [Job("segment", "0.4b", {})], 1))
    finally:
        tasks.register(spec)
    assert isinstance(replies[1], ValueError) and [len(replies[0]), len(replies[2])] == [2, 1]

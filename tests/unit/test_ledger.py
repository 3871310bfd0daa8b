"""The transfer ledger's own tests: off it changes nothing; on it sees a copy back, a wait, an upload (a host tensor
met on the device, once per tensor), the order of forwards and waits (overlap), and the pipelines' answers on the
road it forces equal the device road's without it."""

import threading

import numpy as np
import pytest
import torch

from sapiens2_demo import ledger
from sapiens2_demo.ledger import Event, Ledger
from sapiens2_demo.models.inference import upload


def test_off_it_changes_nothing():
    assert ledger.active() is None and not ledger.device_road("cpu") and ledger.device_road("cuda:0")
    frames = upload([np.zeros((4, 6, 3), np.uint8)], "cpu")
    assert type(frames[0]) is torch.Tensor  # no subclass when off
    assert ledger.on_device(frames[0]) is frames[0]


def test_it_sees_a_copy_back_and_a_wait():
    with ledger.recording() as book:
        assert ledger.device_road("cpu")  # on a CPU the CUDA road is taken while it records
        [image] = upload([np.zeros((4, 6, 3), np.uint8)], "cpu")
        maps = ledger.forward("model", {"out": torch.ones(2, 3, dtype=torch.float32)})
        doubled = maps["out"] * 2
        host = doubled.cpu().numpy()  # a blocking copy back: a wait
        count = int((doubled > 1).sum().item())  # .item(): a wait
        picked = doubled[doubled > 1]  # boolean mask: the count is read back, a wait
        later = doubled.to("cpu", non_blocking=True)  # not a wait
    assert host.shape == (2, 3) and count == 6 and picked.numel() == 6 and later.shape == (2, 3)
    assert type(host) is np.ndarray and type(later) is torch.Tensor  # what crossed is a plain host value
    kinds = [(e.kind, e.what, e.wait) for e in book.events]
    assert kinds == [("h2d", "upload", False), ("forward", "model", False), ("d2h", "cpu", True),
                     ("d2h", "item", True), ("wait", "__getitem__", True), ("d2h", "to", False)]
    upload_event, _, copy_back, item, *_ = book.events
    assert upload_event.nbytes == 4 * 6 * 3 and upload_event.dtype == "uint8" and image.shape == (3, 4, 6)
    assert copy_back.nbytes == 6 * 4 and copy_back.dtype == "float32" and copy_back.shape == (2, 3)
    assert copy_back.batch == 0 and item.nbytes == 8  # the sum is int64
    assert copy_back.where.startswith("tests/") is False and "test_ledger" not in copy_back.where  # our code only
    assert book.waits == 3 and book.bytes("d2h") == 24 + 8 + 24
    assert ledger.active() is None


def test_a_host_tensor_met_on_the_device_is_an_upload_once():
    table = torch.arange(256, dtype=torch.float32)  # e.g. a colour table cached on the device
    with ledger.recording() as book:
        values = ledger.on_device(torch.zeros(256))
        values + table
        values * table
        values + torch.ones(())  # a 0-dim host tensor is a scalar on CUDA too: no copy
    [event] = book.of("h2d")
    assert event.what == "implicit" and event.nbytes == 256 * 4 and event.wait  # pageable: the host waits


def test_a_table_uploaded_once_from_pinned_memory_crosses_without_a_wait():
    table = ledger.upload_once(np.arange(64, dtype=np.float32), "cpu")  # e.g. the decoder's blur band
    assert type(table) is torch.Tensor  # plain, in a cache: nothing of the ledger's stays when it is off
    with ledger.recording() as book:
        values = ledger.on_device(torch.zeros(64))
        values * table
        values + table
    [event] = book.of("h2d")
    assert event.nbytes == 64 * 4 and not event.wait and book.waits == 0


def test_overlap_is_the_next_forward_queued_before_the_host_waits():
    book = Ledger()
    for i in range(3):  # serial: forward, then the copy back on the queuing thread
        book.copy_in(torch.zeros(2), "upload", blocking=False)
        book.forward("model")
        book.add(Event("d2h", "cpu", 8, wait=True))
    assert book.overlapped() == (3, 0)
    book = Ledger()
    for i in range(3):  # overlapped: the copy back in a worker, joined after the next forward is queued
        book.copy_in(torch.zeros(2), "upload", blocking=False)
        book.forward("model")
        if i:
            book.add(Event("join", "worker", batch=i - 1))
        worker = threading.Thread(target=lambda: book.add(Event("d2h", "cpu", 8, wait=True)))
        worker.start()
        worker.join()
    book.add(Event("join", "worker", batch=2))
    assert book.overlapped() == (3, 2) and {e.thread for e in book.of("d2h")} == {"worker"}
    book.add(Event("wait", "synchronize", wait=True))
    assert book.overlapped() == (3, 2)  # after the last batch: nothing left to overlap


def test_a_second_forward_on_the_same_frames_is_the_same_batch():
    book = Ledger()
    book.copy_in(torch.zeros(2), "upload", blocking=False)
    book.forward("seg")
    book.forward("normals")  # the mask's model and the task's on one upload
    book.forward("detector", batch=False)
    book.copy_in(torch.zeros(2), "upload", blocking=False)
    book.forward("seg")
    assert book.batches == 2 and [e.batch for e in book.of("forward")] == [0, 0, 0, 1]


def test_one_ledger_at_a_time():
    with ledger.recording(), pytest.raises(RuntimeError, match="recording already"):
        with ledger.recording():
            pass
    assert ledger.active() is None


def test_a_cuda_synchronize_is_a_wait(monkeypatch):
    """torch.cuda.synchronize (of the device, a stream or an event) is counted while recording, and put back after."""
    calls = []
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *args, **kwargs: calls.append("device"))
    monkeypatch.setattr(torch.cuda.Event, "synchronize", lambda self: calls.append("event"))
    with ledger.recording() as book:
        torch.cuda.synchronize()
        torch.cuda.Event.synchronize(object())
    assert calls == ["device", "event"]
    assert [(e.kind, e.what, e.wait) for e in book.events] == [("wait", "synchronize", True),
                                                                ("wait", "event.synchronize", True)]
    torch.cuda.synchronize()
    assert calls[-1] == "device" and len(book.events) == 2  # off again


def test_it_counts_the_operations_queued_on_the_device_not_views_or_host_work():
    """Each operation on a device tensor is at least one kernel launch on CUDA (host time the device may wait for);
    views, metadata and host tensors' operations launch nothing there."""
    host = torch.ones(4, 6)
    with ledger.recording() as book:
        on = ledger.on_device(torch.ones(4, 6))
        host * 2 + 1  # the host's: not counted
        view = on.reshape(24)[2:5].unsqueeze(0)  # views (a plain slice too) and metadata: no launch
        assert on.permute(1, 0).shape == (6, 4) and on.dim() == 2 and view.numel() == 3
        assert book.launches == 0
        summed = (on * 2).sum()  # two launches
        picked = on[torch.tensor([0, 2])]  # a gather: one, and the index crosses
        copied = on.permute(1, 0).reshape(24)  # not a view of a transposed tensor: a copy, one
        assert summed.shape == () and picked.shape == (2, 6) and copied.shape == (24,)
    assert book.launches == 4, book.launch_table()
    assert book.summary()["launches"] == 4 and book.launches_on("queue") == 4 and book.launches_on("worker") == 0
    with ledger.recording() as book:
        maps = ledger.forward("model", {"out": torch.ones(2, 3)})  # this thread queues the forwards
        worker = threading.Thread(target=lambda: maps["out"] * 2)  # post-processing beside them
        worker.start()
        worker.join()
        maps["out"] + 1
    assert (book.launches_on("queue"), book.launches_on("worker")) == (1, 1)
    assert all(where.startswith("?") or "test_ledger" not in where for where, _ in book.launched)  # our code only

"""The pinned buffers that carry video frames up to the GPU (`models.inference.Staging`): kept and reused, never
handed to two batches at once, a buffer still crossing waited for only when every kept one is."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from sapiens2_demo.models.inference import Staging, upload


class FakeCopy:
    """Stands in for a CUDA event after a buffer's copy: done or not, and whether anyone waited on it."""

    def __init__(self, done: bool):
        self.done, self.waited = done, False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.waited, self.done = True, True


class Recorded(Staging):
    def __init__(self):
        super().__init__(pinned=False)
        self.next_copy = FakeCopy(True)

    def _copies_queued(self):
        return self.next_copy


def test_a_buffer_whose_copy_is_done_is_reused():
    staging = Recorded()
    first = staging.take((8, 72, 128, 3))
    assert first.shape == (8, 72, 128, 3) and str(first.dtype) == "torch.uint8"
    staging.give(first)
    assert staging.take((8, 72, 128, 3)) is first
    assert staging.take((8, 72, 128, 3)) is not first  # taken, not given back: a new one


def test_buffers_still_crossing_are_not_handed_out_until_all_kept_ones_are():
    staging = Recorded()
    shape = (2, 4, 6, 3)
    copies = []
    buffers = [staging.take(shape) for _ in range(Staging.KEEP)]
    assert len({id(b) for b in buffers}) == Staging.KEEP
    for b in buffers:
        staging.next_copy = FakeCopy(False)
        copies.append(staging.next_copy)
        staging.give(b)
    oldest = staging.take(shape)  # every kept buffer still crossing: the oldest, after waiting for its copy
    assert oldest is buffers[0] and copies[0].waited and not copies[1].waited and not copies[2].waited
    copies[2].done = True  # a later one finished first: taken without a wait
    assert staging.take(shape) is buffers[2] and not copies[1].waited


def test_at_most_keep_buffers_a_shape_and_shapes_shapes_are_kept():
    staging = Recorded()
    extra = [staging.take((1, 2, 2, 3)) for _ in range(Staging.KEEP + 2)]
    for b in extra:
        staging.give(b)
    assert len(staging._pools[(1, 2, 2, 3)]) == Staging.KEEP
    for n in range(2, 2 + Staging.SHAPES):
        staging.give(staging.take((n, 2, 2, 3)))
    assert (1, 2, 2, 3) not in staging._pools and len(staging._pools) == Staging.SHAPES


def test_threads_taking_at_once_never_share_a_buffer():
    staging, held, shared, lock = Recorded(), set(), [], threading.Lock()

    def work():
        for _ in range(300):
            b = staging.take((1, 2, 2, 3))
            with lock:
                if id(b) in held:
                    shared.append(b)
                held.add(id(b))
            b.fill_(1)  # some work while it is held
            with lock:
                held.discard(id(b))
            staging.give(b)
        return True

    with ThreadPoolExecutor(4) as pool:
        assert all(done.result() for done in [pool.submit(work) for _ in range(4)])  # an error in a thread fails here
    assert shared == [], "one buffer handed to two batches at once"
    assert len(staging._pools[(1, 2, 2, 3)]) <= Staging.KEEP


@pytest.mark.parametrize("count", [1, 3])
def test_upload_on_the_cpu_gives_each_frame_as_it_was(count):
    rng = np.random.default_rng(count)
    frames = [rng.integers(0, 256, (5, 7, 3), dtype=np.uint8) for _ in range(count)]
    up = upload(frames, "cpu")
    assert [tuple(t.shape) for t in up] == [(3, 5, 7)] * count
    for t, f in zip(up, frames):
        np.testing.assert_array_equal(t.permute(1, 2, 0).numpy(), f)

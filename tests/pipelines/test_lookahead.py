"""The next batch pre-processed beside this batch's forwards on a CPU (models/inference.Lookahead, used by
overlap.run): each batch's frames pre-processed once per model, after the first batches in the lookahead's own
thread, and the answers those of the plain path."""

import threading

import numpy as np
import pytest

from sapiens2_demo import gpu
from sapiens2_demo.models import inference
from sapiens2_demo.results import Job


@pytest.fixture()
def clip(person_image):
    """Nine frames of one size, each different."""
    return [np.ascontiguousarray(np.roll(person_image, 7 * i, axis=1)) for i in range(9)]


@pytest.fixture()
def calls(monkeypatch):
    """Each pre-processing done: (the model's task, the frames' first pixels' address, the thread's name)."""
    done, lock, original = [], threading.Lock(), inference.processed_channels_last

    def counted(processor, images, pad):
        with lock:
            done.append((pad, inference._address(images[0]), threading.current_thread().name))
        return original(processor, images, pad)

    monkeypatch.setattr(inference, "processed_channels_last", counted)
    return done


@pytest.mark.parametrize("task", ["normals", "matting"])
def test_a_streamed_videos_batches_are_preprocessed_once_each_most_of_them_ahead(key, clip, calls, monkeypatch, task):
    monkeypatch.setattr(gpu, "OVERLAP", "1")
    options, size = ({"remove_background": True}, "0.4b") if task == "normals" else ({}, "1b")
    chunks = [clip[:2], clip[2:6], clip[6:]]  # batches of two: [0 1] | [2 3] [4 5] | [6 7] [8]
    streamed = [replies[0] for _, replies in gpu.stream(key, chunks, [Job(task, size, options)], batch_size=2)]
    models = 2 if task == "normals" else 1  # normals: the body-part mask's model too
    batches = [0, 2, 4, 6, 8]
    assert sorted((address, pad) for pad, address, _ in calls) == sorted(
        (inference._address(clip[b]), pad) for b in batches for pad in ({False, True} if models == 2 else {False}))
    ahead = [b for b in batches if all(name.startswith("sapiens2-pre") for _, address, name in calls
                                       if address == inference._address(clip[b]))]
    assert ahead == [4, 6, 8]  # the first two batches teach it what a batch asks for; across chunks too

    monkeypatch.setattr(gpu, "OVERLAP", "0")  # the plain path: one batch after the other, nothing ahead
    plain = [gpu.answers(key, chunk, [Job(task, size, options)], batch_size=2)[0] for chunk in chunks]
    for got, want in zip(streamed, plain):
        for a, b in zip(got, want):
            a, b = getattr(a, "image", a), getattr(b, "image", b)
            for field in ("normals", "alpha", "foreground", "mask", "image"):
                if getattr(b, field, None) is not None or field == "image" and isinstance(b, np.ndarray):
                    np.testing.assert_array_equal(getattr(a, field, a), getattr(b, field, b))


def test_a_batch_of_other_frames_takes_nothing_queued(manager):
    from sapiens2_demo.models.registry import checkpoint

    loaded = manager.get(checkpoint("seg", "0.4b"))
    frames = [np.zeros((40, 60, 3), np.uint8), np.full((40, 60, 3), 200, np.uint8)]
    other = [frames[0].copy(), frames[1]]
    with inference.Lookahead() as lookahead:
        lookahead.during("job", lambda: inference.preprocess(loaded, frames, "seg"), None)  # learns: seg
        # queues seg for `frames` beside a start whose batch is other frames (one a copy): it takes nothing
        missed = lookahead.during("job", lambda: lookahead.take("job", loaded, other, "seg"), frames)
        elsewhere = lookahead.take("another job", loaded, frames, "seg")
        taken = lookahead.take("job", loaded, frames, "seg")
    assert missed is None and elsewhere is None and taken is not None
    np.testing.assert_array_equal(taken.numpy(), inference.preprocess(loaded, frames, "seg").numpy())


def test_two_jobs_of_one_stream_share_the_mask_and_each_take_their_own_map(key, clip, calls, monkeypatch):
    """Normals and depth both need each frame's body-part mask: one forward (and one pre-processing) for the two
    (`inference.sharing`), and each job's own map pre-processed once, ahead after the first batches."""
    monkeypatch.setattr(gpu, "OVERLAP", "1")
    jobs = [Job(task, "0.4b", {"remove_background": True}) for task in ("normals", "pointmap")]
    chunks = [clip[:2], clip[2:6], clip[6:]]
    streamed = list(gpu.stream(key, chunks, jobs, batch_size=2))
    assert [[len(r) for r in replies] for _, replies in streamed] == [[2, 2], [4, 4], [3, 3]]
    batches = [0, 2, 4, 6, 8]
    per_batch = {b: sorted(pad for pad, address, _ in calls if address == inference._address(clip[b])) for b in batches}
    assert per_batch == {b: [False, True, True] for b in batches}  # one mask's (stretched), two maps' (padded)
    ahead = [b for b in batches if all(name.startswith("sapiens2-pre") for _, address, name in calls
                                       if address == inference._address(clip[b]))]
    assert ahead == [4, 6, 8]

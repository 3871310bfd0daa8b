"""Fixtures of the pipeline tests."""

import pytest


@pytest.fixture()
def key(manager):
    """The tiny models' manager registered for GPU calls (gpu.answers, gpu.stream): its key."""
    from sapiens2_demo import gpu

    return gpu.register(manager)


@pytest.fixture()
def detector_frames(monkeypatch) -> list[int]:
    """The person detector counted: one entry per call, the number of frames it was given. Every keypoint of the
    random-weight pose model counts as sure, so followed people are never lost."""
    from sapiens2_demo.pipelines import pose as pipeline

    calls, inside = [], []

    def counted(real):  # detect_batch, and detect_queued (the device road's, which detect_batch calls there)
        def counting(frames, manager, **kwargs):
            if not inside:
                calls.append(len(frames))
            inside.append(True)
            try:
                return real(frames, manager, **kwargs)
            finally:
                inside.pop()
        return counting

    monkeypatch.setattr(pipeline, "detect_batch", counted(pipeline.detect_batch))
    monkeypatch.setattr(pipeline, "detect_queued", counted(pipeline.detect_queued))
    monkeypatch.setattr(pipeline, "FOLLOW_SCORE", -1.0)
    return calls


@pytest.fixture()
def staged():
    """`staged(task, field="start")` -> the sizes of the batches a task's two-stage start (`start`, or
    `draw_start` for pictures drawn on the device) is called with from then on: the overlapped road ran when it is
    not empty (gpu.infer's one-stage road calls `run` or `draw`). The tasks are restored after the test."""
    import dataclasses

    from sapiens2_demo import tasks

    saved = {}

    def count(task: str, field: str = "start") -> list[int]:
        spec = tasks.get(task)
        saved.setdefault(spec.name, spec)
        calls, real = [], getattr(spec, field)

        def counted(batch, *args, **kwargs):
            calls.append(len(batch))
            return real(batch, *args, **kwargs)

        tasks.register(dataclasses.replace(spec, **{field: counted}))
        return calls

    yield count
    for spec in saved.values():
        tasks.register(spec)


@pytest.fixture()
def device_road(monkeypatch):
    """CUDA's post-processing on the CPU, without a ledger (the new paths against the old)."""
    from sapiens2_demo.pipelines import dense, device_post

    monkeypatch.setattr(dense, "use_device_post", lambda device: True)
    monkeypatch.setattr(device_post, "use_device_post", lambda device: True)

"""Fixtures of the pipeline tests."""

import pytest


@pytest.fixture()
def detector_frames(monkeypatch) -> list[int]:
    """The person detector counted: one entry per call, the number of frames it was given. Every keypoint of the
    random-weight pose model counts as sure, so followed people are never lost."""
    from sapiens2_demo.pipelines import pose as pipeline

    calls = []
    real = pipeline.detect_batch

    def counting(frames, manager, **kwargs):
        calls.append(len(frames))
        return real(frames, manager, **kwargs)

    monkeypatch.setattr(pipeline, "detect_batch", counting)
    monkeypatch.setattr(pipeline, "FOLLOW_SCORE", -1.0)
    return calls

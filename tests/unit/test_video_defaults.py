"""A video job's pose options default as the image tabs' do, per device: the flip test (2x the pose model's work)
is on where the job runs on a GPU and off on a CPU, unless the caller says."""

from types import SimpleNamespace

import pytest

from sapiens2_demo import gpu, tasks
from sapiens2_demo.jobs.video import VideoJob


@pytest.mark.parametrize("device, given, expected", [("cpu", None, False), ("cuda", None, True),
                                                     ("cpu", True, True), ("cuda", False, False)])
def test_the_flip_test_follows_the_device_unless_given(device, given, expected, tmp_path):
    key = gpu.register(SimpleNamespace(device=device))
    extra = {} if given is None else {"flip_test": given}
    job = VideoJob(tmp_path / "clip.mp4", "pose", key, tmp_path, **extra)
    assert job.options_for(tasks.get("pose"))["flip_test"] is expected
    assert tasks.get("pose").job(job.size, job.options_for(tasks.get("pose"))).options["flip_test"] is expected

"""One call of several jobs (All tasks, the Video tab's grid) starts each batch's jobs one after the other, and the
same work on the same frames is done once among them (`inference.sharing`): the body-part forward that the
segmentation and the masks of normals and depth all need, and, where the frames cross to a device, their upload.
The answers are each job's own."""

import numpy as np
import pytest

from sapiens2_demo import gpu, tasks
from sapiens2_demo.models import inference
from sapiens2_demo.pipelines import dense, device_post
from sapiens2_demo.results import DrawnFrame, Job

TASKS = ("segment", "normals", "pointmap")


@pytest.fixture()
def frames(person_image):
    return [np.ascontiguousarray(np.roll(person_image, 9 * i, axis=0)) for i in range(4)]


@pytest.fixture()
def counted(monkeypatch):
    """The forwards per model class and the uploads, as they are made."""
    seen = {"forwards": [], "uploads": 0}
    forward, upload_now = dense.forward, inference.upload_now

    def counting_forward(loaded, *args, **kwargs):
        seen["forwards"].append(type(loaded.model).__name__)
        return forward(loaded, *args, **kwargs)

    def counting_upload(*args, **kwargs):
        seen["uploads"] += 1
        return upload_now(*args, **kwargs)

    monkeypatch.setattr(dense, "forward", counting_forward)
    monkeypatch.setattr(inference, "upload_now", counting_upload)
    return seen


def _jobs(drawn: bool) -> list[Job]:
    jobs = []
    for task in TASKS:
        options = {} if task == "segment" else {"remove_background": True}
        if drawn:
            spec = tasks.get(task)
            options["draw"] = {k: v for k, v in {**spec.defaults(), "opaque": True}.items() if k != "background_image"}
        jobs.append(Job(task, "0.4b", options))
    return jobs


def _same(a, b) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        if isinstance(x, DrawnFrame):
            np.testing.assert_array_equal(x.image, y.image)
            continue
        for field in ("labels", "normals", "points", "mask"):
            if getattr(y, field, None) is not None:
                np.testing.assert_array_equal(getattr(x, field), getattr(y, field))


@pytest.mark.parametrize("road", ["host", "device"])
def test_one_body_part_forward_and_one_upload_a_batch_for_all_jobs(key, frames, counted, monkeypatch, road):
    monkeypatch.setattr(gpu, "OVERLAP", "1")
    if road == "device":  # the CUDA road's two stages and drawing, on the CPU (the frames uploaded as tensors)
        monkeypatch.setattr(device_post, "use_device_post", lambda device: True)
    jobs = _jobs(drawn=road == "device")
    together = gpu.answers(key, frames, jobs, batch_size=2)
    segmentation = [name for name in counted["forwards"] if "Segmentation" in name]
    assert len(segmentation) == 2  # one a batch of two frames, for three jobs (before: six)
    assert len(counted["forwards"]) == 2 + 2 * 2  # and each map's own: normals' and depth's
    if road == "device":
        assert counted["uploads"] == 2  # each batch's frames cross once (before: once per job)
    alone = [gpu.answers(key, frames, [job], batch_size=2)[0] for job in jobs]
    for a, b in zip(together, alone):
        _same(a, b)

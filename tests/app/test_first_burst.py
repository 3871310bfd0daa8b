"""Visitors arriving together after a restart: concurrent first requests on every image endpoint, the video path
and All tasks, before any model is loaded, with bfloat16 (any CPU runs it; tiny checkpoints) and float32. No
server error, every endpoint answers after the burst, and every loaded model's parameters are in the road's dtype.
`python -m benchmarks burst` (benchmarks/first.py) runs 5 cold launches x 10 requests per dtype and 64 at once."""

from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from gradio_client import Client, handle_file

from tests.conftest import ASSETS, launch_app
from tests.videos import make_video

IMAGE_ENDPOINTS = ("/segment", "/pose", "/normals", "/pointmap", "/matting")
PHOTOS = ("astronaut.jpg", "grace_hopper.jpg", "camera.jpg")


@pytest.fixture(scope="module")
def clip(tmp_path_factory):
    return make_video(tmp_path_factory.mktemp("clips") / "clip.mp4", frames=4, size=(96, 72), fps=4)


def _call(url: str, job: tuple):
    endpoint, path = job
    client = Client(url, verbose=False)
    if endpoint == "/video":
        return client.predict(handle_file(str(path)), "segment", api_name="/video")
    return client.predict(handle_file(str(path)), api_name=endpoint)


def burst(url: str, jobs: list[tuple]) -> list[str]:
    """Every job at once; the errors' messages (empty: all answered)."""
    with ThreadPoolExecutor(len(jobs)) as pool:
        futures = [pool.submit(_call, url, job) for job in jobs]
        errors = []
        for job, future in zip(jobs, futures):
            try:
                future.result(timeout=600)
            except Exception as error:  # noqa: BLE001 - collected and asserted on below
                errors.append(f"{job[0]}: {error}")
        return errors


def parameter_dtypes(manager) -> dict:
    """Each loaded Sapiens2 model's set of parameter dtypes (buffers may be float32 on purpose: rope's inv_freq)."""
    return {key[1]: {p.dtype for p in manager.loaded_model(key).model.parameters()}
            for key in manager.loaded_keys if key[0] == "sapiens2"}


@pytest.mark.parametrize("dtype, launches", [("bfloat16", 2), ("float32", 1)])
def test_concurrent_first_requests_on_every_endpoint(tiny_dir, clip, dtype, launches):
    jobs = [(endpoint, ASSETS / PHOTOS[i % len(PHOTOS)]) for i, endpoint in enumerate(IMAGE_ENDPOINTS * 2)]
    jobs += [("/video", clip), ("/all", ASSETS / "astronaut.jpg")]
    for launch in range(launches):
        demo, url = launch_app(tiny_dir, tiny_dir / "yolov8n-random.pt", "--dtype", dtype, "--compile", "off")
        try:
            manager = demo.sapiens2_context.manager
            assert not manager.loaded_keys  # first requests: nothing loaded yet
            assert burst(url, jobs) == [], f"launch {launch + 1}"
            after = [(endpoint, ASSETS / "camera.jpg") for endpoint in IMAGE_ENDPOINTS]
            for job in after:  # one at a time: each endpoint answers after the burst
                _call(url, job)
            wanted = getattr(torch, dtype)
            assert parameter_dtypes(manager) and all(found == {wanted} for found in parameter_dtypes(manager).values()), \
                parameter_dtypes(manager)
            assert torch.get_default_dtype() == torch.float32  # no load left the process-wide default changed
        finally:
            demo.close()


def test_a_model_found_broken_is_told_and_loaded_again(app_server, client):
    """A failed forward whose model is off its road (a parameter in another dtype): the visitor is told to try again,
    not "something went wrong"; the manager drops the model and the next request loads a working one."""
    from sapiens2_demo.models.registry import checkpoint

    demo, _ = app_server
    manager = demo.sapiens2_context.manager
    first, second, third = (handle_file(str(ASSETS / name)) for name in PHOTOS)  # each new: no segmentation cache
    client.predict(first, api_name="/segment")
    ckpt = checkpoint("seg", "0.4b")
    key = ("sapiens2", ckpt.repo_id, ckpt.revision)
    loads = manager.load_counts[key]
    weight = next(p for name, p in manager.get(ckpt).model.named_parameters() if p.ndim == 4)  # the patch embedding
    weight.data = weight.data.double()  # what two loads side by side left
    with pytest.raises(Exception) as info:
        client.predict(second, api_name="/segment")
    assert "try again" in str(info.value) and "Something went wrong" not in str(info.value)
    outputs = client.predict(third, api_name="/segment")
    assert outputs[-2] and manager.load_counts[key] == loads + 1
    assert parameter_dtypes(manager)[ckpt.repo_id] == {torch.float32}

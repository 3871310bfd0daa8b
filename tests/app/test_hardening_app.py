"""The running app under concurrency, failures and hostile requests (gradio_client + HTTP)."""

import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tests.conftest import ASSETS, checkpoints_without, launch_app

BUDGET = 64 * 2**20  # tiny checkpoints are < 1 MB each: all fit, and the check below can still fail


def _launch(checkpoint_dir: Path, detector: str, concurrency: int = 4):
    return launch_app(checkpoint_dir, detector, "--concurrency", concurrency, "--model-budget-gb", BUDGET / 2**30)


@pytest.fixture(scope="module")
def partial_dir(tiny_dir, tmp_path_factory):
    """Every checkpoint but matting: the Matting tab must fail clearly and the rest keep working."""
    return checkpoints_without(tiny_dir, tmp_path_factory.mktemp("partial"), "matting")


@pytest.fixture(scope="module")
def partial_app(partial_dir, tiny_dir):
    demo, url = _launch(partial_dir, str(tiny_dir / "yolov8n-random.pt"))
    yield demo, url
    demo.close()


def test_files_outside_the_app_folders_are_refused(partial_app):
    _, url = partial_app
    for path in ("gradio_api/file=/etc/passwd", "gradio_api/file=../../../../etc/passwd",
                 "file=/etc/passwd", "gradio_api/file=" + str(Path(__file__).resolve())):
        try:
            with urllib.request.urlopen(url + path, timeout=10) as response:
                body = response.read()
            assert b"root:" not in body and b"def test_" not in body, path
            assert response.status != 200 or b"<html" in body[:200].lower(), path
        except urllib.error.HTTPError as error:
            assert error.code in (400, 403, 404), path


def test_unknown_checkpoint_size_is_refused(partial_app):
    from gradio_client import Client, handle_file

    demo, url = partial_app
    client = Client(url, verbose=False)
    with pytest.raises(Exception) as info:
        client.predict(handle_file(str(ASSETS / "camera.jpg")), size="../../evil", api_name="/segment")
    assert "Traceback" not in str(info.value)
    keys = demo.sapiens2_context.manager.loaded_keys
    assert not any("evil" in str(key) for key in keys)


def test_missing_checkpoint_is_named_and_other_tabs_keep_working(partial_app):
    from gradio_client import Client, handle_file

    _, url = partial_app
    client = Client(url, verbose=False)
    with pytest.raises(Exception) as info:
        client.predict(handle_file(str(ASSETS / "camera.jpg")), api_name="/matting")
    assert "facebook/sapiens2-matting-1b" in str(info.value)  # named for the visitor; the how-to is in the log
    slider, *_ = client.predict(handle_file(str(ASSETS / "camera.jpg")), api_name="/segment")
    assert slider


def test_out_of_memory_during_a_forward_is_reported_and_the_next_request_works(partial_app, monkeypatch):
    import torch
    from gradio_client import Client, handle_file

    from sapiens2_demo.models.registry import checkpoint

    demo, url = partial_app
    manager = demo.sapiens2_context.manager
    model = manager.get(checkpoint("normal", "0.4b")).model
    real_forward = model.forward
    calls = {"n": 0}

    def failing_once(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(model, "forward", failing_once)
    client = Client(url, verbose=False)
    image = handle_file(str(ASSETS / "grace_hopper.jpg"))
    with pytest.raises(Exception) as info:
        client.predict(image, remove_background=False, api_name="/normals")
    assert "out of memory" in str(info.value).lower()
    slider, files, notes = client.predict(image, remove_background=False, api_name="/normals")
    assert files


def test_sixteen_simultaneous_requests_across_tabs(tiny_dir):
    from gradio_client import Client, handle_file

    demo, url = _launch(tiny_dir, str(tiny_dir / "yolov8n-random.pt"), concurrency=2)
    try:
        manager = demo.sapiens2_context.manager
        jobs = [("/pose", "astronaut.jpg"), ("/segment", "grace_hopper.jpg"), ("/normals", "camera.jpg"),
                ("/pointmap", "astronaut.jpg"), ("/matting", "grace_hopper.jpg"), ("/segment", "camera.jpg"),
                ("/pose", "grace_hopper.jpg"), ("/all", "astronaut.jpg")] * 2
        errors, peaks, latencies = [], [], []
        wall = time.perf_counter()
        stop = threading.Event()

        def watch():
            while not stop.is_set():
                peaks.append(manager.loaded_bytes)
                stop.wait(0.05)

        def call(job):
            endpoint, name = job
            started = time.perf_counter()
            outputs = Client(url, verbose=False).predict(handle_file(str(ASSETS / name)), api_name=endpoint)
            latencies.append(time.perf_counter() - started)
            return endpoint, outputs

        watcher = threading.Thread(target=watch)
        watcher.start()
        with ThreadPoolExecutor(16) as pool:
            futures = [pool.submit(call, job) for job in jobs]
            results = []
            for future in futures:
                try:
                    results.append(future.result(timeout=600))
                except Exception as error:  # collected and reported below
                    errors.append(error)
        stop.set()
        watcher.join()
        assert not errors, errors
        assert len(results) == 16
        for endpoint, outputs in results:
            files = outputs[-2]
            assert files, endpoint
        assert manager.load_counts and all(count == 1 for count in manager.load_counts.values()), manager.load_counts
        assert max(peaks) <= manager.memory_budget_bytes
        print(f"\n16 concurrent requests: wall {time.perf_counter() - wall:.1f} s, latency median "
              f"{sorted(latencies)[8]:.1f} s max {max(latencies):.1f} s; loads {sorted(manager.load_counts.values())}; "
              f"peak loaded {max(peaks) / 2**20:.1f} MiB of a {manager.memory_budget_bytes / 2**20:.0f} MiB budget")
    finally:
        demo.close()

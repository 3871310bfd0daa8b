"""The answer first, the files after (issue 37): an image request yields its render before any download is written,
then the complete answer; every file (downloads and the display copies gradio is handed) is written once."""

import os
import sys
import threading
import time
import zipfile
from collections import Counter
from pathlib import Path

import pytest

from sapiens2_demo.jobs import image as image_jobs
from sapiens2_demo.jobs.outputs import OutputStore
from sapiens2_demo.media.image import load_image
from sapiens2_demo.tasks.spec import TaskSpec
from tests.conftest import ASSETS

WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC


@pytest.fixture()
def ctx(manager, tmp_path):
    return image_jobs.AppContext(manager=manager, outputs=OutputStore(tmp_path / "out"))


class FileWrites:
    """Every file opened for writing under `root` while `on` (an audit hook sees each open, whoever makes it:
    numpy, trimesh, zipfile, PIL); a file written under a temporary name (`.name.partial`) counts as `name`."""

    def __init__(self, root: Path):
        self.root, self.on, self.paths = str(root), False, Counter()
        sys.addaudithook(self._hook)  # hooks cannot be removed: it goes quiet when `on` is off

    def _hook(self, event, args):
        if not self.on or event != "open" or not isinstance(args[0], (str, os.PathLike)):
            return
        path, mode, flags = str(args[0]), args[1], args[2]
        writing = any(c in (mode or "") for c in "wax+") or (mode is None and flags & WRITE_FLAGS)
        if writing and path.startswith(self.root):
            path = Path(path)
            self.paths[str(path.with_name(path.name.removeprefix(".").removesuffix(".partial")))] += 1

    def twice(self) -> dict:
        return {path: count for path, count in self.paths.items() if count > 1}


def display_steps(ctx, stream, image_path: Path, **kwargs):
    """A tab's steps: the job's outputs, each with its display copies made as the tab's handler makes them."""
    from sapiens2_demo.ui.common import as_display_files

    loaded = load_image(image_path)
    run_dir = ctx.outputs.new_run_dir("s")
    saved = {}
    return [(out, as_display_files(out, run_dir, loaded, None, saved))
            for out in stream(ctx, loaded, run_dir=run_dir, **kwargs)], run_dir


@pytest.mark.parametrize("task, options", [("segment", {}), ("pointmap", {"raw_data": True}),
                                           ("pose", {"lift_3d": True}), ("matting", {"background": "transparent"})])
def test_the_render_comes_first_and_every_file_is_written_once(ctx, tmp_path, task, options):
    writes = FileWrites(ctx.outputs.root)
    writes.on = True
    try:
        steps, run_dir = display_steps(ctx, image_jobs.stream_task, ASSETS / "astronaut.jpg", task=task, **options)
    finally:
        writes.on = False
    (shown, shown_display), (complete, complete_display) = steps
    assert shown.main is not None and shown.files == [] and complete.files
    assert complete.main is shown.main and complete_display.main == shown_display.main  # one display copy
    assert writes.paths and not writes.twice(), writes.twice()
    assert {str(path) for path in complete.files} <= set(writes.paths)
    assert sum(1 for path in writes.paths if "/shown/" in path) >= 1


def test_all_tasks_show_the_gallery_first_and_write_every_file_once(ctx):
    writes = FileWrites(ctx.outputs.root)
    writes.on = True
    try:
        steps, run_dir = display_steps(ctx, image_jobs.stream_all, ASSETS / "astronaut.jpg")
    finally:
        writes.on = False
    *shown_steps, (complete, complete_display) = steps
    (shown, shown_display) = shown_steps[-1]
    assert all(out.files == [] for out, _ in shown_steps) and zipfile.is_zipfile(complete.files[0])
    assert len(shown.gallery) == 6 and complete_display.gallery == shown_display.gallery
    assert not writes.twice(), writes.twice()


def test_all_tasks_show_each_tile_when_its_task_is_done(ctx, monkeypatch):
    """A local launch (a GPU call is a function call): one call per task, the body-part segmentation first (the
    others' masks), a gallery after each in the catalog's order, each tile's display copy written once; the
    segmentation and the pointmap run once however many tasks use them."""
    from sapiens2_demo import gpu
    from tests.pipelines.test_tasks import _count_forwards

    monkeypatch.setattr(gpu, "CROSSES_PROCESSES", False)
    forwards = {task: _count_forwards(ctx.manager, task, monkeypatch) for task in ("seg", "pointmap")}
    calls = []
    infer = image_jobs.infer
    monkeypatch.setattr(image_jobs, "infer", lambda ctx, frames, jobs, progress=None: (
        calls.append([job.task for job in jobs]), infer(ctx, frames, jobs, progress))[1])
    steps, _ = display_steps(ctx, image_jobs.stream_all, ASSETS / "astronaut.jpg")
    assert calls == [["segment"], ["pointmap"], ["pose"], ["normals"], ["matting"]]
    assert {task: len(made) for task, made in forwards.items()} == {"seg": 1, "pointmap": 1}
    captions = [[caption for _, caption in out.gallery] for out, _ in steps]
    assert captions == [["Input", "Body parts"], ["Input", "Body parts", "Depth"],
                        ["Input", "Pose", "Body parts", "Depth"], ["Input", "Pose", "Body parts", "Normals", "Depth"],
                        *[["Input", "Pose", "Body parts", "Normals", "Depth", "Matting"]] * 2]
    shown = [display.gallery for _, display in steps]
    for before, after in zip(shown, shown[1:]):  # a tile shown once keeps its display file
        assert set(before) <= set(after)
    assert [out.files for out, _ in steps[:-1]] == [[]] * 5 and steps[-1][0].files


def test_all_tasks_are_one_call_on_zerogpu_and_cuda(ctx, monkeypatch):
    """Where each GPU call is a worker of its own (ZeroGPU), every task runs in one call: the gallery comes once; so
    it does on CUDA (a second for every task, one call overlapping them)."""
    from types import SimpleNamespace

    from sapiens2_demo import gpu

    cuda = SimpleNamespace(manager=SimpleNamespace(device="cuda:0"))
    assert image_jobs.tiles_in_turn(ctx) and not image_jobs.tiles_in_turn(cuda)
    monkeypatch.setattr(gpu, "CROSSES_PROCESSES", True)
    assert not image_jobs.tiles_in_turn(ctx)
    calls = []
    infer = image_jobs.infer
    monkeypatch.setattr(image_jobs, "infer", lambda ctx, frames, jobs, progress=None: (
        calls.append(len(jobs)), infer(ctx, frames, jobs, progress))[1])
    steps, _ = display_steps(ctx, image_jobs.stream_all, ASSETS / "astronaut.jpg")
    assert calls == [5] and len(steps) == 2 and len(steps[0][0].gallery) == 6


@pytest.mark.parametrize("stream, kwargs", [(image_jobs.stream_task, {"task": "normals"}),
                                            (image_jobs.stream_all, {})])
def test_the_render_does_not_wait_for_the_downloads(ctx, monkeypatch, stream, kwargs):
    """The writers are held until the render has reached the caller: a job that waited for them before showing
    anything would only go on once the watchdog let them go."""
    shown_first, watchdog_fired = threading.Event(), threading.Event()
    write_files = TaskSpec.write_files

    def held(self, *args, **kw):
        if not shown_first.wait(timeout=30):
            watchdog_fired.set()
        return write_files(self, *args, **kw)

    monkeypatch.setattr(TaskSpec, "write_files", held)
    steps = stream(ctx, load_image(ASSETS / "astronaut.jpg"), run_dir=ctx.outputs.new_run_dir("s"), **kwargs)
    shown = next(steps)
    assert not watchdog_fired.is_set() and shown.files == []
    shown_first.set()
    *more_shown, complete = list(steps)  # All tasks: the gallery again as each later tile comes
    assert all(out.files == [] for out in more_shown)
    assert complete.files and not watchdog_fired.is_set()


@pytest.mark.parametrize("task", ["normals", "matting", "pointmap"])
def test_each_coded_map_is_decoded_once_while_the_render_and_the_writers_read_it(ctx, monkeypatch, task):
    """A light answer's maps come as their files' codes; the render and the writers (threads, at once) share one
    decode of each. Each decode is slowed down so that both readers reach it together."""
    from sapiens2_demo import results

    decoded = Counter()
    decode = results.CodedMap.decode

    def slow_decode(self):
        decoded[id(self.codes)] += 1
        time.sleep(0.3)
        return decode(self)

    monkeypatch.setattr(results.CodedMap, "decode", slow_decode)
    *_, complete = image_jobs.stream_task(ctx, load_image(ASSETS / "astronaut.jpg"), task=task,
                                          run_dir=ctx.outputs.new_run_dir("s"))
    assert complete.files and all(count == 1 for count in decoded.values()), decoded

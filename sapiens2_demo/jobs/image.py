"""An image request: loaded image -> one GPU call (the executor) -> the task's presenter -> TaskOutput.

UI-agnostic (no gradio here), so the same calls serve the UI, the API and the tests. Models run only inside
`gpu.infer` (data in, numpy results out: ZeroGPU-safe); rendering and file writing happen here, outside it.
"""

from __future__ import annotations

import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import gpu, tasks
from ..media.image import LoadedImage
from ..models.manager import ModelManager
from ..models.registry import UnknownCheckpoint, checkpoint
from ..pipelines.dense import SegmentationCache
from ..results import TaskOutput
from .outputs import OutputStore


@dataclass
class AppContext:
    manager: ModelManager
    seg_cache: SegmentationCache = field(default_factory=SegmentationCache)
    outputs: OutputStore = field(default_factory=OutputStore)
    max_people: int = 50
    manager_key: str = ""  # how GPU calls reach the manager (set from `manager`)

    def __post_init__(self):
        self.manager_key = gpu.register(self.manager, self.seg_cache)


def _announce_load(ctx: AppContext, family: str, size: str, progress) -> None:
    """Say so while a checkpoint loads: the first run of a model takes a while."""
    try:
        ckpt = checkpoint(family, size)
    except UnknownCheckpoint:  # a model-free task
        return
    if progress is not None and not ctx.manager.is_loaded(ckpt):
        progress(0.1, desc=f"Loading {ckpt.repo_id} (first use: slower)...")


def make_job(ctx: AppContext, name: str, size: str | None, options: dict, tolerate_errors: bool = False):
    """The task's GPU job, with the people cap of this app applied."""
    spec = tasks.get(name)
    options = dict(options)
    if "max_people" in options:
        options["max_people"] = min(int(options["max_people"]), ctx.max_people)
    return spec.job(size, options, tolerate_errors=tolerate_errors)


def infer(ctx: AppContext, frames: list, jobs: list, progress=None) -> list:
    for job in jobs:
        _announce_load(ctx, tasks.get(job.task).family, job.size, progress)
        if job.options.get("remove_background"):
            _announce_load(ctx, tasks.get("segment").family, job.size, progress)
    return gpu.answers(ctx.manager_key, frames, jobs)


def run_task(ctx: AppContext, image: LoadedImage, *, task: str, run_dir: Path, progress=None,
             size: str | None = None, **options) -> TaskOutput:
    """One task on one image: one GPU call, then the task's renders, downloads and notes."""
    spec = tasks.get(task)
    started = time.perf_counter()
    spec.check(options)
    [result] = infer(ctx, [image.rgb], [make_job(ctx, spec.name, size, options)], progress)[0]
    out = spec.present(image, result, run_dir, **{**spec.defaults(), **options})
    out.notes.append(f"{spec.title} took {time.perf_counter() - started:.2f} s on {ctx.manager.device}.")
    return out


def all_tasks(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None,
              size: str = "0.4b") -> TaskOutput:
    """Every task of "all" on one image in one GPU call; the segmentation is computed once and shared (the
    cache). A task that fails (e.g. a missing checkpoint) is reported in the notes and the others go on."""
    chosen = tasks.specs(in_all=True)
    if progress is not None:
        progress(0.05, desc="Running every task...")
    jobs = [make_job(ctx, spec.name, size, spec.all_options, tolerate_errors=True) for spec in chosen]
    answers = infer(ctx, [image.rgb], jobs, progress)
    gallery, files, notes = [(image.rgb, "Input")], [], list(image.notes)
    for spec, answer in zip(chosen, answers):
        if isinstance(answer, Exception):
            notes.append(f"{spec.short}: {answer}")
            continue
        out = spec.present(LoadedImage(image.rgb, image.original_size, []), answer[0], run_dir / spec.zip_folder,
                           **{**spec.defaults(), **spec.all_options})
        gallery.append((out.main, spec.short))
        files.extend(out.files)
        notes.extend(f"{spec.short}: {note}" for note in out.notes)
    archive = run_dir / "sapiens2_all_tasks.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:  # PNG/GLB are compressed already
        for path in files:
            zf.write(path, arcname=f"{path.parent.name}/{path.name}")
    return TaskOutput(files=[archive], notes=notes, gallery=gallery)

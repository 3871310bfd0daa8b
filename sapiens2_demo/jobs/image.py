"""An image request: loaded image -> one GPU call (the executor) -> the task's presenter -> TaskOutput.

UI-agnostic (no gradio here), so the same calls serve the UI, the API and the tests. Models run only inside
`gpu.infer` (data in, numpy results out: ZeroGPU-safe); rendering and file writing happen here, outside it.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import time
import zipfile
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from .. import gpu, tasks
from ..media.image import LoadedImage
from ..models.inference import on_cuda
from ..models.manager import ModelManager
from ..models.registry import UnknownCheckpoint, checkpoint
from ..pipelines.dense import SegmentationCache
from ..results import TaskOutput
from ..tasks import catalog
from ..tasks.summary import summarize
from ..util import in_parallel
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


def option_models(job) -> list[str]:
    """The tasks whose models `job`'s options run besides its own (catalog.OPTION_MODELS: the pose lift's pointmap)."""
    return [name for option, names in catalog.OPTION_MODELS.items() if job.options.get(option) for name in names]


def job_checkpoints(jobs: list) -> list:
    """The Sapiens2 checkpoints `jobs` run: each task's model and those its options add (catalog.OPTION_MODELS)."""
    found = []
    for job in jobs:
        for name in dict.fromkeys([job.task, *option_models(job)]):
            try:
                found.append(checkpoint(tasks.get(name).family, job.size))
            except UnknownCheckpoint:  # a model-free task
                pass
    return found


def load_notes(ctx: AppContext, since: int, jobs: list) -> list[str]:
    """The compile notes of the request that began at `since` (manager.notes_mark()) and ran `jobs`: the loads
    of its models that it made or waited for, not another visitor's."""
    return ctx.manager.compile_notes(since, job_checkpoints(jobs))


def make_job(ctx: AppContext, name: str, size: str | None, options: dict, tolerate_errors: bool = False):
    """The task's GPU job, with the people cap of this app applied."""
    spec = tasks.get(name)
    options = dict(options)
    if "max_people" in options:
        options["max_people"] = min(int(options["max_people"]), ctx.max_people)
    return spec.job(size, options, tolerate_errors=tolerate_errors, device=ctx.manager.device)


def announce_loads(ctx: AppContext, jobs: list, progress) -> None:
    """The progress bar names each model the jobs will load first (with the compile hint): image and video."""
    for ckpt in job_checkpoints(jobs):  # say so while a checkpoint loads: the first run of a model takes a while
        if progress is not None and not ctx.manager.is_loaded(ckpt):
            hint = ctx.manager.load_hint(ckpt)  # compiling: how long it took last time
            progress(0.1, desc=f"Loading {ckpt.repo_id} (first use: slower{'; ' + hint if hint else ''})...")


def infer(ctx: AppContext, frames: list, jobs: list, progress=None) -> list:
    announce_loads(ctx, jobs, progress)
    return gpu.answers(ctx.manager_key, frames, jobs)


def _shown_then_complete(shown: TaskOutput, writing, complete) -> Iterator[TaskOutput]:
    """The render at once (`shown`: what the user looks at, no files yet), then `complete(written)` when the
    writing (a future) is done: nothing the page shows waits for a download. Two updates always, so the page's
    second one carries only the files and notes (the tabs skip the renders there, ui/image_tabs.py)."""
    yield shown
    yield complete(writing.result())


def stream_task(ctx: AppContext, image: LoadedImage, *, task: str, run_dir: Path, progress=None,
                size: str | None = None, **options) -> Iterator[TaskOutput]:
    """One task on one image: one GPU call, then the downloads written in a thread while the renders and
    notes are made beside them: the renders are yielded as soon as they exist (no files yet), then the complete
    output when the downloads are written (see _shown_then_complete)."""
    spec = tasks.get(task)
    started, since = time.perf_counter(), ctx.manager.notes_mark()
    spec.check(options)
    chosen = {**spec.defaults(ctx.manager.device), **options}
    job = make_job(ctx, spec.name, size, options)
    ask_light_answer(spec, job, chosen)
    [result] = infer(ctx, [image.rgb], [job], progress)[0]

    def write():  # on an output of its own: it gathers only the writers' files, notes and 3D view
        return spec.finish(TaskOutput(), image.rgb, result, run_dir, **chosen)

    with ThreadPoolExecutor(max_workers=1) as pool:
        writing = pool.submit(write)  # the files need only the result: written while the renders are drawn
        shown = spec.present(image, result, **chosen)
        shown.summary = summarize(result, image.rgb.shape[:2])
        shown.notes.append(took_note(spec.title, result, time.perf_counter() - started, ctx.manager.device))
        shown.notes.extend(load_notes(ctx, since, [job]))
        yield from _shown_then_complete(shown, writing, functools.partial(_completed, shown))


def ask_light_answer(spec, job, options: dict, shared=frozenset()) -> None:
    """A light answer (the maps cross at their files' bits) unless raw data is asked for, or another job's option runs
    the same model (`shared`): that one stays float32, serving both from one forward."""
    if spec.coded_maps and not options.get("raw_data") and spec.name not in shared:
        job.options["coded_maps"] = True


def took_note(title: str, result, seconds: float, device: str) -> str:
    """How long the task took, or that its result was an earlier request's (the segmentation cache: no forward)."""
    if getattr(result, "reused", False):
        return f"{title}: reused the result of an earlier request on this image ({seconds:.2f} s, no model run)."
    return f"{title} took {seconds:.2f} s on {device}."


def _completed(shown: TaskOutput, written: TaskOutput) -> TaskOutput:
    """The shown output with the downloads, their notes and the 3D view the writers gave."""
    return dataclasses.replace(shown, notes=[*shown.notes, *written.notes], files=written.files,
                               model3d=written.model3d)


def run_task(ctx: AppContext, image: LoadedImage, **kwargs) -> TaskOutput:
    """stream_task's complete output (renders, downloads and notes)."""
    *_, out = stream_task(ctx, image, **kwargs)
    return out


def all_order(jobs: list) -> list[int]:
    """The order the All-tasks jobs run in when each is a GPU call of its own: first the tasks whose models the
    others' options also run (the body-part segmentation masks three of them; the pointmap lifts pose), so their
    tiles come first and the later jobs find their results in the cache; the catalog's order otherwise."""
    used = Counter(name for job in jobs for name in option_models(job))
    return sorted(range(len(jobs)), key=lambda i: -used[jobs[i].task])


def tiles_in_turn(ctx: AppContext) -> bool:
    """Whether All tasks runs one GPU call per task, each tile shown when its task is done: on a local launch off
    CUDA, where the released models take tens of seconds a forward (a CPU: the gallery would otherwise come after
    minutes). On ZeroGPU each call is a worker process and a GPU asked for, and on CUDA the gallery takes a second
    while one call overlaps each task's post-processing with the next one's forward: one call there."""
    return not gpu.CROSSES_PROCESSES and not on_cuda(ctx.manager.device)


def answers_in_turn(ctx: AppContext, image: LoadedImage, chosen: list, jobs: list, progress) -> Iterator[list]:
    """[(job index, its answer)] per GPU call: one call per job where `tiles_in_turn`, else every job in one call."""
    if not tiles_in_turn(ctx):
        yield list(enumerate(infer(ctx, [image.rgb], jobs, progress)))
        return
    order = all_order(jobs)
    for step, index in enumerate(order):
        if progress is not None:
            progress(0.05 + 0.9 * step / len(order), desc=f"{chosen[index].title} ({step + 1} of {len(order)})...")
        yield [(index, infer(ctx, [image.rgb], [jobs[index]], progress)[0])]


def stream_all(ctx: AppContext, image: LoadedImage, *, run_dir: Path, progress=None,
               size: str = "0.4b") -> Iterator[TaskOutput]:
    """Every task of "all" on one image; the segmentation is computed once and shared (the cache). A task that
    fails (e.g. a missing checkpoint) is reported in the notes and the others go on. Yields the gallery as its
    tiles come (`answers_in_turn`: each task's tile when it is done, in the catalog's order, off CUDA and ZeroGPU),
    each task's downloads written from its result beside the next forwards, then the same gallery with every
    task's default downloads zipped (as stream_task does)."""
    chosen, since = tasks.specs(in_all=True), ctx.manager.notes_mark()
    if progress is not None:
        progress(0.05, desc="Running every task...")
    jobs = [make_job(ctx, spec.name, size, spec.all_options, tolerate_errors=True) for spec in chosen]
    shared = {name for job in jobs for name in option_models(job)}  # the pose lift's pointmap: one forward for both
    for spec, job in zip(chosen, jobs):
        ask_light_answer(spec, job, spec.all_options, shared)
    shown = LoadedImage(image.rgb, image.original_size, [])
    tiles: dict[int, tuple] = {}  # job index -> (render or None, notes)
    writing: dict = {}  # job index -> the future of its downloads

    def options(spec) -> dict:
        return {**spec.defaults(ctx.manager.device), **spec.all_options}

    def write(spec, result):  # on an output of its own: it gathers only the writers' files and notes
        return spec.finish(TaskOutput(), image.rgb, result, run_dir / spec.zip_folder, **options(spec))

    def tile(index, answer):
        if isinstance(answer, Exception):
            return None, [str(answer)]
        task_out = chosen[index].present(shown, answer[0], tile=True, **options(chosen[index]))
        return task_out.main, task_out.notes

    def gallery_so_far() -> TaskOutput:
        out = TaskOutput(gallery=[(image.rgb, "Input")], notes=list(image.notes) + load_notes(ctx, since, jobs))
        for index in sorted(tiles):
            render, notes = tiles[index]
            if render is not None:
                out.gallery.append((render, chosen[index].short))
            out.notes.extend(f"{chosen[index].short}: {note}" for note in notes)
        return out

    def zipped(out: TaskOutput) -> TaskOutput:
        archive = run_dir / "sapiens2_all_tasks.zip"
        done = dataclasses.replace(out, notes=list(out.notes), files=[archive])
        with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as zf:  # PNG/GLB are compressed already
            for index in sorted(writing):
                written = writing[index].result()
                for path in written.files:
                    zf.write(path, arcname=f"{path.parent.name}/{path.name}")
                done.notes.extend(f"{chosen[index].short}: {note}" for note in written.notes)
        return done

    # the downloads need only the results: written in threads while the tiles are drawn and the next tasks run
    with ThreadPoolExecutor(max_workers=min(len(chosen), os.cpu_count() or 2)) as pool:
        for answered in answers_in_turn(ctx, image, chosen, jobs, progress):
            for index, answer in answered:
                if not isinstance(answer, Exception):
                    writing[index] = pool.submit(write, chosen[index], answer[0])
            # a call's tiles drawn in parallel threads (OpenCV and numpy's large passes release the GIL)
            drawn = in_parallel(*[functools.partial(tile, index, answer) for index, answer in answered])
            tiles.update(zip((index for index, _ in answered), drawn))
            yield gallery_so_far()
        yield zipped(gallery_so_far())


def all_tasks(ctx: AppContext, image: LoadedImage, **kwargs) -> TaskOutput:
    """stream_all's complete output (the gallery, the zip and the notes)."""
    *_, out = stream_all(ctx, image, **kwargs)
    return out

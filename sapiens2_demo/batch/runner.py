"""One batch run: find the inputs, skip the complete ones, hand the rest to an engine, close with a summary."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path

from .inputs import discover
from .manifest import Manifest, Record, complete_outputs
from .options import BatchOptions, resolve_path
from .report import Progress, Summary

ENGINES = ("local", "ray")


def run(inputs: list[str], output: str | Path, options: BatchOptions, *, engine: str = "local",
        workers: int | None = None, ray_address: str | None = None, quiet: bool = False,
        overwrite: bool = False, stream=None) -> Summary:
    """Process every input into `output` and return the counts (also printed, with items per second).

    Raises InputError when an --input names nothing, CheckpointUnavailable when a model cannot be loaded
    (the run stops; what was finished stays recorded); a bad input is a `failed` manifest line, not an
    exception.
    """
    if engine not in ENGINES:
        raise ValueError(f"Unknown engine {engine!r}; choose local or ray.")
    if engine == "ray" and importlib.util.find_spec("ray") is None:  # an extra: the app and a Space do without it
        raise ValueError("--engine ray needs Ray Data, which is not installed: pip install 'ray[data]==2.60.0' "
                         "(or pip install -r requirements-dev.txt); --engine local needs nothing more.")
    output_dir = resolve_path(output)
    items = discover(inputs, output_dir)
    manifest = Manifest(output_dir)
    progress = Progress(manifest, total=len(items), quiet=quiet, stream=stream)
    previous = {} if overwrite else manifest.previous()
    pending, complete = [], []
    for item in items:
        found = None if overwrite else complete_outputs(item, options.tasks, output_dir, previous,
                                                     options.required_files, options.required_video_files)
        if found is None:
            pending.append(item)
        else:
            complete.append(Record(str(item.path), "skipped", found, None, 0.0, list(options.tasks)))
    videos = sum(item.kind == "video" for item in items)
    print(f"{counted(len(items), 'input')} ({counted(len(items) - videos, 'image')}, {counted(videos, 'video')}), "
          f"{len(complete)} already "
          f"complete; tasks {', '.join(options.tasks)}; engine {engine}; outputs in {output_dir}",
          file=stream or sys.stderr, flush=True)
    for record in complete:
        progress.done(record)
    if options.work_size is None:  # 'auto' compiles only when the run is big enough for it to pay
        options = replace(options, work_size=work_size(pending))
    try:
        if engine == "ray":
            from .ray_engine import run_ray

            run_ray(pending, output_dir, options, progress, workers=workers, address=ray_address)
        else:
            from .local import run_local

            run_local(pending, output_dir, options, progress, workers=workers or 2)
    finally:
        summary = progress.close()
    return summary


ENOUGH_FRAMES = 10_000  # past any compile's break-even: the remaining videos are not probed


def work_size(items) -> int:
    """The images and video frames each model will see (videos probed until the count is past ENOUGH_FRAMES; one
    that cannot be read counts one: the run reports it)."""
    from ..media.video import probe

    total = 0
    for item in items:
        if total >= ENOUGH_FRAMES:
            break
        if item.kind != "video":
            total += 1
            continue
        try:
            total += probe(item.path).frame_count
        except Exception:  # noqa: BLE001 - the run itself says what is wrong with the file
            total += 1
    return total


def counted(number: int, thing: str) -> str:
    """"1 video", "2 videos", "0 videos"."""
    return f"{number} {thing}{'' if number == 1 else 's'}"

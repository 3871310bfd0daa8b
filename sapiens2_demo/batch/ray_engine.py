"""`--engine ray`: the same run on Ray Data, on this machine or an existing cluster.

    inputs (a dataset of paths) -> map_batches(BatchWorker): an actor pool, each actor holding a ModelManager
        -> the actors read the inputs and write the exports into DIR (a folder every node sees)
        -> each input's record streams back to the driver, which appends the manifest and shows progress

One actor per GPU (`num_gpus=1`) when the cluster has GPUs and --device allows, else --workers CPU actors,
each with its torch threads limited to its share of the cores. With no --ray-address (nor RAY_ADDRESS) a
local cluster is started, declaring enough logical CPUs for the actors: on a small machine a pool asking for
more CPUs than `ray.init` declares never starts (Ray Data reports it as backpressured).
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from .inputs import InputItem
from .manifest import Record
from .options import BatchOptions
from .report import Progress

log = logging.getLogger(__name__)

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # sapiens2_demo/
FORWARDED_ENV = ("HF_HUB_OFFLINE", "YOLO_OFFLINE", "HF_HOME", "HF_TOKEN", "TRANSFORMERS_VERBOSITY")


class BatchWorker:
    """A Ray Data callable class: the models stay loaded in the actor from one batch to the next."""

    def __init__(self, output_dir: str, options: BatchOptions):
        from ..pipelines.dense import SegmentationCache
        from .work import preload

        self.output_dir = Path(output_dir)
        self.options = options
        self.manager = options.make_manager()
        preload(self.manager, options)
        self.seg_cache = SegmentationCache(max_items=2 * options.batch_size)

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        from .work import finish_image, image_record, infer_isolated, process_video_item, read_image

        items = [InputItem(Path(path), kind, name)
                 for path, kind, name in zip(batch["path"], batch["kind"], batch["name"])]
        records: list[Record] = []
        loaded = []
        for item in (item for item in items if item.kind == "image"):
            image, seconds = read_image(item)
            if isinstance(image, Exception):
                records.append(image_record(item, self.output_dir, self.options, error=image, seconds=seconds))
            else:
                loaded.append((item, image, seconds))
        if loaded:
            started = time.perf_counter()
            answers = infer_isolated([image.rgb for _, image, _ in loaded], self.manager, self.options,
                                     self.seg_cache)
            model_seconds = (time.perf_counter() - started) / len(loaded)
            for (item, image, seconds), answer in zip(loaded, answers):
                records.append(finish_image(item, image.rgb, answer, self.output_dir, self.options,
                                            seconds + model_seconds))
        for item in (item for item in items if item.kind == "video"):
            records.append(process_video_item(item, self.manager, self.output_dir, self.options))
        return {"record": np.array([record.to_json() for record in records], dtype=object)}


def _runtime_env(remote: bool) -> dict:
    names = FORWARDED_ENV + tuple(name for name in os.environ if name.startswith("SAPIENS2_"))
    env = {name: os.environ[name] for name in names if name in os.environ}
    runtime_env: dict = {"env_vars": env}
    if remote:  # ship this package's code with the job; its requirements must be installed on the nodes
        runtime_env["py_modules"] = [str(PACKAGE_DIR)]
    else:  # local workers start in the driver's folder: make the package importable from anywhere
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PACKAGE_DIR.parent), os.environ.get("PYTHONPATH")]))
    return runtime_env


def start_ray(address: str | None, workers: int | None) -> None:
    """Join the cluster at `address` (or RAY_ADDRESS), else start a local one sized for the actor pool."""
    import ray

    address = address or os.environ.get("RAY_ADDRESS") or None
    # Workers' own output stays in Ray's log files: an input's error comes back in its record, an actor that
    # cannot start raises in the driver.
    kwargs = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
                  runtime_env=_runtime_env(remote=address is not None))
    if address is None:  # actors ask 1 CPU each; declare at least that many plus one for Ray Data's own tasks
        kwargs["num_cpus"] = max(os.cpu_count() or 1, (workers or 2) + 1)
    ray.init(address=address, **kwargs)


def pool_shape(options: BatchOptions, workers: int | None) -> tuple[int, int, int | None]:
    """(actors, GPUs per actor, torch threads per actor) for the cluster Ray is connected to."""
    import ray

    resources = ray.cluster_resources()
    gpus = int(resources.get("GPU", 0))
    if gpus and (options.device or "auto") != "cpu":
        return (workers or gpus), 1, options.threads  # None: torch's default for the CPU-side work
    actors = workers or 2
    cpus = int(resources.get("CPU", os.cpu_count() or 1))
    return actors, 0, options.threads or max(1, min(os.cpu_count() or 1, cpus // actors))


def run_ray(items: list[InputItem], output_dir: Path, options: BatchOptions, progress: Progress, *,
            workers: int | None = None, address: str | None = None) -> None:
    import ray

    if not items:
        return
    started_here = not ray.is_initialized()
    if started_here:
        start_ray(address, workers)
    try:
        import ray.data  # configures the "ray.data" logger on first import: quieten it after that

        logging.getLogger("ray.data").setLevel(logging.ERROR)  # its start/finish lines would cut our bar
        context = ray.data.DataContext.get_current()
        context.enable_progress_bars = False  # ours counts inputs, with the manifest
        context.print_on_execution_start = False
        actors, gpus, threads = pool_shape(options, workers)
        rows = [{"path": str(item.path), "kind": item.kind, "name": item.name} for item in items]
        dataset = ray.data.from_items(rows, override_num_blocks=max(1, math.ceil(len(rows) / options.batch_size)))
        worker_args = {"output_dir": str(output_dir), "options": replace(options, threads=threads)}
        records = dataset.map_batches(BatchWorker, fn_constructor_kwargs=worker_args, batch_size=options.batch_size,
                                      batch_format="numpy", compute=ray.data.ActorPoolStrategy(size=actors),
                                      num_cpus=1, num_gpus=gpus)
        progress.start_bar(len(items))
        try:
            for row in records.iter_rows():  # streams: each batch's records as soon as an actor returns them
                progress.done(Record.from_dict(json.loads(row["record"])))
        except Exception as error:  # an actor that cannot start (e.g. a missing checkpoint): say why, plainly
            raise _cause(error) from error
    finally:
        if started_here:
            ray.shutdown()


def _cause(error: Exception) -> Exception:
    """The original exception inside Ray's wrappers, when it is one of ours."""
    from ..models.manager import CheckpointUnavailable

    seen = error
    while seen is not None:
        cause = getattr(seen, "cause", None)
        if isinstance(cause, (CheckpointUnavailable, ValueError)):
            return cause
        seen = cause if isinstance(cause, Exception) else seen.__cause__
    return error

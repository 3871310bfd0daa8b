"""What a batch run computes: the tasks and every model option, one picklable value shared by both engines
(the Ray actors receive it as it is)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .. import tasks as task_specs
from ..tasks import catalog


def parse_tasks(spec: str) -> tuple[str, ...]:
    """'seg,pose' -> ('pose', 'segment') in the catalogue's order, old spellings accepted; 'all' -> the tasks of
    "all" (the image tabs)."""
    names = [name.strip().lower() for name in spec.split(",") if name.strip()]
    choices = ", ".join(task_specs.names())
    if not names:
        raise ValueError(f"No task given; choose from {choices} or all.")
    chosen = set()
    for name in names:
        if name == "all":
            chosen.update(task_specs.names(in_all=True))
            continue
        try:
            chosen.add(task_specs.get(name).name)
        except task_specs.UnknownTask:
            raise ValueError(f"Unknown task {name!r}; choose from {choices} or all.") from None
    return tuple(task for task in task_specs.names() if task in chosen)


@dataclass(frozen=True)
class BatchOptions:
    tasks: tuple[str, ...] = field(default_factory=lambda: tuple(task_specs.names(in_all=True)))
    size: str | None = None  # None: each task's smallest released size; matting always 1b (its only size)
    checkpoint_dir: str | None = None
    detector: str | None = None
    device: str | None = None
    dtype: str | None = None
    batch_size: int = 8  # images per model call
    flip_test: bool = True
    detection_threshold: float = 0.3
    nms_iou: float = 0.3
    max_people: int = 20
    keypoint_threshold: float = 0.3
    lift_3d: bool = False  # pose: 3D keypoints from the pointmap (images: pose_3d.json / .glb; videos: motion capture)
    remove_background: bool = True  # normals, pointmap (and the features' PCA), as the app does
    threads: int | None = None  # torch threads per model worker (None: torch's default / cores per actor)
    compile: str | None = None  # auto | on | off (None: SAPIENS2_COMPILE, else auto: on for CUDA)
    work_size: int | None = None  # images (and video frames) each model will see: 'auto' compiles when it pays
    rerun: bool = False  # videos: recording.rrd per task folder (export/rerun_recording.py)

    def size_for(self, task: str) -> str:
        return task_specs.get(task).size_or_default(self.size)

    def task_options(self) -> dict:
        """The run's options under the names the task descriptions use; a batch run writes every file (the raw
        arrays and point clouds an image request gives only on request)."""
        return dict(flip_test=self.flip_test, detection_threshold=self.detection_threshold, nms_iou=self.nms_iou,
                    max_people=self.max_people, keypoint_threshold=self.keypoint_threshold,
                    remove_background=self.remove_background, lift_3d=self.lift_3d, raw_data=True)

    def required_files(self, task: str) -> tuple[str, ...]:
        """What a complete image export of `task` holds with this run's options: the task's `files`, plus its
        `option_files` of the options that are on (e.g. pose_3d.json with lift_3d). Resume requires them, so a
        re-run with the option redoes the images done without it."""
        spec = task_specs.get(task)
        on = self.task_options()
        extra = [name for option, names in spec.option_files.items() if on.get(option)
                 for name in names if name not in spec.files]
        return tuple(spec.files) + tuple(dict.fromkeys(extra))

    def required_video_files(self, task: str) -> tuple[str, ...]:
        """What a video's downloads of `task` must hold because of this run's options (pose_3d.jsonl with
        lift_3d, recording.rrd with rerun), so a re-run with the option redoes the videos done without it."""
        on = self.task_options()
        return tuple(name for option, names in task_specs.get(task).video_option_files.items() if on.get(option)
                     for name in names) + (("recording.rrd",) if self.rerun else ())

    @property
    def lifts(self) -> bool:
        """Pose lifts to 3D: it also runs the pointmap model, masked with the body-part segmentation."""
        return self.lift_3d and bool(self._lifting())

    def _lifting(self) -> list[str]:
        return [task for task in self.tasks if "lift_3d" in task_specs.get(task).defaults()]

    def jobs(self) -> list:
        """One GPU job per task; the segmentation first, so the tasks that mask with it share it (the cache)."""
        order = sorted(self.tasks, key=lambda task: task != "segment")
        jobs = [task_specs.get(task).job(self.size, self.task_options()) for task in order]
        for job in jobs:
            job.options["batch_size"] = self.batch_size  # pose: crops per model call; the others ignore it
        return jobs

    @property
    def needs_segmentation(self) -> bool:
        """Seg results are wanted, or used as masks (normals, pointmap, the features' PCA)."""
        masked = self.remove_background and any(task_specs.get(task).uses_mask for task in self.tasks)
        return "segment" in self.tasks or masked or self.lifts

    def make_manager(self):
        from transformers.utils import logging as transformers_logging

        from ..models.manager import ModelManager

        transformers_logging.disable_progress_bar()  # "Loading weights" bars would break the run's own bar

        if self.threads:
            import torch

            torch.set_num_threads(int(self.threads))
        return ModelManager(checkpoint_dir=self.checkpoint_dir, device=self.device, dtype=self.dtype,
                            detector=self.detector, compile=self.compile, work_size=self.work_size)

    def checkpoints(self) -> list:
        """Every checkpoint the run needs (loaded before the first batch, so a missing one stops the run)."""
        from ..models.registry import UnknownCheckpoint, checkpoint

        needed = {(task_specs.get(task).family, self.size_for(task)) for task in self.tasks}
        if self.lifts:  # the pointmap at pose's size
            needed.add((task_specs.get(catalog.LIFT_TASK).family, self.size_for(self._lifting()[0])))
        if self.needs_segmentation:
            needed.add((task_specs.get("segment").family, self.size_for("segment")))
        found = []
        for family, size in sorted(needed):
            try:
                found.append(checkpoint(family, size))
            except UnknownCheckpoint:  # a model-free task
                continue
        return found


def resolve_path(path: str | Path) -> Path:
    return Path(path).expanduser().absolute()

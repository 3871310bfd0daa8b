"""What a batch run computes: the tasks and every model option, one picklable value shared by both engines
(the Ray actors receive it as it is)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

TASK_CHOICES = ("pose", "seg", "normal", "pointmap", "matting", "features")
ALL_TASKS = ("pose", "seg", "normal", "pointmap", "matting")  # `--tasks all`: the image tabs
MASKED_TASKS = ("normal", "pointmap")  # background removed with the body-part segmentation by default


def parse_tasks(spec: str) -> tuple[str, ...]:
    """'seg,pose' -> ('pose', 'seg') in a fixed order; 'all' -> every image tab's task."""
    names = [name.strip().lower() for name in spec.split(",") if name.strip()]
    if not names:
        raise ValueError("No task given; choose from pose, seg, normal, pointmap, matting, features or all.")
    chosen = set()
    for name in names:
        if name == "all":
            chosen.update(ALL_TASKS)
        elif name in TASK_CHOICES:
            chosen.add(name)
        else:
            raise ValueError(f"Unknown task {name!r}; choose from {', '.join(TASK_CHOICES)} or all.")
    return tuple(task for task in TASK_CHOICES if task in chosen)


@dataclass(frozen=True)
class BatchOptions:
    tasks: tuple[str, ...] = ALL_TASKS
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
    remove_background: bool = True  # normals and pointmap, as the app does
    threads: int | None = None  # torch threads per model worker (None: torch's default / cores per actor)

    def size_for(self, task: str) -> str:
        from ..models.registry import TASKS, default_size

        registry_task = "pretrain" if task == "features" else task
        if self.size and self.size in TASKS[registry_task].sizes:
            return self.size
        return default_size(registry_task)

    def pose_options(self) -> dict:
        return dict(flip_test=self.flip_test, score_threshold=self.detection_threshold, nms_iou=self.nms_iou,
                    max_people=self.max_people, batch_size=self.batch_size)

    @property
    def needs_segmentation(self) -> bool:
        """Seg results are wanted, or used as masks (normals, pointmap, the features' PCA)."""
        masked = self.remove_background and any(task in MASKED_TASKS for task in self.tasks)
        return "seg" in self.tasks or "features" in self.tasks or masked

    def make_manager(self):
        from transformers.utils import logging as transformers_logging

        from ..models.manager import ModelManager

        transformers_logging.disable_progress_bar()  # "Loading weights" bars would break the run's own bar

        if self.threads:
            import torch

            torch.set_num_threads(int(self.threads))
        return ModelManager(checkpoint_dir=self.checkpoint_dir, device=self.device, dtype=self.dtype,
                            detector=self.detector)

    def checkpoints(self) -> list:
        """Every checkpoint the run needs (loaded before the first batch, so a missing one stops the run)."""
        from ..models.registry import checkpoint

        needed = {("pretrain" if task == "features" else task, self.size_for(task)) for task in self.tasks}
        if self.needs_segmentation:
            needed.add(("seg", self.size_for("seg")))
        return [checkpoint(task, size) for task, size in sorted(needed)]


def resolve_path(path: str | Path) -> Path:
    return Path(path).expanduser().absolute()

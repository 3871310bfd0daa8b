"""Which Sapiens2 checkpoints exist, where they live, and which revision to load.

This is data, not code paths: the UI and the API may only ask for a (task, size) pair listed here,
so no client can make the server fetch an arbitrary repository or path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

LICENSE_URL = "https://github.com/facebookresearch/sapiens2/blob/main/LICENSE"
ACCEPTABLE_USE = (
    "Sapiens2 is released under the Sapiens2 License: no surveillance, biometric identification, "
    "re-identification or deepfakes. Outputs are model estimates, not measurements."
)


@dataclass(frozen=True)
class Task:
    name: str  # short id used in repo ids and API names
    title: str  # tab title
    auto_class: str  # transformers AutoModelFor<Task> class name
    sizes: tuple[str, ...]


TASKS: dict[str, Task] = {
    "pose": Task("pose", "Pose", "AutoModelForPoseEstimation", ("0.4b", "0.8b", "1b", "5b")),
    "seg": Task("seg", "Body parts", "AutoModelForSemanticSegmentation", ("0.4b", "0.8b", "1b", "5b")),
    "normal": Task("normal", "Normals", "AutoModelForNormalEstimation", ("0.4b", "0.8b", "1b", "5b")),
    "pointmap": Task("pointmap", "Depth & 3D", "AutoModelForPointmapEstimation", ("0.4b", "0.8b", "1b", "5b")),
    "matting": Task("matting", "Matting", "AutoModelForImageMatting", ("1b",)),
    # the pretrained backbone alone (CLS embedding + patch features); no head, so AutoModel -> Sapiens2Model.
    # 0.1b (0.114 B parameters, a quarter of 0.4b's work) exists as a backbone only; it is listed last so that the
    # first size stays the default everywhere (menus show sizes in order of size)
    "pretrain": Task("pretrain", "Features", "AutoModel", ("0.4b", "0.8b", "1b", "5b", "0.1b")),
}
POSE_FAMILY, BACKBONE_FAMILY = "pose", "pretrain"
# the families whose heads map an image to per-pixel maps: seg, normal, pointmap, matting
DENSE_FAMILIES = tuple(name for name in TASKS if name not in (POSE_FAMILY, BACKBONE_FAMILY))

# Revision per checkpoint. The transformers-format files (config.json, model.safetensors,
# preprocessor_config.json) may only exist on a PR ref for some repos, hence one entry each, and a
# fallback tried when the default revision lacks those files.
# Override at run time with SAPIENS2_REVISIONS="facebook/sapiens2-seg-0.4b=refs/pr/1,..." (no fallback then).
DEFAULT_REVISIONS: dict[str, str] = {
    f"facebook/sapiens2-{task.name}-{size}": "main" for task in TASKS.values() for size in task.sizes
}
FALLBACK_REVISION = "refs/pr/1"


@dataclass(frozen=True)
class Checkpoint:
    task: str
    size: str
    revision: str
    fallback_revision: str | None = None  # tried when `revision` has no transformers-format files

    @property
    def repo_id(self) -> str:
        return f"facebook/sapiens2-{self.task}-{self.size}"

    @property
    def dirname(self) -> str:
        """Folder name inside --checkpoint-dir: facebook/sapiens2-seg-0.4b -> sapiens2-seg-0.4b."""
        return self.repo_id.split("/", 1)[1]


class UnknownCheckpoint(ValueError):
    pass


def revision_overrides(spec: str | None = None) -> dict[str, str]:
    spec = os.environ.get("SAPIENS2_REVISIONS", "") if spec is None else spec
    overrides = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        repo_id, sep, revision = item.partition("=")
        if not sep or repo_id not in DEFAULT_REVISIONS or not revision:
            raise UnknownCheckpoint(f"Bad revision override {item!r}: expected facebook/sapiens2-<task>-<size>=<rev>")
        overrides[repo_id] = revision
    return overrides


def checkpoint(task: str, size: str) -> Checkpoint:
    """The allow-listed checkpoint for (task, size); anything else raises UnknownCheckpoint."""
    if task not in TASKS:
        raise UnknownCheckpoint(f"Unknown task {task!r}; choose one of {', '.join(TASKS)}.")
    sizes = TASKS[task].sizes
    if size not in sizes:
        raise UnknownCheckpoint(f"No {task} checkpoint of size {size!r}; released sizes: {', '.join(sizes)}.")
    repo_id = f"facebook/sapiens2-{task}-{size}"
    override = revision_overrides().get(repo_id)
    if override:
        return Checkpoint(task, size, override)
    return Checkpoint(task, size, DEFAULT_REVISIONS[repo_id], FALLBACK_REVISION)


def default_size(task: str) -> str:
    return TASKS[task].sizes[0]

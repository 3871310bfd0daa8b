"""The run's record and its resume rules.

`DIR/manifest.jsonl` gets one JSON line per input per run, appended as each input finishes:

    {"input": "/abs/path/a/x.jpg", "status": "ok", "outputs": ["a/x/seg/body_parts_labels.png", ...],
     "error": null, "seconds": 0.42, "tasks": ["pose", "segment"]}

`status` is ok, failed (with `error`, the message) or skipped (already complete; `outputs` lists the files
found). `outputs` are relative to DIR, so a copied or remounted output folder still reads right; `seconds`
is the input's own share of the run (reading, its share of the batch's model time, writing). Later lines
supersede earlier ones; a line cut short by a crash is ignored when read.

Resume: an image is complete when every task folder holds all the files its task description names (`files`)
and those the run's options add (BatchOptions.required_files: pose_3d.json with --lift-3d); a video when,
for every task, the latest `ok` line that ran it lists its files, they all still exist and they include those
the run's options add (BatchOptions.required_video_files: pose_3d.jsonl with --lift-3d). Files are written
into a hidden temporary folder and renamed into place, the expected ones last, so a crash never leaves a
complete-looking set with a partial file in it.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .. import tasks as task_specs
from .inputs import InputItem

MANIFEST_NAME = "manifest.jsonl"
TMP_PREFIX = ".tmp-"


@dataclass
class Record:
    input: str
    status: str  # ok | failed | skipped
    outputs: list[str] = field(default_factory=list)  # relative to DIR
    error: str | None = None
    seconds: float = 0.0
    tasks: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        data = asdict(self)
        data["seconds"] = round(float(self.seconds), 4)
        return json.dumps(data, ensure_ascii=False)

    @classmethod
    def from_dict(cls, data: dict) -> Record:
        return cls(**{key: data.get(key) for key in ("input", "status", "outputs", "error", "seconds", "tasks")})


class Manifest:
    """Appends records to DIR/manifest.jsonl, one whole line per write, from any thread."""

    def __init__(self, output_dir: str | Path):
        self.output_dir = Path(output_dir)
        self.path = self.output_dir / MANIFEST_NAME
        self._lock = threading.Lock()

    def previous(self) -> dict[str, list[Record]]:
        """The ok lines of earlier runs per input, oldest first (the video resume check reads these)."""
        done: dict[str, list[Record]] = {}
        for record in read_manifest(self.path):
            if record.status == "ok":
                done.setdefault(record.input, []).append(record)
        return done

    def append(self, record: Record) -> None:
        line = (record.to_json() + "\n").encode()
        with self._lock:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line)  # O_APPEND + one write: a line is never interleaved with another
            finally:
                os.close(fd)


def read_manifest(path: str | Path) -> list[Record]:
    records = []
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        return records
    for line in lines:
        try:
            records.append(Record.from_dict(json.loads(line)))
        except (ValueError, TypeError):  # a line cut short by a crash
            continue
    return records


def relative_outputs(paths, output_dir: Path) -> list[str]:
    return [Path(p).relative_to(output_dir).as_posix() for p in paths]


def _names(name: str, spec) -> bool:
    """Whether a manifest's task name means `spec` (older manifests used the aliases: seg, normal)."""
    try:
        return task_specs.get(name) is spec
    except task_specs.UnknownTask:
        return False


def _video_task_outputs(item: InputItem, task: str, output_dir: Path, records: list[Record],
                        needed: tuple[str, ...] = ()) -> list[str] | None:
    """The files the latest ok run of `task` on this video wrote, if they are all still there and hold `needed`."""
    spec = task_specs.get(task)
    for record in reversed(records):
        if any(_names(name, spec) for name in record.tasks or []):
            mine = [p for p in record.outputs if p.startswith(f"{item.name}/{spec.out_folder}/")]
            held = {p.rsplit("/", 1)[-1] for p in mine}
            complete = mine and set(needed) <= held and all((output_dir / p).is_file() for p in mine)
            return mine if complete else None
    return None


def complete_outputs(item: InputItem, tasks, output_dir: Path, previous: dict[str, list[Record]],
                     required: Callable[[str], tuple[str, ...]] | None = None,
                     video_required: Callable[[str], tuple[str, ...]] | None = None) -> list[str] | None:
    """The outputs (relative to DIR) when `item` is complete for every task, else None. `required(task)`: the
    files a complete image export of the task holds under the run's options (default: the task's `files`);
    `video_required(task)`: the files a video's downloads must hold under them (default: none)."""
    folder = item.folder(output_dir)
    if item.kind == "video":
        records = previous.get(str(item.path), [])
        per_task = [_video_task_outputs(item, task, output_dir, records, video_required(task) if video_required else ())
                    for task in tasks if task_specs.get(task).video]  # e.g. features are per image
        return None if not per_task or None in per_task else [p for paths in per_task for p in paths]
    outputs = []
    for task in tasks:
        spec = task_specs.get(task)
        here = folder / spec.out_folder
        needed = spec.files if required is None else required(task)
        if not all((here / name).is_file() for name in needed):
            return None
        optional = [here / name for name in spec.optional_files if name not in needed and (here / name).is_file()]
        outputs += [here / name for name in needed] + optional
    return relative_outputs(outputs, output_dir)


def temporary_folder(item_folder: Path, task: str) -> Path:
    """A fresh hidden folder next to the task's folder, for writing before the rename."""
    path = item_folder / f"{TMP_PREFIX}{task}-{uuid.uuid4().hex[:8]}"
    path.mkdir(parents=True)
    return path


def publish(tmp: Path, folder: Path, written: list[Path], expected: tuple[str, ...] = (),
            stale: tuple[str, ...] = ()) -> list[Path]:
    """Rename the files written into `tmp` into `folder` (the `expected` ones last), delete `stale` names
    this run did not write (e.g. an old point cloud), remove `tmp`. Returns the final paths."""
    folder.mkdir(parents=True, exist_ok=True)
    final = {}
    for path in sorted(written, key=lambda p: Path(p).name in expected):  # False sorts first
        target = folder / Path(path).relative_to(tmp)
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
        final[path] = target
    names = {target.name for target in final.values()}
    for name in stale:
        if name not in names:
            (folder / name).unlink(missing_ok=True)
    shutil.rmtree(tmp, ignore_errors=True)
    return [final[path] for path in written]


def clear_temporaries(item_folder: Path) -> None:
    """Hidden temporary folders a killed run left behind."""
    if item_folder.is_dir():
        for path in item_folder.glob(f"{TMP_PREFIX}*"):
            shutil.rmtree(path, ignore_errors=True)

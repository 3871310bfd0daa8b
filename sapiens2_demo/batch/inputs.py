"""Which files a batch run reads, and where each one's outputs go.

- `--input` takes files, folders (searched recursively) and globs (`**` included). Inside folders and globs
  only known image and video suffixes are taken; a file named explicitly is always taken (an image unless
  its suffix says video), so a bad one is reported rather than silently ignored.
- Outputs mirror the inputs' folders below their common root: `DIR/<path relative to the root, without the
  suffix>/<task>/`. Two inputs with one name in different folders never collide; two with one stem in one
  folder (`a.jpg`, `a.png`) keep their suffix in the folder name (`a_jpg`, `a_png`).
- Files inside the output folder are never inputs (a run over `.` writing to `./out` does not feed on its
  own exports).
"""

from __future__ import annotations

import glob
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".webp", ".bmp", ".tif", ".tiff", ".gif", ".avif", ".mpo"})
VIDEO_SUFFIXES = frozenset({".mp4", ".mov", ".m4v", ".mkv", ".webm", ".avi", ".mpg", ".mpeg", ".wmv", ".flv"})


class InputError(ValueError):
    """An --input that names nothing; the message says which."""


@dataclass(frozen=True)
class InputItem:
    path: Path  # absolute
    kind: str  # "image" or "video"
    name: str  # output folder relative to DIR, posix style: "<relative path without suffix>"

    def folder(self, output_dir: Path) -> Path:
        return Path(output_dir, *PurePosixPath(self.name).parts)


def kind_of(path: Path) -> str:
    return "video" if path.suffix.lower() in VIDEO_SUFFIXES else "image"


def _is_media(path: Path) -> bool:
    return path.suffix.lower() in IMAGE_SUFFIXES | VIDEO_SUFFIXES


def _glob_anchor(pattern: str) -> Path:
    """The folder part of a glob before its first wildcard: 'data/*/x*.jpg' -> data."""
    parts = Path(pattern).parts
    fixed = [part for part in parts[:next(i for i, part in enumerate(parts) if glob.has_magic(part))]]
    return Path(os.path.abspath(Path(*fixed) if fixed else "."))


def _inside(path: Path, folder: Path | None) -> bool:
    return folder is not None and (path == folder or folder in path.parents)


def discover(patterns: list[str], output_dir: str | Path | None = None) -> list[InputItem]:
    """Every input file named by `patterns`, in a stable order, each with its output folder name."""
    output_dir = Path(os.path.abspath(output_dir)) if output_dir else None
    files: dict[Path, None] = {}  # ordered set
    anchors: list[Path] = []
    for pattern in patterns:
        path = Path(os.path.abspath(os.path.expanduser(pattern)))
        if glob.has_magic(pattern) and not path.exists():
            matches = sorted(Path(os.path.abspath(m)) for m in glob.glob(os.path.expanduser(pattern), recursive=True))
            matches = [m for m in matches if m.is_file() and _is_media(m)]
            if not matches:
                raise InputError(f"No image or video matches {pattern!r}.")
            anchors.append(_glob_anchor(os.path.expanduser(pattern)))
            found = matches
        elif path.is_dir():
            anchors.append(path)
            found = sorted(p for p in path.rglob("*") if p.is_file() and _is_media(p))
        elif path.is_file():
            anchors.append(path.parent)
            found = [path]
        else:
            raise InputError(f"No such file or folder: {pattern}")
        for file in found:
            if not _inside(file, output_dir):
                files[file] = None
    if not files:
        raise InputError(f"No image or video found in {', '.join(patterns)}.")
    return name_outputs(list(files), anchors)


def name_outputs(files: list[Path], anchors: list[Path]) -> list[InputItem]:
    """Output folder names: each file's path below the common root of `anchors` (the folders the user
    named, or the files' own folders), suffix dropped unless two files would then share a name."""
    root = Path(os.path.commonpath([str(a) for a in anchors] + [str(f.parent) for f in files]))
    stems = [PurePosixPath(f.relative_to(root).with_suffix("").as_posix()) for f in files]
    counts = Counter(stems)
    items = []
    for file, stem in zip(files, stems):
        if counts[stem] > 1:  # a.jpg and a.png in one folder
            stem = stem.with_name(f"{stem.name}_{file.suffix.lstrip('.').lower()}")
        items.append(InputItem(path=file, kind=kind_of(file), name=stem.as_posix()))
    return items

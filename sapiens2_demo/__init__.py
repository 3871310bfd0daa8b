"""Sapiens2 demo: models -> pipelines -> render / export, with the UI, the CLI and Ray as front doors."""

import os as _os
import sys as _sys
from pathlib import Path as _Path


def cache_root() -> _Path:
    """Where the app keeps what it fetches or builds: beside the Hugging Face cache (HF_HOME's parent, else
    XDG_CACHE_HOME or ~/.cache), as the compile cache is."""
    if _os.environ.get("HF_HOME"):
        return _Path(_os.environ["HF_HOME"]).expanduser().parent
    return _Path(_os.environ.get("XDG_CACHE_HOME") or _Path.home() / ".cache").expanduser()


def _quiet_ultralytics() -> None:
    """ultralytics must never pip-install at run time (its patched PIL.Image.open installs pi-heif when a file is
    not an image: a visitor's upload would make the server install packages). It reads YOLO_AUTOINSTALL and
    YOLO_CONFIG_DIR once, when first imported: set here, before any module of ours imports it. Its settings then
    live under the app's cache, not the home folder's config."""
    _os.environ["YOLO_AUTOINSTALL"] = "False"  # forced: no setting turns installs on
    _os.environ.setdefault("YOLO_CONFIG_DIR", str(cache_root() / "sapiens2-ultralytics"))
    for name in ("ultralytics.utils", "ultralytics.utils.checks"):  # imported before us (an embedding program)
        if name in _sys.modules:
            _sys.modules[name].AUTOINSTALL = False


def _sleeping_openmp() -> None:
    """torch's OpenMP threads wait for work asleep (`OMP_WAIT_POLICY=PASSIVE`), not spinning first as libgomp does
    by default: on a 2-core CPU a spinning pool holds the core that a video's decoder and encoder, gradio's server or
    another process needs, and each small op then waits for a descheduled thread (720p pre-processing with one core
    busy elsewhere: 44 against 3.7 ms a frame; docs/host.md). libgomp reads it once, when torch loads: set here,
    before any module of ours imports torch. A user's own setting wins."""
    _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # also for the processes this one starts (Ray's workers)


_quiet_ultralytics()
_sleeping_openmp()

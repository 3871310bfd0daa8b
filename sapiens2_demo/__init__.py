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


def _kept_heap() -> None:
    """Large arrays come from glibc's heap and go back to it, not to the system. By default glibc maps each large
    allocation afresh and unmaps it when freed, so every frame's maps (a 720p float map is 11 MB) page-fault on
    their first write: unit normals at 720p took 14.5-19 ms that way against 6.5-7.7 kept (docs/host.md). The same
    as `MALLOC_MMAP_THRESHOLD_=32 MiB` (glibc's largest) and `MALLOC_TRIM_THRESHOLD_=256 MiB`: set for this process
    through mallopt, and in the environment for the processes it starts. The cost: up to 256 MiB of freed heap
    kept by the process. A user's own MALLOC_* or GLIBC_TUNABLES setting wins (nothing is changed then)."""
    if not _sys.platform.startswith("linux") or any(k.startswith("MALLOC_") or k == "GLIBC_TUNABLES"
                                                     for k in _os.environ):
        return
    import ctypes

    try:
        mallopt = ctypes.CDLL(None).mallopt  # glibc's (musl's is a stub that changes nothing)
    except (OSError, AttributeError):
        return
    trim, mmap = 256 << 20, 32 << 20
    if mallopt(-1, trim) and mallopt(-3, mmap):  # M_TRIM_THRESHOLD, M_MMAP_THRESHOLD: 1 when taken
        _os.environ["MALLOC_TRIM_THRESHOLD_"], _os.environ["MALLOC_MMAP_THRESHOLD_"] = str(trim), str(mmap)


_quiet_ultralytics()
_sleeping_openmp()
_kept_heap()

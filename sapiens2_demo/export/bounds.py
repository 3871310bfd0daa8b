"""The bounds of each .glb this process wrote, as its writer had them: the 3D viewers frame a model from these
rather than reading the file back (ui/viewers.py: trimesh took tens of ms to load a 300k-face mesh just to know
its box). Kept for the newest KEPT files; a file not found here is read as before."""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

KEPT = 4096
_BOUNDS: OrderedDict[str, np.ndarray] = OrderedDict()
_LOCK = threading.Lock()


def _key(path) -> str:
    return str(Path(path).absolute())


def remember(path: Path, bounds) -> Path:
    """Record `bounds` ((2, 3) min and max, the file's own frame) for the file at `path`; returns the path."""
    box = np.array(bounds, dtype=float).reshape(2, 3)
    with _LOCK:
        _BOUNDS[_key(path)] = box
        _BOUNDS.move_to_end(_key(path))
        while len(_BOUNDS) > KEPT:
            _BOUNDS.popitem(last=False)
    return path


def recorded(path) -> np.ndarray | None:
    """The bounds a writer of this process recorded for `path`, or None."""
    with _LOCK:
        box = _BOUNDS.get(_key(path))
    return None if box is None else box.copy()


def gltf_bounds(points: np.ndarray) -> np.ndarray:
    """(2, 3) min and max of camera-frame points once flipped to the glTF frame (x, -y, -z): the flip swaps
    each flipped axis's min and max, so no flipped copy is made."""
    points = np.asarray(points, dtype=np.float32).reshape(-1, 3)
    if not len(points):
        return np.zeros((2, 3))
    low, high = points.min(axis=0).astype(float), points.max(axis=0).astype(float)
    sign = np.array([1.0, -1.0, -1.0])
    return np.sort(np.stack([low * sign, high * sign]), axis=0)

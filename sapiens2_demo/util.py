"""Small helpers every layer may use (the lowest layer, beside `results`): written once here."""

from __future__ import annotations

import contextlib
import os
from itertools import islice
from pathlib import Path

import numpy as np


def as_rgb_uint8(image) -> np.ndarray:
    """Accept RGB, RGBA (alpha dropped) or greyscale uint8 arrays; anything else is a ValueError.
    Returns a C-contiguous, writable (H, W, 3) array (torch warns on read-only ones)."""
    image = np.asarray(image)
    if image.dtype != np.uint8:
        raise ValueError(f"Expected a uint8 image; got {image.dtype}.")
    if image.ndim == 2:
        image = np.repeat(image[:, :, None], 3, axis=2)
    if image.ndim != 3 or image.shape[2] not in (3, 4) or min(image.shape[:2]) < 1:
        raise ValueError(f"Expected an RGB image of shape (H, W, 3); got {image.shape}.")
    image = np.ascontiguousarray(image[:, :, :3])
    return image if image.flags.writeable else image.copy()


def fit_longest_side(rgb: np.ndarray, max_side: int | None) -> np.ndarray:
    """Downscale (area filter, aspect kept) so the longest side is at most `max_side`; smaller images as they are."""
    h, w = rgb.shape[:2]
    if not max_side or max(h, w) <= max_side:
        return rgb
    import cv2

    scale = max_side / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cv2.resize(np.ascontiguousarray(rgb), size, interpolation=cv2.INTER_AREA)


def partial_path(path: Path) -> Path:
    """Where a file is written before it is complete: a hidden name beside it, renamed into place at the end."""
    return path.with_name(f".{path.name}.partial")


@contextlib.contextmanager
def atomic_write(path: str | Path):
    """Yield a temporary path beside `path`; on success rename it into place, on failure remove it, so a file
    that looks complete always is."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = partial_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def batched(items, size: int):
    """Lists of up to `size` items, in order (itertools.batched is Python 3.12+)."""
    iterator = iter(items)
    while batch := list(islice(iterator, max(1, int(size)))):
        yield batch


def notes_markdown(notes) -> str:
    """Notes as the bullet list every tab answers with, in plain text ("motion_<id>.bvh", not "&lt;id&gt;"): what
    API and MCP callers read. The page escapes it before showing it as Markdown (ui.common.notes_output)."""
    return "\n".join("- " + note for note in notes)


def target(folder: str | Path, name: str) -> Path:
    """`folder / name`, the folder created if missing: where every exporter writes."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def png_bytes(array: np.ndarray) -> bytes:
    """A PNG of a greyscale, RGB or RGBA array, uint8 or uint16: every row with the "up" filter, deflated by
    ISA-L (`isal`, zlib-compatible) at level 1, in one IDAT chunk. At 1080p this is 4-13x faster than OpenCV's
    libpng at zlib level 1 (CPU ms: 16-bit noise 24 against 315, a smooth 16-bit map 35 against 147, a photo 20
    against 82) with files of about the same size (smaller on smooth maps); the stdlib's zlib stands in when
    `isal` is missing (the same bytes format, about OpenCV's speed). Both release the GIL, so downloads
    encode in parallel threads."""
    import struct

    array = np.asarray(array)
    if array.dtype not in (np.uint8, np.uint16) or array.ndim not in (2, 3) or min(array.shape[:2]) < 1 \
            or (array.ndim == 3 and array.shape[2] not in (1, 3, 4)):
        raise ValueError(f"A PNG holds uint8 or uint16 greyscale/RGB/RGBA; got {array.dtype} {array.shape}.")
    height, width = array.shape[:2]
    channels = 1 if array.ndim == 2 else array.shape[2]
    rows = np.ascontiguousarray(array, dtype=">u2" if array.dtype == np.uint16 else np.uint8)
    rows = rows.reshape(height, -1).view(np.uint8)  # PNG samples are big-endian
    filtered = np.empty((height, rows.shape[1] + 1), np.uint8)
    filtered[:, 0] = 2  # "up": each byte minus the one above it (modulo 256)
    filtered[0] = 0  # the first row as it is (filter type 0)
    filtered[0, 1:] = rows[0]
    np.subtract(rows[1:], rows[:-1], out=filtered[1:, 1:])

    crc32 = _deflate().crc32  # ISA-L's: 0.2 against zlib's 2.9 ms for 12 MB

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc32(data, crc32(kind)))

    colour_type = {1: 0, 3: 2, 4: 6}[channels]  # greyscale, RGB, RGBA
    header = struct.pack(">IIBBBBB", width, height, 8 * array.itemsize, colour_type, 0, 0, 0)
    return b"".join([b"\x89PNG\r\n\x1a\n", chunk(b"IHDR", header),
                     chunk(b"IDAT", zlib_stream(filtered.reshape(-1))), chunk(b"IEND", b"")])


DEFLATE_BLOCK = 2 << 20  # bytes: a PNG's data past twice this is deflated in blocks of about this size, in threads


def zlib_stream(data: np.ndarray) -> bytes:
    """`data` (uint8, 1-D) as a zlib stream at level 1. Past 2 * DEFLATE_BLOCK it is cut into blocks (how many
    depends on the size alone, so the bytes do not depend on the machine) deflated in threads and joined as pigz
    does: each block ends on a byte boundary (a sync flush), the last one finishes the stream, the checksum is the
    whole data's. A 16-bit 1080p normals map is 12 MB: 30 ms of one core, most of a GPU image request's files."""
    lib = _deflate()
    blocks = min(8, len(data) // DEFLATE_BLOCK)
    if blocks < 2:
        return lib.compress(data, 1)
    bounds = np.linspace(0, len(data), blocks + 1).astype(int)
    parts = [data[a:b] for a, b in zip(bounds[:-1], bounds[1:])]

    def deflate(i: int) -> bytes:
        raw = lib.compressobj(1, lib.DEFLATED, -15)  # raw deflate: no header, no checksum
        return raw.compress(parts[i]) + raw.flush(lib.Z_FINISH if i == blocks - 1 else lib.Z_SYNC_FLUSH)

    body = in_parallel(*(lambda i=i: deflate(i) for i in range(blocks)))  # threads of this call (a pool kept
    # across calls would not survive the fork of a ZeroGPU worker)
    return b"".join([b"\x78\x01", *body, lib.adler32(data).to_bytes(4, "big")])  # 0x7801: deflate, 32K, fastest


def _deflate():
    """ISA-L's zlib-compatible compressor where installed, else the stdlib's zlib."""
    try:
        from isal import isal_zlib
    except ImportError:
        import zlib

        return zlib
    return isal_zlib


def write_png(path: str | Path, array: np.ndarray) -> Path:
    path = Path(path)
    path.write_bytes(png_bytes(array))
    return path


def write_jpeg(path: str | Path, rgb: np.ndarray, quality: int = 90) -> Path:
    """An RGB uint8 array as a JPEG: OpenCV's libjpeg-turbo, the same bytes as PIL's at the same quality in ~0.7x
    its CPU time at 1080p (5.5 against 7.6 ms, `python -m benchmarks host`); releases the GIL."""
    import cv2

    path = Path(path)
    ok, data = cv2.imencode(".jpg", cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2BGR),
                            [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:
        raise ValueError(f"Could not encode a JPEG of shape {np.shape(rgb)}.")
    path.write_bytes(data.tobytes())
    return path


def at_once(start):
    """The one-call form of a two-stage function (`start(...)` returns `finish`, a function of no arguments that
    gives the result; see pipelines/dense.py): start, then finish at once."""

    def run(*args, **kwargs):
        return start(*args, **kwargs)()

    run.__name__ = run.__qualname__ = start.__name__.removeprefix("start_")
    run.__doc__ = start.__doc__
    return run


def in_parallel(*calls):
    """Run zero-argument callables in threads and return their results in order (the first error is raised
    after all have finished). For file writers: PNG encoding, zlib and file I/O release the GIL."""
    if len(calls) <= 1:
        return [call() for call in calls]
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(len(calls), os.cpu_count() or 2)) as pool:
        futures = [pool.submit(call) for call in calls]
    return [future.result() for future in futures]


def bytes_check(array: np.ndarray) -> tuple:
    """A crc32 of an array's bytes, with its shape and dtype (ISA-L where installed: 0.8 ms for a 1080p float32
    pointmap, 0.05 ms for its mask; the stdlib's zlib about 7x that)."""
    return _deflate().crc32(np.ascontiguousarray(array).data), array.shape, array.dtype.str


class ArrayMemo:
    """Something computed from some arrays, kept per array object while they live and hold the bytes they held
    (`bytes_check`): a computation several readers of one request ask for (an image's digest, a map's valid depths)
    is made once, and an array written in place (a caller's buffer reused for the next frame) is computed again.
    `None` stands for an absent array."""

    def __init__(self):
        import threading

        self._entries: dict[tuple, tuple] = {}  # ids -> (weak references, checks, value)
        self._lock = threading.Lock()

    def get(self, arrays: tuple, compute):
        import weakref

        key = tuple(id(a) for a in arrays)
        checks = tuple(None if a is None else bytes_check(a) for a in arrays)
        with self._lock:
            entry = self._entries.get(key)
        if entry is not None and entry[1] == checks and all(
                (ref is None) == (a is None) and (ref is None or ref() is a) for ref, a in zip(entry[0], arrays)):
            return entry[2]
        value = compute()
        try:
            refs = tuple(None if a is None else weakref.ref(a, lambda _: self._forget(key)) for a in arrays)
        except TypeError:  # not weak-referenceable: not kept
            return value
        with self._lock:
            self._entries[key] = (refs, checks, value)
        return value

    def _forget(self, key: tuple) -> None:
        with self._lock:
            self._entries.pop(key, None)


_DIGESTS = ArrayMemo()
try:  # xxHash's XXH3, 128 bits: 0.1 ms for a 1080p image where blake2b takes 6.6 (AMD EPYC), 17 on a GPU host
    from xxhash import xxh3_128 as _pixel_hash
except ImportError:  # the same keys, slower

    def _pixel_hash(data):
        import hashlib

        return hashlib.blake2b(data, digest_size=16)


def content_digest(image: np.ndarray) -> str:
    """A 128-bit hash of an array's bytes and shape (the segmentation cache's key, made before the forward),
    computed once per array object: an All-tasks request keys the cache six times with one image. Kept while the
    array lives and holds the same bytes (ArrayMemo: a crc32 tells a change in place, which hashes again)."""

    def digest() -> str:
        hashed = _pixel_hash(np.ascontiguousarray(image).data)
        hashed.update(repr(image.shape).encode())
        return hashed.hexdigest()

    return _DIGESTS.get((image,), digest)

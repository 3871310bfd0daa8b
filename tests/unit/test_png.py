"""util.png_bytes: our PNG writer (the "up" filter, ISA-L or the stdlib's zlib) read back by OpenCV and PIL."""

from __future__ import annotations

import io
import zlib

import cv2
import numpy as np
import pytest
from PIL import Image

from sapiens2_demo import util

SHAPES = [((1, 1), np.uint8), ((5, 7), np.uint16), ((33, 17, 3), np.uint8), ((33, 17, 3), np.uint16),
          ((9, 4, 4), np.uint8), ((9, 4, 4), np.uint16), ((3, 5, 1), np.uint8), ((270, 480, 3), np.uint16),
          ((1080, 1920, 3), np.uint16)]  # the last: 12 MB, deflated in blocks


def _opencv(data: bytes) -> np.ndarray:
    decoded = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_UNCHANGED)
    if decoded.ndim == 3:
        decoded = cv2.cvtColor(decoded, cv2.COLOR_BGRA2RGBA if decoded.shape[2] == 4 else cv2.COLOR_BGR2RGB)
    return decoded


@pytest.mark.parametrize("compressor", ["isal", "zlib"])
@pytest.mark.parametrize("shape,dtype", SHAPES)
def test_png_bytes_round_trip_exactly(shape, dtype, compressor, monkeypatch):
    if compressor == "zlib":  # the stand-in when isal is not installed
        monkeypatch.setattr(util, "_deflate", lambda: zlib)
    else:
        pytest.importorskip("isal")
    array = np.random.default_rng(0).integers(0, np.iinfo(dtype).max, shape, dtype=dtype, endpoint=True)
    expected = array[..., 0] if array.ndim == 3 and array.shape[2] == 1 else array
    data = util.png_bytes(array)
    decoded = _opencv(data)
    assert decoded.dtype == dtype and np.array_equal(decoded, expected)
    if dtype == np.uint8 or array.ndim == 2:  # PIL reads 16-bit greyscale, not 16-bit colour
        assert np.array_equal(np.asarray(Image.open(io.BytesIO(data))).astype(dtype), expected)


@pytest.mark.parametrize("compressor", ["isal", "zlib"])
def test_a_big_png_is_deflated_in_blocks_into_one_valid_zlib_stream(compressor, monkeypatch):
    """Blocks deflated in threads and joined (pigz's way) must make one zlib stream whose checksum a strict reader
    accepts, with the same bytes every time (the block count follows the size, not the machine)."""
    if compressor == "zlib":
        monkeypatch.setattr(util, "_deflate", lambda: zlib)
    else:
        pytest.importorskip("isal")
    monkeypatch.setattr(util, "DEFLATE_BLOCK", 4096)  # 8 blocks for this array
    lib, blocks = util._deflate(), []
    real = lib.compressobj
    monkeypatch.setattr(lib, "compressobj", lambda *a, **k: blocks.append(a) or real(*a, **k))
    array = np.random.default_rng(3).integers(0, 60000, (120, 100, 3), dtype=np.uint16)
    data = util.png_bytes(array)
    assert len(blocks) == 8 and data == util.png_bytes(array)
    assert np.array_equal(_opencv(data), array)
    start = data.index(b"IDAT") + 4
    idat = data[start:start + int.from_bytes(data[start - 8:start - 4], "big")]
    assert len(zlib.decompress(idat)) == 120 * (100 * 6 + 1)  # zlib checks the Adler-32 of the whole stream


def test_png_bytes_of_a_smooth_map_is_compressed():
    ramp = np.tile(np.arange(0, 65535, 64, dtype=np.uint16)[None, :, None], (200, 1, 3))
    assert len(util.png_bytes(ramp)) < ramp.nbytes / 20


@pytest.mark.parametrize("bad", [np.zeros((4, 4), np.float32), np.zeros((4, 4, 2), np.uint8), np.zeros(4, np.uint8),
                                 np.zeros((0, 4), np.uint8)])
def test_png_bytes_refuses_what_a_png_cannot_hold(bad):
    with pytest.raises(ValueError, match="PNG"):
        util.png_bytes(bad)

"""load_image: every input is generated here with PIL/numpy (no binary fixtures)."""

import io
import os
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageFile

from sapiens2_demo.media import image as imageio
from sapiens2_demo.media.image import ImageError, LoadedImage, load_image


def _encode(im: Image.Image, fmt: str, **kw) -> bytes:
    buf = io.BytesIO()
    im.save(buf, fmt, **kw)
    return buf.getvalue()


def _noise(h=64, w=48, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def _check_contract(out: LoadedImage) -> None:
    assert out.rgb.dtype == np.uint8 and out.rgb.ndim == 3 and out.rgb.shape[2] == 3
    assert out.rgb.flags.c_contiguous and out.rgb.flags.writeable


def _refused(source, match, **kw) -> str:
    with pytest.raises(ImageError, match=match) as info:
        load_image(source, **kw)
    msg = str(info.value)
    assert "Traceback" not in msg and "Error" not in msg  # a sentence, not an exception dump
    return msg


# --- the happy path and every source type -------------------------------------------------

@pytest.mark.parametrize("kind", ["path", "str", "bytes", "pil", "array"])
def test_sources_roundtrip_exactly(tmp_path, kind):
    arr = _noise()
    png = _encode(Image.fromarray(arr), "PNG")
    (tmp_path / "a.png").write_bytes(png)
    source = {"path": tmp_path / "a.png", "str": str(tmp_path / "a.png"), "bytes": png,
              "pil": Image.fromarray(arr), "array": arr}[kind]
    out = load_image(source)
    _check_contract(out)
    np.testing.assert_array_equal(out.rgb, arr)
    assert out.original_size == (64, 48) and out.notes == []


def test_output_does_not_alias_caller_array():
    arr = _noise()
    out = load_image(arr)
    out.rgb[:] = 0
    assert arr.any()


# --- unusable bytes / files ---------------------------------------------------------------

def test_random_bytes_refused():
    _refused(os.urandom(4096), "not a supported image")


def test_corrupt_png_data_refused():
    # Valid header, scrambled compressed pixel data. Regression: PNG getexif() loads lazily and
    # swallowed this error, which returned a half-decoded image.
    data = bytearray(_encode(Image.fromarray(_noise()), "PNG"))
    i = data.find(b"IDAT")
    for k in range(i + 6, i + 200, 7):
        data[k] ^= 0xFF
    _refused(bytes(data), "corrupt")


def test_truncated_jpeg_refused_not_grey(tmp_path):
    data = _encode(Image.fromarray(_noise(256, 256)), "JPEG", quality=90)
    (tmp_path / "cut.jpg").write_bytes(data[: len(data) // 2])
    _refused(tmp_path / "cut.jpg", "truncated")
    assert ImageFile.LOAD_TRUNCATED_IMAGES is False  # nobody flipped the process-wide switch


def test_truncated_png_refused():
    data = _encode(Image.fromarray(_noise(256, 256)), "PNG")
    _refused(data[: len(data) // 2], "truncated")


def test_empty_file_refused(tmp_path):
    (tmp_path / "empty.jpg").write_bytes(b"")
    _refused(tmp_path / "empty.jpg", "empty")
    _refused(b"", "empty")


def test_text_file_named_jpg_refused(tmp_path):
    (tmp_path / "notes.jpg").write_text("hello, this is not a picture\n" * 20)
    msg = _refused(tmp_path / "notes.jpg", "not a supported image")
    assert str(tmp_path) not in msg  # no server-side directories in user messages


def test_missing_file_refused(tmp_path):
    msg = _refused(tmp_path / "gone.png", "File not found: gone.png")
    assert str(tmp_path) not in msg
    _refused(tmp_path, "Not a file")


def test_file_over_byte_limit_refused(tmp_path):
    data = _encode(Image.fromarray(_noise()), "PNG")
    (tmp_path / "a.png").write_bytes(data)
    _refused(tmp_path / "a.png", "limit is", max_bytes=len(data) - 1)
    _refused(data, "limit is", max_bytes=len(data) - 1)
    assert load_image(data, max_bytes=len(data)).rgb.shape == (64, 48, 3)


def test_unsupported_format_refused():
    # ICO is a PIL format, but not one an upload box needs (see ALLOWED_FORMATS).
    ico = _encode(Image.new("RGB", (32, 32), "red"), "ICO")
    assert Image.open(io.BytesIO(ico)).format == "ICO"
    _refused(ico, "not a supported image")


def test_none_and_other_types_refused():
    _refused(None, "No image")
    _refused(12345, "Unsupported input type int")


# --- sizes --------------------------------------------------------------------------------

@pytest.mark.parametrize("size", [(1, 1), (3, 2), (7, 100)])
def test_tiny_images_refused(size):
    png = _encode(Image.new("RGB", size, "red"), "PNG")
    _refused(png, f"only {size[0]}x{size[1]} pixels.*at least 8")


def test_min_side_accepted():
    assert load_image(_encode(Image.new("RGB", (8, 8), "red"), "PNG")).rgb.shape == (8, 8, 3)


def test_too_thin_after_downscale_refused():
    png = _encode(Image.new("RGB", (4096, 12), "red"), "PNG")  # -> 2048x6
    _refused(png, "too thin", max_side=2048)


def _patch_png_size(png: bytes, w: int, h: int) -> bytes:
    # IHDR is the first chunk: 8-byte signature, length, b"IHDR", width, height, ..., CRC.
    assert png[12:16] == b"IHDR"
    ihdr = png[16:16 + 13]
    ihdr = struct.pack(">II", w, h) + ihdr[8:]
    crc = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr) & 0xFFFFFFFF)
    return png[:16] + ihdr + crc + png[16 + 13 + 4:]


@pytest.mark.parametrize("side", [30000, 8000])  # 900 MP (PIL refuses too) and 64 MP (only we do)
def test_decompression_bomb_header_refused_fast(side):
    bomb = _patch_png_size(_encode(Image.new("RGB", (16, 16), "red"), "PNG"), side, side)
    if side < 9000:  # below PIL's own 2 * MAX_IMAGE_PIXELS guard: PIL would open this happily
        assert Image.open(io.BytesIO(bomb)).size == (side, side)
    t0 = time.perf_counter()
    msg = _refused(bomb, r"megapixels\)?; the limit is 50 megapixels", max_pixels=50_000_000)
    assert f"{side}x{side}" in msg or "over 179 megapixels" in msg
    assert time.perf_counter() - t0 < 0.5


def test_max_pixels_is_a_parameter():
    png = _encode(Image.fromarray(_noise(100, 100)), "PNG")
    _refused(png, r"100x100 pixels.*limit is 0\.005 megapixels", max_pixels=5000)
    _refused(_noise(100, 100), "megapixels", max_pixels=5000)
    assert load_image(png, max_pixels=10_000).rgb.shape == (100, 100, 3)


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_large_photo_downscaled_with_note(fmt):
    big = _encode(Image.new("RGB", (5000, 4000), (200, 30, 60)), fmt)
    out = load_image(big)
    _check_contract(out)
    assert out.rgb.shape == (1638, 2048, 3)
    assert out.original_size == (4000, 5000)
    assert out.notes == ["Downscaled from 5000x4000 to 2048x1638 for processing"]
    assert np.abs(out.rgb[800, 1000].astype(int) - (200, 30, 60)).max() <= 3


# --- colour modes -------------------------------------------------------------------------

def test_16bit_png_scaled_not_clipped():
    ramp = np.array([[0, 257, 32896, 65535]], dtype=np.uint16).repeat(8, 0).repeat(4, 1)
    im = Image.fromarray(ramp)
    assert im.mode == "I;16"
    png = _encode(im, "PNG")
    assert Image.open(io.BytesIO(png)).mode.startswith("I")
    out = load_image(png)
    assert out.rgb[0, ::4, 0].tolist() == [0, 1, 128, 255]
    assert (out.rgb[..., 0] == out.rgb[..., 2]).all()


def test_16bit_arrays_either_byte_order_scaled():
    ramp = np.array([[0, 255, 32896, 65535]], dtype=np.uint16).repeat(8, 0).repeat(4, 1)
    for arr in (ramp, ramp.astype(">u2")):
        assert load_image(arr).rgb[0, ::4, 0].tolist() == [0, 1, 128, 255]
    # A dark 16-bit image stays dark: its dtype, not its value range, says it is 16-bit.
    dark = np.array([[0, 128, 255, 255]], dtype=">u2").repeat(8, 0).repeat(4, 1)
    assert load_image(dark).rgb[0, ::4, 0].tolist() == [0, 0, 1, 1]


def test_grayscale_l_and_la():
    gray = np.full((16, 16), 90, np.uint8)
    out = load_image(_encode(Image.fromarray(gray, "L"), "PNG"))
    assert (out.rgb == 90).all() and out.notes == []
    la = Image.merge("LA", [Image.fromarray(gray), Image.new("L", (16, 16), 0)])
    la.putpixel((0, 0), (90, 255))
    out = load_image(_encode(la, "PNG"))
    assert out.rgb[0, 0].tolist() == [90, 90, 90]
    assert out.rgb[5, 5].tolist() == [255, 255, 255]
    assert out.notes == ["Flattened transparency onto white"]


def test_palette_png_with_transparency():
    im = Image.new("P", (16, 16), 0)
    im.putpalette([0, 0, 255, 255, 0, 0] + [0] * 762)
    im.paste(1, (0, 0, 8, 16))  # left half red (index 1), right half index 0 = transparent
    png = _encode(im, "PNG", transparency=0)
    assert Image.open(io.BytesIO(png)).mode == "P"
    out = load_image(png)
    assert out.rgb[4, 2].tolist() == [255, 0, 0]
    assert out.rgb[4, 12].tolist() == [255, 255, 255]
    assert "Flattened transparency onto white" in out.notes


def test_rgba_flattened_onto_white():
    rgba = np.zeros((16, 16, 4), np.uint8)
    rgba[..., 0] = 200
    rgba[:, :8, 3] = 255  # left opaque, right transparent
    rgba[:, 8:12, 3] = 128  # half transparent strip
    out = load_image(_encode(Image.fromarray(rgba), "PNG"))
    assert out.rgb[0, 0].tolist() == [200, 0, 0]
    assert out.rgb[0, 15].tolist() == [255, 255, 255]
    assert np.abs(out.rgb[0, 9].astype(int) - (228, 127, 127)).max() <= 2
    assert out.notes == ["Flattened transparency onto white"]
    assert load_image(rgba).rgb[0, 15].tolist() == [255, 255, 255]  # HxWx4 arrays too


def test_opaque_rgba_has_no_note():
    rgba = np.full((16, 16, 4), 255, np.uint8)
    assert load_image(_encode(Image.fromarray(rgba), "PNG")).notes == []


def test_cmyk_jpeg_converted():
    cmyk = Image.new("CMYK", (32, 32), (0, 255, 255, 0))  # red
    cmyk.paste((255, 0, 0, 0), (16, 0, 32, 32))  # cyan
    jpg = _encode(cmyk, "JPEG", quality=95)
    assert Image.open(io.BytesIO(jpg)).mode == "CMYK"
    out = load_image(jpg)
    assert np.abs(out.rgb[16, 4].astype(int) - (255, 0, 0)).max() <= 8
    assert np.abs(out.rgb[16, 28].astype(int) - (0, 255, 255)).max() <= 8


def _exif_jpeg(w, h, orientation, marker=True) -> bytes:
    im = Image.new("RGB", (w, h), (255, 255, 255))
    if marker:
        im.paste((255, 0, 0), (0, 0, 8, 8))  # red block at the stored top-left
    exif = Image.Exif()
    exif[0x0112] = orientation
    return _encode(im, "JPEG", quality=95, exif=exif)


def test_exif_orientation_6_rotated_like_a_viewer():
    out = load_image(_exif_jpeg(40, 20, 6))
    # Orientation 6: the viewer turns the stored image 90 degrees clockwise, so a 40x20 (WxH)
    # photo shows as 20 wide, 40 tall and its top-left corner ends up at the top-right.
    assert out.rgb.shape == (40, 20, 3)
    assert out.original_size == (40, 20)
    assert out.rgb[3, 16].tolist() == pytest.approx([255, 0, 0], abs=12)
    assert out.rgb[3, 3].min() > 240


def test_exif_rotated_large_photo_downscaled_consistently():
    out = load_image(_exif_jpeg(5000, 4000, 6, marker=False))
    assert out.rgb.shape == (2048, 1638, 3)
    assert out.original_size == (5000, 4000)
    assert out.notes == ["Downscaled from 4000x5000 to 1638x2048 for processing"]


def test_animated_gif_first_frame():
    frames = [Image.new("RGB", (16, 16), c) for c in ((255, 0, 0), (0, 255, 0), (0, 0, 255))]
    gif = _encode(frames[0], "GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    assert Image.open(io.BytesIO(gif)).n_frames == 3
    out = load_image(gif)
    assert out.rgb[8, 8].tolist() == [255, 0, 0]
    assert out.notes == ["Used the first frame of an animated image (3 frames)"]


# --- numpy arrays -------------------------------------------------------------------------

def test_float_and_bool_arrays():
    f = np.zeros((16, 16, 3), np.float32)
    f[..., 0], f[..., 1] = 1.0, 0.5
    assert load_image(f).rgb[0, 0].tolist() == [255, 128, 0]
    assert load_image(f.astype(np.float64) * 255).rgb[0, 0].tolist() == [255, 128, 0]  # 0..255 floats
    b = np.zeros((16, 16), bool)
    b[:, :8] = True
    out = load_image(b)
    assert out.rgb[0, 0].tolist() == [255, 255, 255] and out.rgb[0, 15].tolist() == [0, 0, 0]
    assert load_image(np.full((16, 16, 1), 7, np.int64)).rgb[0, 0].tolist() == [7, 7, 7]


@pytest.mark.parametrize("arr, match", [
    (np.zeros((3, 64, 64), np.uint8), r"shape \(3, 64, 64\)"),   # channels-first
    (np.zeros((16, 16, 2), np.uint8), "HxW, HxWx3 or HxWx4"),
    (np.zeros((16,), np.uint8), "HxW, HxWx3 or HxWx4"),
    (np.zeros((2, 16, 16, 3), np.uint8), "HxW, HxWx3 or HxWx4"),
    (np.zeros((0, 0, 3), np.uint8), "empty"),
    (np.full((16, 16), np.nan, np.float32), "NaN"),
    (np.full((16, 16), 300.0), r"0\.\.1"),
    (np.full((16, 16), -1, np.int32), r"0\.\.255"),
    (np.zeros((16, 16), np.complex64), "Unsupported image array type"),
])
def test_bad_arrays_refused(arr, match):
    _refused(arr, match)


# --- configuration ------------------------------------------------------------------------

def test_env_overrides_limits():
    code = "from sapiens2_demo.media import image as m; print(m.DEFAULT_MAX_BYTES, m.DEFAULT_MAX_PIXELS, m.DEFAULT_MAX_SIDE)"
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "SAPIENS2_MAX_UPLOAD_MB": "2", "SAPIENS2_MAX_PIXELS": "1e6", "SAPIENS2_MAX_SIDE": "512"}
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True)
    assert res.stdout.split() == [str(2 * 1024 * 1024), "1000000", "512"], res.stderr
    env["SAPIENS2_MAX_SIDE"] = "big"
    res = subprocess.run([sys.executable, "-c", code], env=env, cwd=root, capture_output=True, text=True)
    assert res.returncode != 0 and "SAPIENS2_MAX_SIDE must be a positive number" in res.stderr


def test_defaults():
    if not any(k in os.environ for k in ("SAPIENS2_MAX_UPLOAD_MB", "SAPIENS2_MAX_PIXELS", "SAPIENS2_MAX_SIDE")):
        assert imageio.DEFAULT_MAX_BYTES == 25 * 1024 * 1024
        assert imageio.DEFAULT_MAX_PIXELS == 50_000_000
        assert imageio.DEFAULT_MAX_SIDE == 2048
    assert imageio.MIN_SIDE == 8 and imageio.BACKGROUND == (255, 255, 255)

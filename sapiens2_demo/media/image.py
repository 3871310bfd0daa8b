"""Robust reading of user images for the web demo.

`load_image` accepts what Gradio hands us (a file path or a numpy array) plus bytes and PIL
images, and returns an oriented, 8-bit RGB array within size limits, or raises `ImageError`
with a message fit to show the user. Decisions:

* Limits (env-overridable, read at import): SAPIENS2_MAX_UPLOAD_MB (file size, default 25 MiB),
  SAPIENS2_MAX_PIXELS (pixel count, default 50e6: refused from the header, before decoding),
  SAPIENS2_MAX_SIDE (default 2048: longer side is downscaled to it, aspect kept, with a note).
* Images with a side under MIN_SIDE (8 px), before or after downscaling, are refused: a pose or
  segmentation model has nothing to see there and resizing them up only invents pixels.
* Transparency is flattened onto white (BACKGROUND), like a light page shows it.
* Only common web formats are decoded (ALLOWED_FORMATS): PIL has many rarely used decoders
  (some shell out, e.g. EPS to Ghostscript) that an upload box does not need to expose.
* PIL's process-wide knobs are left alone (ImageFile.LOAD_TRUNCATED_IMAGES stays False so a
  truncated file fails to decode instead of coming back half grey; Image.MAX_IMAGE_PIXELS and
  warnings filters are global and Gradio serves requests from threads). Our header check is
  stricter than PIL's default; PIL's own DecompressionBombError is translated to the same message.
"""

from __future__ import annotations

import io
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

__all__ = ["ImageError", "LoadedImage", "load_image", "DEFAULT_MAX_BYTES", "DEFAULT_MAX_PIXELS",
           "DEFAULT_MAX_SIDE", "MIN_SIDE", "BACKGROUND"]


def _env_number(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (value > 0 and math.isfinite(value)):  # fail at start-up, not on the first upload
        raise ValueError(f"{name} must be a positive number, got {raw!r}")
    return value


MB = 1024 * 1024
DEFAULT_MAX_BYTES = int(_env_number("SAPIENS2_MAX_UPLOAD_MB", 25) * MB)
DEFAULT_MAX_PIXELS = int(_env_number("SAPIENS2_MAX_PIXELS", 50_000_000))
DEFAULT_MAX_SIDE = int(_env_number("SAPIENS2_MAX_SIDE", 2048))
MIN_SIDE = 8
BACKGROUND = (255, 255, 255)
ALLOWED_FORMATS = ("JPEG", "MPO", "PNG", "GIF", "WEBP", "BMP", "TIFF", "AVIF")
_FORMAT_NAMES = "JPEG, PNG, WebP, GIF, BMP or TIFF"


class ImageError(ValueError):
    """The input cannot be used as an image; str(error) is a message for the user."""


@dataclass
class LoadedImage:
    rgb: np.ndarray                 # (H, W, 3) uint8, C-contiguous, writable
    original_size: tuple[int, int]  # (H, W) as a viewer shows it, before any downscale
    notes: list[str] = field(default_factory=list)


def load_image(source, *, max_pixels: int = DEFAULT_MAX_PIXELS, max_side: int = DEFAULT_MAX_SIDE,
               max_bytes: int = DEFAULT_MAX_BYTES) -> LoadedImage:
    notes: list[str] = []
    if source is None:
        raise ImageError("No image was provided.")
    if isinstance(source, np.ndarray):
        im = Image.fromarray(_array_to_uint8(source))  # HxW -> L, HxWx3 -> RGB, HxWx4 -> RGBA
    elif isinstance(source, Image.Image):
        im = source
    elif isinstance(source, (str, os.PathLike)):
        im = _open(_read_file(Path(source), max_bytes), max_pixels)
    elif isinstance(source, (bytes, bytearray, memoryview)):
        im = _open(_check_bytes(bytes(source), max_bytes), max_pixels)
    else:
        raise ImageError(f"Unsupported input type {type(source).__name__}; expected an image file or array.")

    # Header-only checks: Image.open is lazy, so nothing big has been allocated yet.
    w, h = im.size
    _check_size(w, h, max_pixels)
    scale = min(1.0, max_side / max(w, h))
    target = (max(1, round(w * scale)), max(1, round(h * scale)))
    if min(target) < MIN_SIDE:
        raise ImageError(f"The image is {w}x{h} pixels, too thin to use: downscaled to fit {max_side} "
                         f"pixels it would be {target[0]}x{target[1]} (each side needs {MIN_SIDE}+).")
    try:
        if getattr(im, "n_frames", 1) > 1:
            im.seek(0)
            notes.append(f"Used the first frame of an animated image ({im.n_frames} frames)")
        if scale < 1:
            # JPEG can decode at 1/2, 1/4, 1/8 scale directly: much faster and lighter for big photos.
            im.draft(im.mode, (math.ceil(w * scale), math.ceil(h * scale)))
        # Decode now, inside this try: later calls (getexif on PNG, seek on GIF) would load lazily
        # and some swallow decode errors, leaving a half-decoded image.
        im.load()
    except Image.DecompressionBombError:
        raise ImageError(_too_many_pixels(w, h, max_pixels)) from None
    except Exception as e:  # PIL decoders raise many types (OSError, SyntaxError, struct.error...)
        if "truncated" in str(e):
            raise ImageError("The image file is truncated (incomplete upload or download?).") from None
        raise ImageError("The image data is corrupt and could not be decoded.") from None

    orientation = _orientation(im)
    swap = orientation in (5, 6, 7, 8)  # these EXIF orientations rotate by 90 degrees
    if orientation not in (None, 1):
        try:
            im = ImageOps.exif_transpose(im)  # show it as a photo viewer would
        except Exception:  # broken EXIF should not cost the user an otherwise good photo
            swap = False
            notes.append("Ignored unreadable orientation metadata")
    original_size = (w, h) if swap else (h, w)
    im = _to_rgb(im, notes)

    if scale < 1:
        size = target if not swap else target[::-1]
        if im.size != size:
            im = im.resize(size, Image.Resampling.LANCZOS, reducing_gap=3.0)
        notes.append(f"Downscaled from {original_size[1]}x{original_size[0]} to "
                     f"{size[0]}x{size[1]} for processing")
    rgb = np.array(im, dtype=np.uint8, copy=True, order="C")  # own, writable copy
    return LoadedImage(rgb=rgb, original_size=original_size, notes=notes)


def _check_bytes(data: bytes, max_bytes: int) -> bytes:
    if not data:
        raise ImageError("The file is empty (0 bytes).")
    if len(data) > max_bytes:
        raise ImageError(f"The file is {_size(len(data))}; the limit is {_size(max_bytes)}.")
    return data


def _size(n: int) -> str:
    return f"{n / MB:.3g} MB" if n >= MB // 10 else f"{n:,} bytes"


def _read_file(path: Path, max_bytes: int) -> bytes:
    # Messages name only the file, not server-side (temporary) directories.
    try:
        if not path.is_file():
            raise ImageError(f"File not found: {path.name}" if not path.exists() else f"Not a file: {path.name}")
        if path.stat().st_size > max_bytes:
            raise ImageError(f"The file is {_size(path.stat().st_size)}; the limit is {_size(max_bytes)}.")
        with open(path, "rb") as f:
            data = f.read(max_bytes + 1)  # bounded even if the file grows after stat()
    except OSError:
        raise ImageError(f"Could not read the file {path.name}.") from None
    return _check_bytes(data, max_bytes)


def _open(data: bytes, max_pixels: int) -> Image.Image:
    Image.init()
    formats = [f for f in ALLOWED_FORMATS if f in Image.OPEN]  # AVIF only where PIL has it
    try:
        return Image.open(io.BytesIO(data), formats=formats)
    except Image.DecompressionBombError:
        # PIL's own guard fires inside open() above 2 * MAX_IMAGE_PIXELS, before we see the size.
        raise ImageError(f"The image is over {2 * (Image.MAX_IMAGE_PIXELS or 0) / 1e6:.0f} megapixels; "
                         f"the limit is {max_pixels / 1e6:g} megapixels.") from None
    except Exception:  # UnidentifiedImageError, or a header that breaks a plugin
        raise ImageError(f"This file is not a supported image ({_FORMAT_NAMES}).") from None


def _too_many_pixels(w: int, h: int, max_pixels: int) -> str:
    return (f"The image is {w}x{h} pixels ({w * h / 1e6:.0f} megapixels); "
            f"the limit is {max_pixels / 1e6:g} megapixels.")


def _check_size(w: int, h: int, max_pixels: int) -> None:
    if w * h > max_pixels:
        raise ImageError(_too_many_pixels(w, h, max_pixels))
    if min(w, h) < MIN_SIDE:
        raise ImageError(f"The image is only {w}x{h} pixels; each side must be at least {MIN_SIDE} pixels.")


def _orientation(im: Image.Image) -> int | None:
    try:
        return im.getexif().get(0x0112)
    except Exception:
        return None


def _to_rgb(im: Image.Image, notes: list[str]) -> Image.Image:
    if im.mode in ("I;16", "I;16L", "I;16B", "I;16N", "I", "F"):
        # High-bit-depth grayscale: rescale to 8 bits (convert("L") would clip at 255).
        im = Image.fromarray(_array_to_uint8(np.asarray(im)))
    has_alpha = im.mode in ("RGBA", "LA", "PA", "RGBa", "La") or "transparency" in im.info
    try:  # an RGB photo stays as it is (convert would copy it: ~5 ms at 1080p)
        target = "RGBA" if has_alpha else "RGB"
        im = im if im.mode == target else im.convert(target)  # CMYK, YCbCr, P, L, 1 ... -> RGB
    except (ValueError, OSError):
        raise ImageError(f"Unsupported image colour mode {im.mode}.") from None
    if has_alpha:
        alpha = im.getchannel("A")
        if alpha.getextrema()[0] < 255:
            notes.append("Flattened transparency onto white")
        flat = Image.new("RGB", im.size, BACKGROUND)
        flat.paste(im, mask=alpha)
        im = flat
    return im


def _array_to_uint8(a: np.ndarray) -> np.ndarray:
    if a.ndim == 3 and a.shape[2] == 1:
        a = a[:, :, 0]
    if not (a.ndim == 2 or (a.ndim == 3 and a.shape[2] in (3, 4))):
        raise ImageError(f"Expected an image array of shape HxW, HxWx3 or HxWx4; got shape {a.shape}.")
    if a.size == 0:
        raise ImageError(f"The image array is empty (shape {a.shape}).")
    if a.dtype == np.bool_:
        return a.astype(np.uint8) * 255
    if a.dtype == np.uint8:
        return np.ascontiguousarray(a)
    if a.dtype.kind == "u" and a.dtype.itemsize == 2:  # 16-bit of either byte order (I;16B)
        return ((a.astype(np.uint32) * 255 + 32767) // 65535).astype(np.uint8)  # rounded 65535 -> 255
    if a.dtype.kind in "iu":
        lo, hi = int(a.min()), int(a.max())
        if lo >= 0 and hi <= 255:
            return a.astype(np.uint8)
        if lo >= 0 and hi <= 65535:  # e.g. PIL mode "I" from a 16-bit file
            return _array_to_uint8(a.astype(np.uint16))
        raise ImageError(f"Integer image values must be in 0..255 (or 0..65535); got {lo}..{hi}.")
    if a.dtype.kind == "f":
        if not np.isfinite(a).all():
            raise ImageError("The image array contains NaN or infinite values.")
        lo, hi = float(a.min()), float(a.max())
        if lo >= 0 and hi <= 1:
            a = a * 255.0
        elif not (lo >= 0 and hi <= 255):
            raise ImageError(f"Float image values must be in 0..1 (or 0..255); got {lo:g}..{hi:g}.")
        return np.rint(a).astype(np.uint8)
    raise ImageError(f"Unsupported image array type {a.dtype}.")

"""Every bad input through the API of the running app: a correct output or a clear error, never a
traceback, and the app keeps answering. (tests/test_imageio.py covers the same inputs at the loader.)"""

import io
import struct
import zlib

import numpy as np
import pytest
from PIL import Image

from tests.conftest import ASSETS, launch_app


def _png_bytes(image: Image.Image) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return buffer.getvalue()


def _bomb_png() -> bytes:
    """A valid 16x16 PNG whose header claims 30000x30000 pixels."""
    data = bytearray(_png_bytes(Image.new("RGB", (16, 16))))
    ihdr = data[12:29]  # chunk type + 13 bytes of IHDR data
    ihdr[4:12] = struct.pack(">II", 30000, 30000)
    data[12:29] = ihdr
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(ihdr)) & 0xFFFFFFFF)
    return bytes(data)


def _write(tmp_path, name, payload) -> str:
    path = tmp_path / name
    if isinstance(payload, Image.Image):
        payload.save(path)
    else:
        path.write_bytes(payload)
    return str(path)


def _jpeg(size=(64, 48), mode="RGB", **save) -> bytes:
    buffer = io.BytesIO()
    Image.new(mode, size, 128 if mode != "RGB" else (200, 120, 40)).save(buffer, format="JPEG", **save)
    return buffer.getvalue()


# name, file, expected: a substring of the error message, or None for "works"
BAD_FILES = [
    ("corrupt bytes", "corrupt.jpg", bytes(range(256)) * 4, "not a supported image"),
    ("truncated JPEG", "truncated.jpg", _jpeg((256, 256))[:-400], "truncated"),
    ("0-byte file", "empty.jpg", b"", "empty"),
    ("text named .jpg", "text.jpg", b"hello, I am not a picture\n" * 10, "not a supported image"),
    ("1x1 image", "one.png", Image.new("RGB", (1, 1)), "at least 8 pixels"),
    ("3x2 image", "three.png", Image.new("RGB", (3, 2)), "at least 8 pixels"),
    ("decompression bomb", "bomb.png", _bomb_png(), "megapixels"),
    ("16-bit PNG", "deep.png", Image.fromarray(np.full((48, 64), 40000, np.uint16)), None),
    ("grayscale", "gray.png", Image.new("L", (64, 48), 90), None),
    ("palette PNG", "palette.png", Image.new("RGB", (64, 48), (10, 200, 30)).convert("P"), None),
    ("RGBA PNG", "rgba.png", Image.new("RGBA", (64, 48), (255, 0, 0, 128)), None),
    ("CMYK JPEG", "cmyk.jpg", _jpeg(mode="CMYK"), None),
    ("animated GIF", "anim.gif", None, None),  # built in the test (needs append_images)
    ("EXIF-rotated photo", "rotated.jpg", None, None),
    ("very large photo", "large.jpg", None, None),
]


def build_payload(name: str, payload) -> bytes:
    """The file's bytes: as listed, an image saved under its suffix, or one of the built cases."""
    buffer = io.BytesIO()
    if name == "anim.gif":
        frames = [Image.new("RGB", (64, 48), c) for c in ((255, 0, 0), (0, 255, 0))]
        frames[0].save(buffer, format="GIF", save_all=True, append_images=frames[1:], duration=100, loop=0)
    elif name == "rotated.jpg":
        exif = Image.Exif()
        exif[0x0112] = 6  # rotate 90° clockwise when shown
        Image.new("RGB", (80, 40), (0, 0, 255)).save(buffer, format="JPEG", exif=exif)
    elif name == "large.jpg":
        Image.new("RGB", (5000, 4000), (90, 90, 90)).save(buffer, format="JPEG", quality=60)
    elif isinstance(payload, Image.Image):
        payload.save(buffer, format=Image.registered_extensions()["." + name.rsplit(".", 1)[1]])
    else:
        return payload
    return buffer.getvalue()


@pytest.mark.parametrize("label,name,payload,expected", BAD_FILES, ids=[b[0] for b in BAD_FILES])
def test_bad_upload(client, tmp_path, label, name, payload, expected):
    from gradio_client import handle_file

    path = tmp_path / name
    path.write_bytes(build_payload(name, payload))
    path = str(path)
    if expected is None:
        slider, legend, files, notes = client.predict(handle_file(path), api_name="/segment")
        labels = np.asarray(Image.open(next(f for f in files if "labels" in f)))
        if name == "rotated.jpg":
            assert labels.shape == (80, 40)  # as a viewer shows it
        elif name == "large.jpg":
            assert labels.shape == (1638, 2048) and "Downscaled" in notes
        else:
            assert labels.shape == (48, 64)
        if name == "anim.gif":
            assert "first frame" in notes
    else:
        with pytest.raises(Exception) as info:
            client.predict(handle_file(path), api_name="/segment")
        message = str(info.value)
        assert expected in message, message
        assert "Traceback" not in message and "File \"" not in message
    # the app still answers
    assert client.predict(handle_file(str(ASSETS / "camera.jpg")), api_name="/segment")[2]


BAD_BOXES = [
    ("empty list uses the detector", "[]", None),
    ("inverted", "[[300, 300, 100, 100]]", "x2"),
    ("outside the image", "[[900, 900, 1000, 1000]]", "outside"),
    ("malformed JSON", "[[1, 2, 3", "JSON"),
    ("wrong shape", "[[1, 2, 3]]", "four numbers"),
    ("not numbers", '[["a", 2, 3, 4]]', "number"),
]


@pytest.mark.parametrize("label,boxes,expected", BAD_BOXES, ids=[b[0] for b in BAD_BOXES])
def test_bad_pose_boxes(client, label, boxes, expected):
    from gradio_client import handle_file

    image = handle_file(str(ASSETS / "astronaut.jpg"))
    if expected is None:
        _, files, notes = client.predict(image, boxes=boxes, flip_test=False, api_name="/pose")
        assert " posed." in notes
    else:
        with pytest.raises(Exception) as info:
            client.predict(image, boxes=boxes, flip_test=False, api_name="/pose")
        assert expected.lower() in str(info.value).lower(), str(info.value)
        assert "Traceback" not in str(info.value)


def test_image_without_a_person_is_posed_on_the_whole_image(client, tmp_path):
    from gradio_client import handle_file

    path = _write(tmp_path, "wall.png", Image.new("RGB", (200, 150), (180, 180, 170)))
    _, files, notes = client.predict(handle_file(path), api_name="/pose")
    assert "whole image" in notes and "1 person posed" in notes


def test_missing_image_is_a_clear_error(client):
    with pytest.raises(Exception) as info:
        client.predict(None, api_name="/normals")
    assert "upload an image" in str(info.value).lower()


def test_upload_size_limit(tiny_dir, tmp_path):
    from gradio_client import Client, handle_file

    demo, url = launch_app(tiny_dir, tiny_dir / "yolov8n-random.pt", "--max-file-size", "200kb")
    try:
        rng = np.random.default_rng(0)
        big = _write(tmp_path, "noise.png", Image.fromarray(rng.integers(0, 255, (400, 400, 3), dtype=np.uint8)))
        client = Client(url, verbose=False)
        with pytest.raises(Exception) as info:
            client.predict(handle_file(big), api_name="/segment")
        assert "size" in str(info.value).lower() or "large" in str(info.value).lower(), str(info.value)
        assert client.predict(handle_file(str(ASSETS / "camera.jpg")), api_name="/segment")[2]
    finally:
        demo.close()

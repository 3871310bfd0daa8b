"""Matting composite: fg (premultiplied) + (1 - alpha) * bg over a colour, an image, or transparent."""

import numpy as np
import pytest

from sapiens2_demo.render.matting import (
    CHROMA_GREEN,
    MattingAnnotator,
    alpha_image,
    cover_resize,
    parse_colour,
    rgba_cutout,
    unpremultiply,
)
from sapiens2_demo.results import MattingResult


@pytest.fixture()
def matte():
    alpha = np.array([[0.0, 0.25], [1.0, 0.5]], np.float32)
    colour = np.array([[[0.9, 0.9, 0.9], [0.8, 0.4, 0.0]], [[0.2, 0.6, 1.0], [1.0, 1.0, 1.0]]], np.float32)
    return MattingResult(alpha=alpha, foreground=colour * alpha[..., None])


def test_composite_is_fg_plus_one_minus_alpha_bg(matte):
    out = MattingAnnotator().annotate(None, matte)
    bg = np.array(CHROMA_GREEN, np.float32) / 255
    expected = (matte.foreground + (1 - matte.alpha[..., None]) * bg) * 255
    assert out.dtype == np.uint8 and out.shape == (2, 2, 3)
    assert np.abs(out - expected).max() <= 0.5 + 1e-4
    assert tuple(out[0, 0]) == CHROMA_GREEN  # alpha 0: pure background
    assert tuple(out[1, 0]) == (51, 153, 255)  # alpha 1: pure foreground
    assert tuple(out[0, 1]) == (51, 158, 48)  # 0.25*(0.8,0.4,0) + 0.75*(0,177,64)/255


def test_composite_over_an_image_background(matte):
    background = np.zeros((2, 2, 3), np.uint8)
    background[..., 0] = 200
    out = MattingAnnotator(background).annotate(None, matte)
    assert tuple(out[0, 0]) == (200, 0, 0)
    assert tuple(out[0, 1]) == (round(0.2 * 255 + 0.75 * 200), round(0.1 * 255), 0)


def test_transparent_gives_rgba_with_alpha(matte):
    out = MattingAnnotator("transparent").annotate(None, matte)
    assert out.shape == (2, 2, 4)
    np.testing.assert_array_equal(out[..., 3], [[0, 64], [255, 128]])
    assert tuple(out[0, 1, :3]) == (204, 102, 0)  # un-premultiplied colour
    assert tuple(out[0, 0, :3]) == (0, 0, 0)  # alpha 0: no colour


def test_rgba_with_image_colours(matte):
    image = np.full((2, 2, 3), 9, np.uint8)
    out = rgba_cutout(image, matte, rgb="image")
    assert (out[..., :3] == 9).all() and out[1, 0, 3] == 255


def test_unpremultiply_and_alpha_image(matte):
    np.testing.assert_allclose(unpremultiply(matte)[0, 1], [0.8, 0.4, 0.0], atol=1e-6)
    np.testing.assert_array_equal(alpha_image(matte), [[0, 64], [255, 128]])


def test_cover_resize_fills_and_centre_crops():
    background = np.zeros((100, 200, 3), np.uint8)
    background[:, :100] = (255, 0, 0)  # left half red
    background[:, 100:] = (0, 0, 255)  # right half blue
    out = cover_resize(background, (300, 300))  # scale 3 -> 300 x 600, keep columns 150-449
    assert out.shape == (300, 300, 3)
    assert (out[:, :145] == (255, 0, 0)).all() and (out[:, 155:] == (0, 0, 255)).all()
    tall = cover_resize(background, (400, 100))  # scale 4 -> 400 x 800, centre columns are the seam
    assert tall.shape == (400, 100, 3)


def test_bad_background():
    with pytest.raises(ValueError):
        MattingAnnotator("checkerboard")


def test_modes_as_the_ui_passes_them(matte):
    green = MattingAnnotator(background="colour", colour="#00b140").annotate(None, matte)
    np.testing.assert_array_equal(green, MattingAnnotator().annotate(None, matte))
    red = MattingAnnotator(background="colour", colour="rgba(255, 0, 0, 1)").annotate(None, matte)
    assert tuple(red[0, 0]) == (255, 0, 0)
    picture = np.full((10, 10, 3), 40, np.uint8)
    out = MattingAnnotator(background="image", image=picture).annotate(None, matte)
    assert tuple(out[0, 0]) == (40, 40, 40)
    assert MattingAnnotator(background="transparent", colour="#123").annotate(None, matte).shape == (2, 2, 4)
    with pytest.raises(ValueError):
        MattingAnnotator(background="image")
    with pytest.raises(ValueError):
        MattingAnnotator(colour="#zzzzzz")


def test_parse_colour():
    assert parse_colour("#00B140") == (0, 177, 64) == parse_colour((0, 177, 64))
    assert parse_colour("#fff") == (255, 255, 255)
    assert parse_colour("rgb(1, 2.4, 300)") == (1, 2, 255)
    with pytest.raises(ValueError):
        parse_colour((1, 2))


@pytest.mark.parametrize("background", ["colour", "image"])
def test_the_composite_is_numpys_clip_and_rounding_to_the_byte(background):
    """The OpenCV composite against the plain float32 formula, round(clip(fg + (1 - a) * bg, 0, 1) * 255), on maps
    that leave [0, 1] both ways (a sum over 1, a negative foreground) and land on halves."""
    rng = np.random.default_rng(5)
    alpha = rng.uniform(-0.1, 1.1, (90, 160)).astype(np.float32)
    alpha[:5] = np.float32(0.5)
    foreground = rng.uniform(-0.2, 1.2, (90, 160, 3)).astype(np.float32)
    foreground[:5] = np.float32(0.5) / 255 * np.arange(1, 4, dtype=np.float32)  # halves of a level
    picture = rng.integers(0, 256, (90, 160, 3), dtype=np.uint8)
    annotator = MattingAnnotator(picture) if background == "image" else MattingAnnotator(colour=(12, 200, 99))
    bg = annotator.background_for(alpha.shape)
    total = foreground + (np.float32(1) - alpha)[..., None] * bg
    expected = np.rint(np.clip(total, np.float32(0), np.float32(1)) * np.float32(255)).astype(np.uint8)
    out = annotator.annotate(None, MattingResult(alpha=alpha, foreground=foreground))
    assert np.array_equal(out, expected)


def test_unpremultiplied_colour_is_0_below_min_alpha_whatever_the_library_does_with_0_over_0():
    """OpenCV 4 gives 0 for 0 / 0 cast to uint8, OpenCV 5 gives 255: the cut-out's colour must not depend on it."""
    alpha = np.array([[0.0, 0.5 / 255, 1.0 / 255, 0.004, 0.5, 1.0]], np.float32)
    foreground = np.stack([alpha * 0.0, alpha * 0.5, alpha * 1.0], axis=-1)  # premultiplied (0, 0.5, 1)
    foreground[0, 1] = 0.3 / 255  # below min_alpha a foreground is noise: still no colour
    out = rgba_cutout(None, MattingResult(alpha=alpha, foreground=foreground))
    expected = np.rint(unpremultiply(MattingResult(alpha=alpha, foreground=foreground)) * 255)
    assert np.abs(out[..., :3].astype(int) - expected).max() <= 1  # float32 rounding at a half step
    np.testing.assert_array_equal(out[0, :2, :3], 0)  # alpha 0 and alpha under 1/255: colour 0
    assert tuple(out[0, 5, :3]) == (0, 128, 255)

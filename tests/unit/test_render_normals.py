"""Normals colouring: RGB = (n + 1) / 2 * 255 with R = x, G = y, B = z; background handling."""

import numpy as np
import pytest

from sapiens2_demo.render.normals import NormalsAnnotator, normals_to_rgb
from sapiens2_demo.results import NormalsResult


@pytest.mark.parametrize("normal, rgb", [
    ((0, 0, 1), (128, 128, 255)),
    ((1, 0, 0), (255, 128, 128)),
    ((0, -1, 0), (128, 0, 128)),
    ((0, 0, -1), (128, 128, 0)),
    ((0.6, 0, 0.8), (204, 128, 230)),
])
def test_unit_normals_map_to_expected_colours(normal, rgb):
    out = normals_to_rgb(np.array([[normal]], np.float32))
    assert out.dtype == np.uint8
    assert np.abs(out[0, 0].astype(int) - np.array(rgb)).max() <= 1  # within rounding of 127.5


def _result(mask=None):
    normals = np.zeros((4, 5, 3), np.float32)
    normals[..., 2] = 1.0  # all facing the camera
    return NormalsResult(normals=normals, mask=mask)


def test_background_black_by_default():
    mask = np.zeros((4, 5), bool)
    mask[1:3, 1:4] = True
    image = np.full((4, 5, 3), 77, np.uint8)
    out = NormalsAnnotator().annotate(image, _result(mask))
    assert (out[~mask] == 0).all()
    assert (out[mask] == [128, 128, 255]).all()


def test_background_can_keep_the_image_and_mask_argument_wins():
    result_mask = np.ones((4, 5), bool)
    mask = np.zeros((4, 5), bool)
    mask[0, 0] = True
    image = np.arange(60, dtype=np.uint8).reshape(4, 5, 3)
    out = NormalsAnnotator(background="image").annotate(image, _result(result_mask), mask=mask)
    np.testing.assert_array_equal(out[~mask], image[~mask])
    assert tuple(out[0, 0]) == (128, 128, 255)


def test_no_mask_colours_everything():
    out = NormalsAnnotator().annotate(np.zeros((4, 5, 3), np.uint8), _result())
    assert (out == [128, 128, 255]).all()


def test_bad_background_option():
    with pytest.raises(ValueError):
        NormalsAnnotator(background="white")

"""User boxes: parsing, validation messages, clipping; and the crop geometry against transformers'."""

import numpy as np
import pytest
import torch

from sapiens2_demo.pose.boxes import crop_params, parse_boxes, xyxy_to_xywh

SIZE = (480, 640)  # (H, W)


@pytest.mark.parametrize("given", [None, "", "   ", "[]", []])
def test_nothing_given_means_use_the_detector(given):
    assert parse_boxes(given, SIZE) is None


def test_list_json_flat_and_array_forms():
    expected = np.array([[10, 20, 110, 220], [300, 40, 400, 470]], np.float32)
    for given in (expected.tolist(), "[[10, 20, 110, 220], [300, 40, 400, 470]]", expected):
        got = parse_boxes(given, SIZE)
        assert got.dtype == np.float32 and got.shape == (2, 4)
        np.testing.assert_array_equal(got, expected)
    np.testing.assert_array_equal(parse_boxes("[1.5, 2, 30, 40.25]", SIZE), [[1.5, 2, 30, 40.25]])


def test_partly_outside_boxes_are_clipped():
    got = parse_boxes([[-50, -10, 100, 100], [600, 400, 900, 700]], SIZE)
    np.testing.assert_array_equal(got, [[0, 0, 100, 100], [600, 400, 640, 480]])


@pytest.mark.parametrize("given, message", [
    ("[[1, 2, 3", "not valid JSON"),
    ('{"x": 1}', "must be a list"),
    ("[[1, 2, 3]]", "four numbers"),
    ('[[1, 2, 3, "4"]]', "four numbers"),
    ("[[1, 2, 3, 4, 5]]", "four numbers"),
    ("[[1, 2, 30, 40], 7]", "Box 2"),
    ("[[NaN, 2, 30, 40]]", "non-finite"),
    ("[[1, 2, Infinity, 40]]", "non-finite"),
    ("[[30, 2, 10, 40]]", "inverted"),
    ("[[10, 40, 30, 40]]", "empty"),
    ("[[700, 10, 800, 100]]", "entirely outside"),
    ("[[-100, -100, -10, -10]]", "entirely outside"),
    ("[[true, 2, 30, 40]]", "four numbers"),
    (42, "must be a list"),
])
def test_bad_boxes_raise_clear_errors(given, message):
    with pytest.raises(ValueError, match=message):
        parse_boxes(given, SIZE)


def test_box_limit():
    boxes = [[i, 0, i + 10, 10] for i in range(5)]
    assert parse_boxes(boxes, SIZE, max_boxes=5).shape == (5, 4)
    with pytest.raises(ValueError, match="Too many boxes"):
        parse_boxes(boxes, SIZE, max_boxes=4)


def test_crop_params_match_transformers():
    from transformers.models.sapiens2.image_processing_sapiens2 import box_xywh_to_cxcywh, boxes_to_crop_params

    boxes = np.array([[10, 20, 110, 300], [0, 0, 640, 100], [5.5, 6, 7, 9]], np.float32)
    center, scale = crop_params(boxes, (1024, 768))
    ref_center, ref_scale = boxes_to_crop_params(box_xywh_to_cxcywh(torch.from_numpy(xyxy_to_xywh(boxes))),
                                                 output_size=(1024, 768))
    np.testing.assert_allclose(center, ref_center.numpy(), rtol=1e-6)
    np.testing.assert_allclose(scale, ref_scale.numpy(), rtol=1e-6)
    np.testing.assert_allclose(scale[:, 0] / scale[:, 1], 0.75, rtol=1e-6)  # 3:4 crops, padded x1.25
    assert (scale[:, 0] >= 1.25 * (boxes[:, 2] - boxes[:, 0]) - 1e-4).all()

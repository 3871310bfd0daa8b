"""A nearly flat pose heatmap on which transformers' DARK-UDP refinement breaks down (its Newton step divides by a
zero determinant and gives inf / nan): the degenerate case our decoders must turn into a finite keypoint with
score 0.

Whether a given nearly flat map hits an exactly zero determinant depends on the float32 rounding of the reference's
blur, which differs between CPUs (torch's convolution kernels: AVX2 on one machine, AVX-512 on another). So the map
is searched for among small variations (where the one-pixel-high plateau sits, how long it is, how many float32
steps high, the base level), the first that breaks the reference on this CPU; none at all skips the caller.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
import torch


def _candidates(h: int, w: int):
    for row, x, length, steps, base in itertools.product(
            [0, 1, 5, 30], [6, 20], [2, 1, 3], [1, 2, 4], [1.0, 0.5, 2.0]):
        heatmap = np.full((h, w), base, np.float32)
        top = np.float32(base)
        for _ in range(steps):
            top = np.nextafter(top, np.float32(np.inf))
        heatmap[row, x:x + length] = top
        yield heatmap


@functools.cache
def _singular(h: int, w: int) -> np.ndarray | None:
    from transformers.models.sapiens2.image_processing_sapiens2 import (
        get_keypoint_predictions,
        post_dark_unbiased_data_processing,
    )

    maps = np.stack(list(_candidates(h, w)))[None]
    tensor = torch.from_numpy(maps)
    keypoints, _ = get_keypoint_predictions(tensor)
    refined = post_dark_unbiased_data_processing(keypoints, tensor).numpy()[0]
    broken = np.flatnonzero(~np.isfinite(refined).all(axis=-1))
    return maps[0, broken[0]] if broken.size else None


def singular_map(h: int = 64, w: int = 48) -> np.ndarray:
    """A (h, w) float32 map, nearly flat, whose reference refinement is not finite on this CPU (a fresh copy)."""
    found = _singular(h, w)
    if found is None:
        pytest.skip("no nearly flat map makes the reference's Newton step singular on this CPU")
    return found.copy()


def assert_same_decode(got, expected, boxes_xyxy, input_size, heatmap_size):
    """The device road's (keypoints, scores) against the host road's (pose.decode): scores equal; keypoints
    within what rounding may move them. The device's fast step runs in float32, the host's in float64, and each
    answer is within _MAX_ROUNDING_PX heatmap pixels of the exact step (a step more sensitive goes to the
    reference's path), so the two differ by at most twice that, in image pixels through each person's crop,
    plus float32 rounding of the image coordinates."""
    from sapiens2_demo.pose.dark_udp import _MAX_ROUNDING_PX
    from sapiens2_demo.pose.decode import heatmap_to_image

    np.testing.assert_array_equal(got[1], expected[1])
    corners = np.zeros((len(boxes_xyxy), 2, 2), np.float32)
    corners[:, 1] = 1.0  # heatmap (0, 0) and (1, 1): one heatmap pixel in image pixels, per person
    pixel = np.diff(heatmap_to_image(corners, boxes_xyxy, input_size, heatmap_size), axis=1)[:, 0]  # (N, 2)
    tolerance = 2 * _MAX_ROUNDING_PX * pixel[:, None, :] + 4 * np.spacing(np.abs(expected[0]).astype(np.float32))
    assert np.all(np.abs(got[0] - expected[0]) <= tolerance), np.abs(got[0] - expected[0]).max()

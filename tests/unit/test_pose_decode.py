"""Our DARK-UDP decoder against transformers' post-processing, and against known answers."""

import numpy as np
import pytest
import torch

from sapiens2_demo.pose import decode
from sapiens2_demo.pose.decode import dark_udp, decode_heatmaps
from tests.heatmaps import assert_same_decode, singular_map

TOL_PX = 0.05


def reference_dark_udp(heatmaps: np.ndarray):
    from transformers.models.sapiens2.image_processing_sapiens2 import (
        get_keypoint_predictions,
        post_dark_unbiased_data_processing,
    )
    t = torch.from_numpy(heatmaps)
    keypoints, scores = get_keypoint_predictions(t)
    return post_dark_unbiased_data_processing(keypoints, t).numpy(), scores.numpy()


def gaussian_heatmaps(n, k, h, w, sigma=2.0, seed=0, margin=3.0):
    rng = np.random.default_rng(seed)
    cx = rng.uniform(-margin, w - 1 + margin, (n, k, 1, 1))
    cy = rng.uniform(-margin, h - 1 + margin, (n, k, 1, 1))
    amp = rng.uniform(0.05, 1.5, (n, k, 1, 1))
    yy, xx = np.mgrid[0:h, 0:w]
    maps = amp * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / (2 * sigma ** 2))
    return maps.astype(np.float32), np.concatenate([cx, cy], axis=-1)[:, :, 0, :]


@pytest.mark.parametrize("kind", ["uniform", "normal", "gaussian", "gaussian+noise", "wide+noise", "faint", "hot"])
def test_matches_transformers_refinement(kind):
    rng = np.random.default_rng(1)
    shape = (3, 308, 64, 48)
    if kind == "uniform":
        heatmaps = rng.random(shape, dtype=np.float32)
    elif kind == "normal":  # many maps need the exact full blur: negative values, the clamp bites
        heatmaps = rng.standard_normal(shape, dtype=np.float32)
    elif kind == "gaussian":
        heatmaps = gaussian_heatmaps(*shape)[0]
    elif kind == "gaussian+noise":
        heatmaps = gaussian_heatmaps(*shape)[0] + 0.01 * rng.standard_normal(shape, dtype=np.float32)
    elif kind == "wide+noise":  # model-like: sigma 6 blobs, low peaks, argmax often pulled off the peak by noise
        heatmaps = gaussian_heatmaps(*shape, sigma=6.0)[0] * 0.3 + 0.01 * rng.standard_normal(shape, dtype=np.float32)
    elif kind == "faint":  # peaks near the 1e-3 clamp: the clamp bites in the neighbourhood
        heatmaps = gaussian_heatmaps(*shape, sigma=1.0)[0] * 2e-3
    else:  # peaks above the 50 clamp
        heatmaps = gaussian_heatmaps(*shape, sigma=1.5)[0] * 60
    expected, expected_scores = reference_dark_udp(heatmaps)
    got, scores = dark_udp(heatmaps)
    np.testing.assert_array_equal(scores, expected_scores)
    assert np.isfinite(got).all()
    np.testing.assert_allclose(got, expected, atol=TOL_PX, rtol=0)


def test_maps_with_max_at_most_zero_follow_the_reference():
    # The reference puts them at (-1, -1) and its Newton step then reads the previous map in memory
    # (map 0 wraps to the last map); the first and a middle map here, next to ordinary maps.
    heatmaps = np.random.default_rng(2).random((2, 308, 64, 48), dtype=np.float32)
    heatmaps[0, 0] *= -1
    heatmaps[0, 5] = -1.0
    heatmaps[1, 7] = 0.0
    heatmaps[1, 8] *= -1  # previous map is also <= 0
    expected, expected_scores = reference_dark_udp(heatmaps)
    got, scores = dark_udp(heatmaps)
    np.testing.assert_array_equal(scores, expected_scores)
    np.testing.assert_allclose(got, expected, atol=TOL_PX, rtol=0)
    assert abs(got[0, 0, 0] + 1) < 1 and abs(got[1, 7, 0] + 1) < 1  # near (-1, -1), not at a real peak


def test_fast_path_is_taken_for_clean_peaks():
    # Clean Gaussians must not need the full blur (that is the whole speed-up).
    heatmaps, _ = gaussian_heatmaps(2, 308, 64, 48, margin=-4.0)  # peaks well inside the map
    assert not decode.slow_path_maps(heatmaps).any()
    noise = np.random.default_rng(0).random((1, 308, 64, 48), dtype=np.float32)
    assert decode.slow_path_maps(noise).mean() > 0.1  # noise is what the slow path is for (~16 %)


@pytest.mark.parametrize("kind", ["uniform", "gaussian", "faint"])
def test_every_map_forced_onto_the_reference_path_matches_transformers(kind):
    rng = np.random.default_rng(3)
    if kind == "uniform":
        heatmaps = rng.random((2, 308, 64, 48), dtype=np.float32)
    else:
        heatmaps = gaussian_heatmaps(2, 308, 64, 48, sigma=1.0 if kind == "faint" else 2.0)[0]
        heatmaps *= 2e-3 if kind == "faint" else 1.0
    heatmaps[1, 3] *= -1  # max <= 0 among them
    expected, expected_scores = reference_dark_udp(heatmaps)
    got, scores = dark_udp(heatmaps, force_reference=True)
    np.testing.assert_array_equal(scores, expected_scores)
    np.testing.assert_allclose(got, expected, atol=TOL_PX, rtol=0)


def test_known_subpixel_peak():
    heatmaps, centres = gaussian_heatmaps(2, 20, 64, 48, sigma=2.0, seed=3, margin=-3.0)
    got, scores = dark_udp(heatmaps)
    np.testing.assert_allclose(got, centres, atol=TOL_PX, rtol=0)
    np.testing.assert_allclose(scores, heatmaps.reshape(2, 20, -1).max(-1))


def test_full_post_processing_parity_in_image_coordinates():
    from transformers import Sapiens2ImageProcessor
    from transformers.models.sapiens2.modeling_sapiens2 import Sapiens2PoseEstimatorOutput

    processor = Sapiens2ImageProcessor(size={"height": 256, "width": 192})
    heatmaps, _ = gaussian_heatmaps(3, 308, 64, 48, seed=4)
    flipped = heatmaps[:, :, :, ::-1].copy() * 0.9
    boxes_xyxy = np.array([[10, 20, 110, 300], [200.5, 50, 260, 90], [0, 0, 640, 480]], np.float32)
    xywh = np.concatenate([boxes_xyxy[:, :2], boxes_xyxy[:, 2:] - boxes_xyxy[:, :2]], 1)
    ref = processor.post_process_pose_estimation(
        Sapiens2PoseEstimatorOutput(heatmaps=torch.from_numpy(heatmaps)), boxes=[xywh.tolist()],
        outputs_flipped=Sapiens2PoseEstimatorOutput(heatmaps=torch.from_numpy(flipped)))[0]
    got, scores = decode_heatmaps(torch.from_numpy((heatmaps + flipped) / 2), boxes_xyxy, (256, 192))
    for person, expected in enumerate(ref):
        np.testing.assert_allclose(got[person], expected["keypoints"].numpy(), atol=TOL_PX, rtol=0)
        np.testing.assert_allclose(scores[person], expected["scores"].numpy(), rtol=1e-6)
        np.testing.assert_allclose(boxes_xyxy[person], expected["bbox"].numpy(), atol=1e-4)


def test_empty_and_bad_shapes():
    coords, scores = dark_udp(np.zeros((0, 308, 64, 48), np.float32))
    assert coords.shape == (0, 308, 2) and scores.shape == (0, 308)
    with pytest.raises(ValueError):
        dark_udp(np.zeros((308, 64, 48), np.float32))


def degenerate_heatmaps():
    """Ordinary Gaussian maps (1, 6, 64, 48) with degenerate ones at 1 (nearly flat: the reference's step is
    singular, see tests/heatmaps.py), 3 (all NaN), 4 (all inf)."""
    heatmaps, _ = gaussian_heatmaps(1, 6, 64, 48, seed=5, margin=-4.0)
    heatmaps[0, 1] = singular_map()
    heatmaps[0, 3] = np.nan
    heatmaps[0, 4] = np.inf
    return heatmaps


def test_degenerate_maps_decode_to_finite_keypoints_with_score_zero():
    heatmaps = degenerate_heatmaps()
    reference, _ = reference_dark_udp(heatmaps[:, :2].copy())
    assert not np.isfinite(reference[0, 1]).all()  # the case is real: the reference itself gives inf/nan
    got, scores = dark_udp(heatmaps)
    assert np.isfinite(got).all() and np.isfinite(scores).all()
    bad = [1, 3, 4]
    np.testing.assert_array_equal(scores[0, bad], 0.0)  # not visible
    y, x = np.unravel_index(heatmaps[0, 1].argmax(), heatmaps.shape[2:])
    np.testing.assert_array_equal(got[0, 1], [x, y])  # at the raw argmax, inside the map
    assert ((got[0, bad] >= 0) & (got[0, bad] <= [47, 63])).all()
    # The ordinary maps next to them are untouched.
    good = [0, 2, 5]
    expected, expected_scores = reference_dark_udp(heatmaps[:, good].copy())
    np.testing.assert_allclose(got[:, good], expected, atol=TOL_PX, rtol=0)
    np.testing.assert_array_equal(scores[:, good], expected_scores)


def test_degenerate_maps_decode_to_finite_image_keypoints_on_both_paths():
    from sapiens2_demo.pipelines.device_post import pose_keypoints

    heatmaps = degenerate_heatmaps()
    boxes = np.array([[10, 20, 110, 300]], np.float32)
    keypoints, scores = decode_heatmaps(heatmaps, boxes, (256, 192))
    assert np.isfinite(keypoints).all() and np.isfinite(scores).all()
    np.testing.assert_array_equal(scores[0, [1, 3, 4]], 0.0)
    # The device path (run here on the CPU) decodes the same way.
    device = pose_keypoints(torch.from_numpy(heatmaps), boxes, (256, 192))
    assert_same_decode(device, (keypoints, scores), boxes, (256, 192), heatmaps.shape[-2:])
    np.testing.assert_array_equal(device[0][0, [1, 3, 4]], keypoints[0, [1, 3, 4]])  # both at the raw argmax

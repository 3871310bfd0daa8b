"""One Euro filter and the per-track keypoint smoother: known answers on synthetic signals."""

import math

import numpy as np
import pytest

from sapiens2_demo.pose.smoothing import (
    BETA,
    D_CUTOFF_HZ,
    MIN_CUTOFF_HZ,
    KeypointSmoother,
    OneEuroFilter,
    smoothing_factor,
)
from tests.heatmaps import singular_map

FPS = 30.0


def _run(filt, samples, fps=FPS):
    return np.stack([filt(x, i / fps) for i, x in enumerate(samples)])


def test_first_sample_passes_through_unchanged():
    x = np.array([[3.5, -2.0], [100.25, 7.0]])
    out = OneEuroFilter()(x, 0.0)
    np.testing.assert_array_equal(out, x)


def test_constant_signal_stays_constant():
    x = np.full((5, 2), 42.0)
    out = _run(OneEuroFilter(), [x] * 30)
    np.testing.assert_allclose(out, 42.0, atol=1e-12)


def test_one_step_matches_a_hand_computation():
    min_cutoff, beta, d_cutoff, dt = 1.0, 0.05, 1.0, 1 / 30
    filt = OneEuroFilter(min_cutoff, beta, d_cutoff)
    filt(np.array([10.0]), 0.0)
    out = filt(np.array([12.0]), dt)
    # By hand: alpha = r / (r + 1) with r = 2 pi f dt.
    alpha_d = (2 * math.pi * d_cutoff * dt) / (2 * math.pi * d_cutoff * dt + 1)
    speed = alpha_d * (12.0 - 10.0) / dt  # previous speed 0
    cutoff = min_cutoff + beta * abs(speed)
    alpha = (2 * math.pi * cutoff * dt) / (2 * math.pi * cutoff * dt + 1)
    assert out[0] == pytest.approx(10.0 + alpha * 2.0, rel=1e-12)
    assert smoothing_factor(d_cutoff, dt) == pytest.approx(alpha_d, rel=1e-12)
    assert 0.17 < alpha_d < 0.18  # 2 pi / 30 = 0.209 -> 0.173


def test_white_noise_around_a_constant_is_cut_at_least_threefold():
    rng = np.random.default_rng(0)
    jitter = rng.uniform(-2, 2, size=(240, 308, 2))  # ±2 px on a still person, 8 s at 30 fps
    out = _run(OneEuroFilter(), 500.0 + jitter)
    settled = slice(30, None)
    ratio = jitter[settled].std() / (out[settled] - 500.0).std()
    assert ratio >= 3.0, ratio


def test_fast_movement_lags_only_a_few_pixels():
    t = np.arange(60) / FPS
    x = 300.0 * t  # 300 px/s: 10 px per frame
    out = _run(OneEuroFilter(), x[:, None])[:, 0]
    assert 0 < x[-1] - out[-1] < 3.5


def test_step_converges_to_the_new_value():
    samples = [np.array([0.0])] * 10 + [np.array([100.0])] * 50
    out = _run(OneEuroFilter(), samples)[:, 0]
    assert 0 < out[10] < 100  # smoothed, not jumped
    assert np.all(np.diff(out[10:]) >= 0)  # moves monotonically towards the new value
    assert abs(out[-1] - 100.0) < 0.5


def test_repeated_timestamp_returns_the_last_output():
    filt = OneEuroFilter()
    filt(np.array([0.0]), 0.0)
    last = filt(np.array([10.0]), 0.1)
    np.testing.assert_array_equal(filt(np.array([50.0]), 0.1), last)


def test_bad_parameters_are_refused():
    with pytest.raises(ValueError, match="min_cutoff"):
        OneEuroFilter(min_cutoff=0)
    with pytest.raises(ValueError, match="min_cutoff"):
        KeypointSmoother(beta=-1)


def test_defaults_are_the_module_constants():
    smoother = KeypointSmoother()
    assert (smoother.min_cutoff, smoother.beta, smoother.d_cutoff) == (MIN_CUTOFF_HZ, BETA, D_CUTOFF_HZ)


def _person(x, y, k=4):
    return np.stack([np.full(k, x, np.float32), np.full(k, y, np.float32)], axis=-1)


def test_tracks_are_smoothed_independently():
    smoother = KeypointSmoother()
    alone_a, alone_b = OneEuroFilter(), OneEuroFilter()
    rng = np.random.default_rng(1)
    for frame in range(10):
        a = _person(100, 100) + rng.normal(0, 2, (4, 2)).astype(np.float32)
        b = _person(400, 50) + rng.normal(0, 2, (4, 2)).astype(np.float32)
        ids = np.array([7, 3]) if frame % 2 else np.array([3, 7])
        kpts = np.stack([a, b]) if frame % 2 == 0 else np.stack([b, a])
        out = smoother.smooth(ids, kpts, frame / FPS)
        # Each track's output is what a filter that only ever saw that person gives, whatever the row order.
        np.testing.assert_allclose(out[list(ids).index(3)], alone_a(a, frame / FPS), atol=1e-4)
        np.testing.assert_allclose(out[list(ids).index(7)], alone_b(b, frame / FPS), atol=1e-4)


def test_untracked_people_pass_through_unchanged():
    smoother = KeypointSmoother()
    smoother.smooth(np.array([1]), _person(0, 0)[None], 0.0)
    kpts = np.stack([_person(50, 50), _person(10.5, 20.25)])
    out = smoother.smooth(np.array([1, -1]), kpts, 1 / FPS)
    np.testing.assert_array_equal(out[1], kpts[1])
    assert 0 < out[0, 0, 0] < 50  # the tracked one is smoothed
    assert smoother.track_ids == [1]


def test_reappearing_track_restarts_after_max_age_but_not_before():
    smoother = KeypointSmoother(max_age=0.5)
    for frame in range(5):
        smoother.smooth(np.array([4]), _person(0, 0)[None], frame / FPS)
    # Back after 0.2 s: same filter, so the jump to 100 is smoothed.
    out = smoother.smooth(np.array([4]), _person(100, 0)[None], 10 / FPS)
    assert out[0, 0, 0] < 99
    # Gone for 1 s (> max_age): forgotten, and the new first sample passes through.
    smoother.smooth(np.array([], np.int64), np.zeros((0, 4, 2), np.float32), 40 / FPS)
    assert smoother.track_ids == []
    out = smoother.smooth(np.array([4]), _person(300, 7)[None], 41 / FPS)
    np.testing.assert_array_equal(out[0], _person(300, 7))


def test_output_shape_dtype_and_bad_input():
    smoother = KeypointSmoother()
    out = smoother.smooth(np.array([0, 1]), np.zeros((2, 308, 2), np.float64), 0.0)
    assert out.shape == (2, 308, 2) and out.dtype == np.float32
    with pytest.raises(ValueError, match=r"\(N, K, 2\)"):
        smoother.smooth(np.array([0]), np.zeros((2, 308, 2)), 0.1)
    with pytest.raises(ValueError, match="unique"):
        smoother.smooth(np.array([5, 5]), np.zeros((2, 308, 2)), 0.1)


def test_non_finite_sample_does_not_poison_the_filter():
    # What the decoder gave a nearly flat heatmap before it sanitised keypoints: (-inf, nan).
    filt = OneEuroFilter()
    samples = [np.array([[100.0, 50.0], [10.0, 20.0]])] * 5
    samples += [np.array([[100.0, 50.0], [-np.inf, np.nan]])] * 2 + [np.array([[100.0, 50.0], [12.0, 20.0]])] * 5
    out = _run(filt, samples)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out[:, 0], [[100.0, 50.0]] * len(samples))
    np.testing.assert_array_equal(out[5, 1], out[4, 1])  # held at the last good position
    assert 10.0 < out[7, 1, 0] < 12.0 and out[-1, 1, 1] == pytest.approx(20.0)  # then smooths on


def test_non_finite_first_sample_comes_out_finite_and_later_passes_through():
    filt = OneEuroFilter()
    out = filt(np.array([np.nan, 3.0, np.inf]), 0.0)
    np.testing.assert_array_equal(out, [0.0, 3.0, 0.0])
    out = filt(np.array([7.0, 3.0, -2.0]), 1 / FPS)
    np.testing.assert_array_equal(out, [7.0, 3.0, -2.0])  # first valid samples pass through unchanged


def test_finite_input_never_gives_nan_even_for_absurd_time_steps():
    # A jump over a tiny dt makes an infinite speed estimate; the next step used to give inf - inf = nan.
    filt = OneEuroFilter()
    times = [0.0, 1e-308, 1 / FPS, 2 / FPS, 3 / FPS]
    samples = [np.array([0.0]), np.array([1000.0]), np.array([1001.0]), np.array([1002.0]), np.array([1003.0])]
    out = np.stack([filt(x, t) for x, t in zip(samples, times)])
    assert np.isfinite(out).all()
    assert np.isfinite(filt.dx_prev).all()


def test_zero_score_keypoints_are_held_and_do_not_feed_the_filter():
    smoother, reference = KeypointSmoother(), OneEuroFilter()
    ones = np.ones((1, 4))
    for frame in range(5):
        smoother.smooth(np.array([2]), _person(100 + frame, 50)[None], frame / FPS, ones)
        last = reference(_person(100 + frame, 50), frame / FPS)
    scores = ones.copy()
    scores[0, 1] = 0.0
    jumped = _person(105, 50)[None]
    jumped[0, 1] = [0.0, 0.0]  # where the decoder puts a keypoint it could not place, score 0
    out = smoother.smooth(np.array([2]), jumped, 5 / FPS, scores)
    np.testing.assert_allclose(out[0, 1], last[1], atol=1e-4)  # held, not pulled towards (0, 0)
    assert out[0, 0, 0] > last[0, 0]  # the visible ones move on
    with pytest.raises(ValueError, match="scores"):
        smoother.smooth(np.array([2]), jumped, 6 / FPS, np.ones(4))


def degenerate_heatmaps():
    """(1, 3, 64, 48): a Gaussian peak, a nearly flat map (its Hessian is singular: transformers' DARK-UDP
    gives inf / nan, tests/heatmaps.py) and an all-NaN map."""
    yy, xx = np.mgrid[0:64, 0:48]
    heatmaps = np.ones((1, 3, 64, 48), np.float32)
    heatmaps[0, 0] = np.exp(-((xx - 20.3) ** 2 + (yy - 30.6) ** 2) / 8)
    heatmaps[0, 1] = singular_map()
    heatmaps[0, 2] = np.nan
    return heatmaps


def test_degenerate_heatmap_through_decoding_and_smoothing_stays_finite():
    from sapiens2_demo.pose.decode import decode_heatmaps

    heatmaps = degenerate_heatmaps()
    boxes = np.array([[10, 20, 110, 300]], np.float32)
    smoother = KeypointSmoother()
    for frame in range(6):
        maps = heatmaps if frame in (2, 3) else np.roll(heatmaps, frame, axis=-1)
        keypoints, scores = decode_heatmaps(maps, boxes, (256, 192))
        out = smoother.smooth(np.array([0]), keypoints, frame / FPS, scores)
        assert np.isfinite(out).all(), frame
        # Without scores (the old call) the smoother must stay finite too.
        assert np.isfinite(KeypointSmoother().smooth(np.array([0]), keypoints, 0.0)).all()

"""The device road's DARK-UDP fast step (pose/dark_udp.fast_step) runs in float32, in logs relative to the peak:
within 0.05 px of transformers' own decode on many random and structured maps, and float32 in every op, so a
return to float64 (slow on the L4 / A10G GPUs a Space offers) fails here."""

import numpy as np
import pytest
import torch
from torch.overrides import TorchFunctionMode

from sapiens2_demo.pose.dark_udp import fast_step, gather_windows, refine, window_half
from tests.heatmaps import singular_map
from tests.unit.test_pose_decode import TOL_PX, gaussian_heatmaps, reference_dark_udp

H, W = 64, 48


def _structured(rng, k: int = 308) -> np.ndarray:
    """(1, k, H, W) maps like a model's and unlike: round, elongated and rotated blobs of many widths and heights,
    on noise or a pedestal, peaks at the border, two peaks, plateaus and a nearly flat (singular) map."""
    yy, xx = np.mgrid[0:H, 0:W].astype(np.float64)
    maps = np.empty((k, H, W))
    for i in range(k):
        cx, cy = rng.uniform(-2, W + 1), rng.uniform(-2, H + 1)
        sx, sy = rng.uniform(0.8, 8), rng.uniform(0.8, 8)
        angle = rng.uniform(0, np.pi)
        u = (xx - cx) * np.cos(angle) + (yy - cy) * np.sin(angle)
        v = -(xx - cx) * np.sin(angle) + (yy - cy) * np.cos(angle)
        maps[i] = 10 ** rng.uniform(-2, 1.5) * np.exp(-0.5 * ((u / sx) ** 2 + (v / sy) ** 2))
        kind = i % 5
        if kind == 1:
            maps[i] += 0.01 * rng.standard_normal((H, W))
        elif kind == 2:
            maps[i] += rng.uniform(0.01, 1.0)
        elif kind == 3:  # a second, lower peak
            maps[i] += 0.7 * maps[i].max() * np.exp(-((xx - rng.uniform(0, W)) ** 2 + (yy - rng.uniform(0, H)) ** 2)
                                                    / (2 * rng.uniform(1, 4) ** 2))
    maps[7, 20:23, 10:14] = maps[7].max()  # a plateau: the argmax is its first cell
    maps = maps.astype(np.float32)
    maps[11] = singular_map(H, W)
    return maps[None]


def _random(rng) -> np.ndarray:
    shape = (1, 308, H, W)
    return np.concatenate([rng.random(shape, dtype=np.float32),
                           gaussian_heatmaps(1, 308, H, W, sigma=6.0, seed=9)[0] * 0.3
                           + 0.01 * rng.standard_normal(shape, dtype=np.float32),
                           gaussian_heatmaps(1, 308, H, W, sigma=1.2, seed=10)[0]])


def _device_road(heatmaps: np.ndarray):
    n, k = heatmaps.shape[:2]
    flat = torch.from_numpy(heatmaps).reshape(n * k, H * W)
    scores, index = flat.max(dim=1)
    windows = gather_windows(flat, index, H, W, window_half(11))
    coords, scores, redo = refine(flat, index, scores, windows, (H, W))
    return coords.numpy().reshape(n, k, 2), scores.numpy().reshape(n, k), redo.numpy().reshape(n, k)


@pytest.mark.parametrize("make", [_structured, _random])
def test_float32_fast_step_is_within_tolerance_of_transformers(make):
    heatmaps = make(np.random.default_rng(20))
    expected, expected_scores = reference_dark_udp(heatmaps)
    coords, scores, redo = _device_road(heatmaps)
    fast = ~redo
    assert fast.mean() > 0.7  # the float32 step settles most maps (the point of it), not the reference's path
    finite = np.isfinite(expected).all(axis=-1)
    np.testing.assert_allclose(coords[finite], expected[finite], atol=TOL_PX, rtol=0)
    np.testing.assert_array_equal(scores[finite], expected_scores[finite])
    assert np.isfinite(coords).all() and (scores[~finite] == 0).all()  # the singular map: raw argmax, score 0


class _Dtypes(TorchFunctionMode):
    """Every dtype a torch op returns while active."""

    def __init__(self):
        super().__init__()
        self.seen = set()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.seen.add(t.dtype)
        return out


def test_fast_step_is_float32_throughout():
    heatmaps = torch.from_numpy(_structured(np.random.default_rng(21), k=40)).reshape(40, H * W)
    scores, index = heatmaps.max(dim=1)
    windows = gather_windows(heatmaps, index, H, W, window_half(11))
    with _Dtypes() as mode:
        coords, redo = fast_step(index, scores, windows, H, W, 11)
    assert coords.dtype == torch.float32
    floats = {d for d in mode.seen if d.is_floating_point}
    assert floats == {torch.float32}, floats  # no float64 anywhere in the hot part
    assert not redo.all()

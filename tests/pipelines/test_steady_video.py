"""Steady over time (`temporal_smoothing`): on a still clip with sensor noise the exported depth frames flicker at
least 3x less; a moving edge is followed within one frame (the filter resets where the input changes)."""

import io
import zipfile

import numpy as np
import pytest
from PIL import Image

from sapiens2_demo import gpu
from sapiens2_demo.jobs.video import process_video
from sapiens2_demo.pipelines.steady import SteadyFilter
from tests.videos import write_frames

SIZE = (160, 120)


@pytest.fixture(scope="module")
def still_clip(tmp_path_factory, person_image):
    """The astronaut photo, 12 times, each with its own light sensor noise (Gaussian, 2 grey levels)."""
    base = np.asarray(Image.fromarray(person_image).resize(SIZE), np.float32)
    rng = np.random.default_rng(0)
    frames = [np.clip(base + rng.normal(0, 2.0, base.shape), 0, 255).astype(np.uint8) for _ in range(12)]
    return write_frames(tmp_path_factory.mktemp("still") / "still.mp4", frames)


def depth_frames(path) -> np.ndarray:
    with zipfile.ZipFile(path) as zf:
        return np.stack([np.asarray(Image.open(io.BytesIO(zf.read(name))), np.float64)
                         for name in sorted(zf.namelist())])


def flicker(frames: np.ndarray) -> float:
    """Mean absolute frame-to-frame change (mm), after the first few frames the filter needs to settle."""
    return float(np.abs(np.diff(frames[3:], axis=0)).mean())


def test_still_clip_depth_flickers_3x_less(still_clip, manager, tmp_path):
    key = gpu.register(manager)
    runs = {}
    for steady in (False, True):
        out = tmp_path / str(steady)
        result = process_video(still_clip, "pointmap", key, out, frame_exports=True, temporal_smoothing=steady,
                               batch_size=2, chunk_size=4)  # the state crosses batches and GPU calls
        runs[steady] = depth_frames(next(p for p in result.files if p.name == "depth_mm.zip"))
    assert runs[False].shape == runs[True].shape == (12, SIZE[1], SIZE[0])
    before, after = flicker(runs[False]), flicker(runs[True])
    assert before > 0 and after * 3 <= before, (before, after)
    assert np.array_equal(runs[False][0], runs[True][0])  # the first frame has nothing to blend with


def test_normals_steady_too_and_stay_unit(still_clip, manager, tmp_path):
    key = gpu.register(manager)
    result = process_video(still_clip, "normals", key, tmp_path, frame_exports=True, temporal_smoothing=True)
    with zipfile.ZipFile(next(p for p in result.files if p.name == "normals_f16.zip")) as zf:
        maps = [np.load(io.BytesIO(zf.read(name))).astype(np.float32) for name in sorted(zf.namelist())]
    length = np.linalg.norm(maps[-1], axis=2)
    assert np.allclose(length[length > 0], 1, atol=2e-3)


def test_a_moving_edge_is_followed_within_one_frame():
    """A bright band moves 8 px a frame over a noisy still background; the map steps with it. Wherever the band
    is (or just left), the output is that frame's own map; elsewhere the noise is smoothed."""
    rng = np.random.default_rng(1)
    height, width = 64, 96
    flt = SteadyFilter("cpu")
    for t in range(8):
        frame = np.full((height, width, 3), 60, np.float32) + rng.normal(0, 2.0, (height, width, 3))
        left = 8 * t
        frame[:, left:left + 16] = 220
        value = (2.0 + rng.normal(0, 0.01, (height, width, 1))).astype(np.float32)
        value[:, left:left + 16] = 1.0  # the band is nearer
        out, _ = flt.step(np.clip(frame, 0, 255).astype(np.uint8), value, None)
        if t == 0:
            continue
        band = np.zeros(width, bool)
        band[max(left - 8, 0):left + 16] = True  # where the band is now, and where it was a frame ago
        assert np.array_equal(out[:, band], value[:, band]), t
        # the edges: exactly the frame's depth, no trail of the band behind it
        assert np.abs(out[:, left:left + 16] - 1.0).max() < 0.05 and np.abs(out[:, left - 8:left] - 2.0).max() < 0.05
    far = slice(left + 16 + 8, width)  # never touched by the band: smoothed
    assert np.std(out[:, far]) < 0.6 * 0.01


def test_the_state_crosses_as_numpy_and_goes_on():
    """Two filters, the second started from the first's state, give what one filter gives over all frames."""
    rng = np.random.default_rng(2)
    frames = [np.full((32, 48, 3), 100, np.uint8) for _ in range(6)]
    values = [rng.normal(1, 0.1, (32, 48, 3)).astype(np.float32) for _ in range(6)]
    masks = [rng.random((32, 48)) > 0.3 for _ in range(6)]
    one = SteadyFilter("cpu")
    whole = [one.step(f, v, m) for f, v, m in zip(frames, values, masks)]
    first = SteadyFilter("cpu")
    for f, v, m in zip(frames[:3], values[:3], masks[:3]):
        first.step(f, v, m)
    second = SteadyFilter("cpu", first.state)
    rest = [second.step(f, v, m) for f, v, m in zip(frames[3:], values[3:], masks[3:])]
    for (a, ma), (b, mb) in zip(whole[3:], rest):
        assert np.allclose(a, b, atol=2e-3) and np.array_equal(ma, mb)  # the state crosses as float16

"""Depth colouring: percentile bounds clamped to 0.1-250 m, inverse depth through 'turbo', grey background."""

import numpy as np
import pytest
from matplotlib import colormaps

from sapiens2_demo.render.depth import (
    BACKGROUND,
    DepthAnnotator,
    DepthBounds,
    attach_colorbar,
    colormap_lut,
    depth_bounds,
    depth_colorbar,
)
from sapiens2_demo.results import PointmapResult


def _pointmap(depth, mask=None):
    depth = np.asarray(depth, np.float32)
    points = np.stack([np.zeros_like(depth), np.zeros_like(depth), depth], axis=-1)
    return PointmapResult(points=points, scale=1.0, focal_length=768.0, mask=mask)


def test_turbo_lut_is_matplotlib_turbo():
    lut = colormap_lut("turbo")
    expected = np.rint(colormaps["turbo"](np.linspace(0, 1, 256))[:, :3] * 255)
    np.testing.assert_array_equal(lut, expected)


def test_bounds_are_foreground_percentiles():
    depth = np.linspace(1.0, 5.0, 10001, dtype=np.float32).reshape(1, -1)
    depth = np.concatenate([depth, np.full_like(depth, 100.0)])  # background row far away
    mask = np.zeros(depth.shape, bool)
    mask[0] = True
    bounds = depth_bounds(depth, mask)
    assert bounds.near == pytest.approx(1.04, abs=1e-3) and bounds.far == pytest.approx(4.96, abs=1e-3)
    unmasked = depth_bounds(depth)  # the background row now dominates the top percentile
    assert unmasked.far == pytest.approx(100.0)


def test_bounds_are_clamped():
    assert depth_bounds(np.full((10, 10), 0.01, np.float32)).near == pytest.approx(0.1)
    far = depth_bounds(np.concatenate([np.full(50, 0.05), np.full(50, 1000.0)]).reshape(10, 10))
    assert (far.near, far.far) == (pytest.approx(0.1), pytest.approx(250.0))
    assert depth_bounds(np.full((3, 3), np.nan)) == DepthBounds(0.1, 250.0)  # nothing valid


def test_colours_follow_inverse_depth_and_background_is_grey():
    near, far = 1.0, 4.0
    middle = 1.0 / (0.5 * (1 / near + 1 / far))  # halfway in inverse depth = 1.6 m
    depth = np.array([[near, far, middle, 2.0], [0.5, 9.0, np.nan, -1.0]], np.float32)
    mask = np.ones(depth.shape, bool)
    mask[0, 3] = False
    out = DepthAnnotator().annotate(None, _pointmap(depth, mask), bounds=DepthBounds(near, far))
    lut = colormap_lut("turbo")
    assert tuple(out[0, 0]) == tuple(lut[255])  # near: red end
    assert tuple(out[0, 1]) == tuple(lut[0])  # far: blue end
    assert tuple(out[0, 2]) == tuple(lut[128])  # 127.5 rounds to 128
    assert tuple(out[0, 3]) == BACKGROUND  # masked out
    assert tuple(out[1, 0]) == tuple(lut[255]) and tuple(out[1, 1]) == tuple(lut[0])  # clipped
    assert tuple(out[1, 2]) == BACKGROUND and tuple(out[1, 3]) == BACKGROUND  # invalid depth


def test_result_mask_used_and_bounds_computed():
    depth = np.tile(np.linspace(1, 3, 50, dtype=np.float32), (4, 1))
    mask = np.zeros(depth.shape, bool)
    mask[:2] = True
    out = DepthAnnotator().annotate(np.zeros((4, 50, 3), np.uint8), _pointmap(depth, mask))
    assert (out[2:] == BACKGROUND).all()
    assert not (out[:2] == BACKGROUND).all(axis=-1).any()
    lut = colormap_lut("turbo")
    assert tuple(out[0, 0]) == tuple(lut[255]) and tuple(out[0, -1]) == tuple(lut[0])  # 1st/99th percentile ends


def test_colorbar_runs_near_red_to_far_blue():
    bar = depth_colorbar(DepthBounds(1.0, 4.0), height=400)
    assert bar.dtype == np.uint8 and bar.shape[0] == 400 and 30 < bar.shape[1] < 200
    lut = colormap_lut("turbo")
    # the pixels closest to each end colour: near (red) must sit above far (blue), and match closely
    distance_red = np.abs(bar.astype(int) - lut[255]).sum(-1)
    distance_blue = np.abs(bar.astype(int) - lut[0]).sum(-1)
    red_row = np.unravel_index(np.argmin(distance_red), distance_red.shape)[0]
    blue_row = np.unravel_index(np.argmin(distance_blue), distance_blue.shape)[0]
    assert distance_red.min() <= 6 and distance_blue.min() <= 6
    assert red_row < 60 and blue_row > 340


def test_attach_colorbar_keeps_height():
    image = np.zeros((300, 200, 3), np.uint8)
    out = attach_colorbar(image, DepthBounds(0.5, 10.0))
    assert out.shape[0] == 300 and out.shape[1] > 200
    np.testing.assert_array_equal(out[:, :200], image)


def label_rows(bar: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) row of each run of rows holding dark text (or tick marks) right of the colour strip."""
    colourful = (bar.max(axis=2).astype(int) - bar.min(axis=2)) > 60
    strip_right = int(np.nonzero(colourful.any(axis=0))[0].max()) + 1
    dark = (bar[:, strip_right:] < 80).all(axis=2).any(axis=1)
    runs, start = [], None
    for row, on in enumerate([*dark, False]):
        if on and start is None:
            start = row
        elif not on and start is not None:
            runs.append((start, row - 1))
            start = None
    return runs


@pytest.mark.parametrize("height,width", [(512, 512), (600, 512), (1080, 1920), (1920, 1080), (200, 300)])
def test_a_gallery_tiles_labels_keep_their_size_whatever_the_picture(height, width):
    """All tasks shows the depth render in a gallery cell of a fixed size: the labels must be a fixed share of
    the tile's longer side (so ~13 px on screen), where the slider's (1/30 of the height) shrink to ~6 px."""
    image = np.zeros((height, width, 3), np.uint8)
    tile = attach_colorbar(image, DepthBounds(0.4, 12.0), tile=True)
    plain = attach_colorbar(image, DepthBounds(0.4, 12.0))
    labels = [last - first + 1 for first, last in label_rows(tile[:, width:])]
    assert len(labels) >= 2  # at least the two ends ("m" sits above the strip, not right of it)
    assert min(labels) >= 0.6 * max(tile.shape[:2]) / 19  # digit height ~0.7 of the font size
    assert tile.shape[1] - width <= 0.31 * tile.shape[1]  # the picture keeps most of the tile
    plain_labels = [last - first + 1 for first, last in label_rows(plain[:, width:])]
    assert max(plain_labels) < min(labels)  # the slider's labels are left as they were, smaller


def test_a_gallery_tile_keeps_its_bottom_corner_for_the_caption():
    tile = attach_colorbar(np.zeros((600, 500, 3), np.uint8), DepthBounds(0.4, 12.0), tile=True)
    assert (tile[-int(600 * 0.12):, 500:] == 255).all()  # the gallery's caption covers the bottom right


def test_a_pointmap_answer_gathers_its_valid_depths_once(monkeypatch):
    """The render's bounds, its drawing's background and the summary's percentiles of one result read one gathering
    of its valid pixels (it was one each), and one set of percentiles (it was two), with the values a fresh
    np.percentile gives."""
    from sapiens2_demo.media.image import LoadedImage
    from sapiens2_demo.render import depth as depth_module
    from sapiens2_demo.tasks.present import present_pointmap
    from sapiens2_demo.tasks.summary import summarize

    rng = np.random.default_rng(0)
    depth = rng.uniform(0.5, 5.0, (40, 60)).astype(np.float32)
    depth[:5] = np.nan
    mask = rng.random(depth.shape) > 0.3
    result = _pointmap(depth, mask)
    expected = np.percentile(depth[np.isfinite(depth) & mask], (1, 50, 99))
    calls, sorts = [], []
    real, percentiles = depth_module.valid_depth, depth_module.positive_percentiles
    monkeypatch.setattr(depth_module, "valid_depth", lambda *args, **kwargs: calls.append(1) or real(*args, **kwargs))
    monkeypatch.setattr(depth_module, "positive_percentiles",
                        lambda *args, **kwargs: sorts.append(1) or percentiles(*args, **kwargs))
    shown = present_pointmap(LoadedImage(np.zeros((40, 60, 3), np.uint8), (60, 40), []), result)
    summary = summarize(result, depth.shape)
    monkeypatch.setattr(depth_module, "positive_percentiles", percentiles)
    assert len(calls) == 1 and len(sorts) == 1
    assert summary["depth_m"] == {"p1": round(float(expected[0]), 3), "median": round(float(expected[1]), 3),
                                  "p99": round(float(expected[2]), 3)}
    assert any(f"{expected[0]:.2f}–{expected[2]:.2f} m" in note for note in shown.notes), shown.notes
    assert np.array_equal(depth_module.depth_percentiles(result, (1, 50, 99), mask), expected)


def test_a_map_written_in_place_is_gathered_again():
    """A caller's buffer reused for the next frame keeps its id: the bounds, the summary and the drawing follow
    its new values, not the ones gathered from it before (including where its invalid pixels moved)."""
    points = np.zeros((60, 80, 3), np.float32)
    points[..., 2] = np.linspace(1.0, 3.0, 80, dtype=np.float32)
    result = PointmapResult(points=points, scale=1.0, focal_length=1.0)
    first = depth_bounds(result)
    points[..., 2] += 2.0  # the next frame, written into the same array
    second = depth_bounds(result)
    assert second.near == pytest.approx(first.near + 2.0, rel=1e-5)
    assert second.far == pytest.approx(first.far + 2.0, rel=1e-5)
    points[:30, :5, 2] = np.nan  # and some of its pixels made invalid
    drawn = DepthAnnotator().annotate(np.zeros((60, 80, 3), np.uint8), result)
    assert (drawn[:30, :5] == (100, 100, 100)).all()  # the new invalid pixels drawn as background


@pytest.mark.parametrize("q", [(1.0, 99.0), (1.0, 50.0, 99.0), (0.0, 100.0), (0.3, 37.5, 99.99)])
def test_the_counted_percentiles_are_numpys_to_the_bit(q):
    """depth_percentiles counts the values' leading bits instead of partially sorting them all: the same numbers as
    np.percentile, for spread, heavy-tailed, tied and tiny sets."""
    from sapiens2_demo.render.depth import positive_percentiles

    rng = np.random.default_rng(7)
    sets = [rng.uniform(0.5, 10, 50_000), rng.lognormal(0, 2, 20_000), rng.choice([1.5, 2.0, 2.25, 7.0], 999),
            np.exp(rng.uniform(-20, 20, 5_000)), [3.0], [2.0, 5.0], rng.uniform(1, 2, 7)]
    for values in sets:
        values = np.asarray(values, dtype=np.float32)
        expected = np.percentile(values, q)
        got = positive_percentiles(values.copy(), q)
        assert got.dtype == expected.dtype and np.array_equal(got, expected), (values.size, got, expected)

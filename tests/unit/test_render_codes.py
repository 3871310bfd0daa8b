"""A light answer's maps drawn from their codes (issue 37: a map decoded once): the same bytes as the decoded
float path, without decoding them in the renderer."""

import numpy as np
import pytest

from sapiens2_demo import results
from sapiens2_demo.render.matting import MattingAnnotator
from sapiens2_demo.render.normals import NormalsAnnotator
from sapiens2_demo.results import NORMAL_CODE, UNIT_CODE, CodedMap, MattingResult, NormalsResult

RNG = np.random.default_rng(0)
H, W = 120, 160
IMAGE = RNG.integers(0, 256, (H, W, 3), dtype=np.uint8)


def no_decoding(monkeypatch):
    def refuse(self):
        raise AssertionError("the renderer decoded a coded map")

    monkeypatch.setattr(results.CodedMap, "decode", refuse)


@pytest.mark.parametrize("background", ["black", "image"])
@pytest.mark.parametrize("masked", [False, True])
def test_normals_drawn_from_their_codes_are_the_decoded_drawing(monkeypatch, background, masked):
    normals = RNG.normal(size=(H, W, 3)).astype(np.float32)
    normals /= np.linalg.norm(normals, axis=-1, keepdims=True)
    codes = np.rint((normals + 1) * 32767.5).astype(np.uint16)
    mask = RNG.random((H, W)) > 0.3 if masked else None
    expected = NormalsAnnotator(background).annotate(IMAGE, NormalsResult(CodedMap(codes, *NORMAL_CODE).decode(),
                                                                          mask=mask))
    no_decoding(monkeypatch)
    drawn = NormalsAnnotator(background).annotate(IMAGE, NormalsResult(CodedMap(codes, *NORMAL_CODE), mask=mask))
    np.testing.assert_array_equal(drawn, expected)


@pytest.mark.parametrize("annotator", [MattingAnnotator("colour", "#00b140"), MattingAnnotator("colour", "#ffffff"),
                                       MattingAnnotator("image", image=RNG.integers(0, 256, (90, 300, 3), np.uint8))])
def test_matting_composited_from_its_codes_is_the_decoded_composite(monkeypatch, annotator):
    alpha = RNG.integers(0, 256, (H, W), dtype=np.uint8)
    alpha[:10] = 0
    alpha[-10:] = 255
    foreground = (RNG.random((H, W, 3)) * alpha[..., None]).astype(np.uint8)
    decoded = MattingResult(CodedMap(alpha, *UNIT_CODE).decode(), CodedMap(foreground, *UNIT_CODE).decode())
    expected = annotator.annotate(IMAGE, decoded)
    no_decoding(monkeypatch)
    drawn = annotator.annotate(IMAGE, MattingResult(CodedMap(alpha, *UNIT_CODE), CodedMap(foreground, *UNIT_CODE)))
    np.testing.assert_array_equal(drawn, expected)


def test_two_threads_reading_a_coded_map_at_once_share_one_decode(monkeypatch):
    import threading
    import time

    calls = []
    decode = results.CodedMap.decode

    def slow(self):
        calls.append(1)
        time.sleep(0.2)  # both readers arrive while the first decodes
        return decode(self)

    monkeypatch.setattr(results.CodedMap, "decode", slow)
    codes = RNG.integers(0, 65536, (H, W, 3), dtype=np.uint16)
    result = NormalsResult(CodedMap(codes, *NORMAL_CODE))
    seen = []
    readers = [threading.Thread(target=lambda: seen.append(result.normals)) for _ in range(2)]
    for reader in readers:
        reader.start()
    for reader in readers:
        reader.join()
    assert len(calls) == 1 and seen[0] is seen[1]


def light_depth(most_mm: int, invalid_rows: int, masked: bool):
    """Random millimetres (the first rows invalid) and a random mask or none: the decoded depth, the mask and the
    light answer holding the codes."""
    from sapiens2_demo.results import DEPTH_MM, PointmapResult

    millimetres = RNG.integers(0, most_mm, (H, W)).astype(np.uint16)
    millimetres[:invalid_rows] = 0
    mask = RNG.random((H, W)) > 0.4 if masked else None
    light = PointmapResult(points=None, scale=1.0, focal_length=500.0, mask=mask, depth_mm=millimetres)
    return CodedMap(millimetres, DEPTH_MM).decode(), mask, light


@pytest.mark.parametrize("masked", [False, True])
def test_a_light_depth_summary_counts_its_millimetres_without_decoding(monkeypatch, masked):
    from sapiens2_demo.render.depth import valid_depth
    from sapiens2_demo.tasks.summary import summarize

    depth, mask, light = light_depth(7000, 5, masked)
    expected = np.percentile(depth[valid_depth(depth, mask)], (1, 50, 99))
    no_decoding(monkeypatch)
    summary = summarize(light, (H, W))["depth_m"]
    # the same order statistics, to the summary's 3 decimals (1 mm: a rounding either side of a half)
    np.testing.assert_allclose([summary["p1"], summary["median"], summary["p99"]], np.round(expected, 3), atol=1.5e-3)


@pytest.mark.parametrize("masked", [False, True])
def test_a_light_depth_is_drawn_from_its_millimetres_as_from_the_decoded_map(monkeypatch, masked):
    from sapiens2_demo.render.depth import DepthAnnotator, depth_bounds

    depth, mask, light = light_depth(9000, 7, masked)
    expected = DepthAnnotator().annotate(None, depth, mask=mask)
    expected_bounds = depth_bounds(depth, mask)
    no_decoding(monkeypatch)
    bounds = depth_bounds(light, mask)
    assert bounds.near == pytest.approx(expected_bounds.near, rel=1e-6)
    assert bounds.far == pytest.approx(expected_bounds.far, rel=1e-6)
    np.testing.assert_array_equal(DepthAnnotator().annotate(None, light, bounds=expected_bounds), expected)


def test_normals_to_rgb_keeps_the_rounding_of_its_formula():
    """round(clip((n + 1) * 127.5, 0, 255)) in float32, as numpy computes it, over unit vectors and a sweep past
    both ends (ties and saturation)."""
    from sapiens2_demo.render.normals import normals_to_rgb

    unit = RNG.normal(size=(200, 300, 3)).astype(np.float32)
    unit /= np.linalg.norm(unit, axis=-1, keepdims=True)
    sweep = np.linspace(-1.02, 1.02, 300_000, dtype=np.float32).reshape(-1, 1000, 3)
    for normals in (unit, sweep):
        scaled = (normals + np.float32(1)) * np.float32(127.5)
        np.testing.assert_array_equal(normals_to_rgb(normals), np.rint(np.clip(scaled, 0, 255)).astype(np.uint8))


@pytest.mark.parametrize("background", ["colour", "image"])
def test_the_matting_composite_keeps_the_rounding_of_its_formula(background):
    """round(clip(fg + (1 - alpha) * bg, 0, 1) * 255) in float32, as numpy computes it, with a foreground that
    strays below 0 and above 1 (saturation) and alphas at both ends."""
    alpha = RNG.random((H, W)).astype(np.float32)
    alpha[:10], alpha[-10:] = 0, 1
    foreground = (RNG.random((H, W, 3)).astype(np.float32) * 1.2 - 0.1) * alpha[..., None]
    annotator = (MattingAnnotator("colour", "#00b140") if background == "colour"
                 else MattingAnnotator("image", image=RNG.integers(0, 256, (90, 300, 3), np.uint8)))
    behind = annotator.background_for((H, W))
    expected = np.rint(np.clip(foreground + (np.float32(1) - alpha[..., None]) * behind, 0, 1) * np.float32(255))
    drawn = annotator.annotate(IMAGE, MattingResult(alpha, foreground))
    np.testing.assert_array_equal(drawn, expected.astype(np.uint8))

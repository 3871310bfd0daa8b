"""Body-part overlay, colour label map, legend and names: reference palette and 50% blend."""

import json
from pathlib import Path

import numpy as np
import pytest

from sapiens2_demo.render.parts import PartNamesAnnotator, PartsAnnotator, class_names, colorize_labels, legend, palette
from sapiens2_demo.results import SegmentationResult

SEG29 = json.loads((Path(__file__).resolve().parents[2] / "sapiens2_demo" / "data" / "seg29.json").read_text())


@pytest.fixture()
def seg():
    labels = np.zeros((40, 60), np.uint8)
    labels[10:30, 20:40] = 23  # Upper_Clothing: 400 px
    labels[0:5, 0:10] = 3  # Face_Neck: 50 px
    return SegmentationResult(labels)


def test_palette_and_names_are_the_reference():
    assert class_names() == tuple(SEG29["classes"]) and len(class_names()) == 29
    np.testing.assert_array_equal(palette(), np.asarray(SEG29["palette_rgb"], np.uint8))
    assert tuple(palette()[0]) == (50, 50, 50) and class_names()[23] == "Upper_Clothing"


def test_colorize_labels(seg):
    colours = colorize_labels(seg)
    assert colours.shape == (40, 60, 3) and colours.dtype == np.uint8
    assert tuple(colours[15, 25]) == tuple(SEG29["palette_rgb"][23])
    assert tuple(colours[2, 2]) == tuple(SEG29["palette_rgb"][3])
    assert tuple(colours[39, 59]) == (50, 50, 50)


def test_overlay_is_half_blend(seg):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (40, 60, 3), dtype=np.uint8)
    out = PartsAnnotator().annotate(image, seg)
    expected = 0.5 * image.astype(float) + 0.5 * palette()[seg.labels].astype(float)
    assert out.dtype == np.uint8 and out.shape == image.shape
    assert np.abs(out - expected).max() <= 0.5 + 1e-9  # rounding only
    opaque = PartsAnnotator(opacity=1.0).annotate(image, seg)
    np.testing.assert_array_equal(opaque, palette()[seg.labels])


def test_overlay_can_leave_background_alone(seg):
    image = np.full((40, 60, 3), 200, np.uint8)
    out = PartsAnnotator(opacity=0.5, skip_background=True).annotate(image, seg)
    np.testing.assert_array_equal(out[~seg.foreground], image[~seg.foreground])
    assert (out[seg.foreground] != 200).any()


def test_overlay_rejects_mismatched_sizes(seg):
    with pytest.raises(ValueError):
        PartsAnnotator().annotate(np.zeros((10, 10, 3), np.uint8), seg)


def test_legend_lists_present_classes_with_share(seg):
    entries = legend(seg)
    assert [e.class_id for e in entries] == [3, 23]
    face, shirt = entries
    assert face.name == "Face_Neck" and face.rgb == tuple(SEG29["palette_rgb"][3])
    assert face.share == pytest.approx(50 / 2400) and shirt.share == pytest.approx(400 / 2400)
    with_bg = legend(seg, include_background=True)
    assert with_bg[0].class_id == 0 and with_bg[0].share == pytest.approx(1950 / 2400)
    assert [e.class_id for e in legend(seg, min_share=0.05)] == [23]


def test_names_are_written_inside_regions(seg):
    image = np.zeros((200, 300, 3), np.uint8)
    labels = np.zeros((200, 300), np.uint8)
    labels[50:150, 100:200] = 23
    out = PartNamesAnnotator().annotate(image, labels)
    changed = np.argwhere((out != 0).any(axis=2))
    assert changed.size > 0  # text was drawn ...
    assert changed[:, 0].min() >= 50 and changed[:, 0].max() < 150  # ... inside the shirt's rows


def test_the_legend_counts_every_pixel_of_each_class_as_bincount_does():
    rng = np.random.default_rng(5)
    labels = np.where(rng.random((1080, 1920)) < 0.7, 0, rng.integers(1, 29, (1080, 1920))).astype(np.uint8)
    counts = np.bincount(labels.ravel(), minlength=29)
    entries = legend(labels, include_background=True)
    assert [e.class_id for e in entries] == list(np.flatnonzero(counts))
    assert [e.share for e in entries] == [counts[e.class_id] / labels.size for e in entries]  # exact counts
    assert [e.share for e in legend(labels.astype(np.int32), include_background=True)] == [e.share for e in entries]

"""Known answers for the fast post-processing: label upsampling, argmax ties, padding crop, normals."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sapiens2_demo.pipelines.postprocess import (
    _dense_labels,
    _source_index,
    argmax_classes,
    crop_padding,
    padding_box,
    resize_map,
    unit_normals,
    upsample_labels,
)


def _reference_labels(logits, size):
    return F.interpolate(torch.from_numpy(logits)[None], size=size, mode="bilinear",
                         align_corners=False)[0].argmax(0).numpy()


def _one_hot(labels, classes, margin=10.0):
    return (np.eye(classes, dtype=np.float32)[labels] * margin).transpose(2, 0, 1).copy()


def test_stripes_survive_integer_upsampling_exactly():
    # two-class boundaries only: bilinear one-hot logits flip at the source midpoint = nearest neighbour
    labels = np.repeat(np.array([0, 3, 3, 7, 1, 1, 1, 28], np.uint8)[None], 6, axis=0)
    out = upsample_labels(_one_hot(labels, 29), (24, 32))
    np.testing.assert_array_equal(out, np.repeat(np.repeat(labels, 4, axis=0), 4, axis=1))


def test_blocks_survive_any_resize():
    rng = np.random.default_rng(0)
    blocks = rng.integers(0, 29, size=(6, 5)).astype(np.uint8)
    labels = np.repeat(np.repeat(blocks, 8, axis=0), 8, axis=1)  # 48 x 40 source
    logits = _one_hot(labels, 29)
    for size in [(96, 80), (131, 67), (30, 25), (48, 40)]:
        out = upsample_labels(logits, size)
        assert out.shape == size and out.dtype == np.uint8
        np.testing.assert_array_equal(out, _reference_labels(logits, size))
        # every block's centre keeps its label
        ys = ((np.arange(6) * 8 + 4) * size[0] / 48).astype(int)
        xs = ((np.arange(5) * 8 + 4) * size[1] / 40).astype(int)
        np.testing.assert_array_equal(out[np.ix_(ys, xs)], blocks)


@pytest.mark.parametrize("kind", ["smooth", "noise"])
@pytest.mark.parametrize("size", [(200, 150), (97, 211), (20, 13), (64, 48), (360, 640)])
def test_upsample_labels_equals_reference_both_paths(kind, size):
    rng = np.random.default_rng(1)
    if kind == "noise":
        logits = rng.standard_normal((29, 64, 48)).astype(np.float32)
    else:
        coarse = torch.from_numpy(rng.standard_normal((1, 29, 8, 6)).astype(np.float32) * 3)
        logits = F.interpolate(coarse, size=(64, 48), mode="bicubic", align_corners=False)[0].numpy()
    ref = _reference_labels(logits, size)
    sparse = upsample_labels(logits, size, dense_fraction=10.0)  # candidate path forced
    dense = upsample_labels(logits, size, dense_fraction=0.0)  # full interpolation forced (torch)
    banded = _dense_labels(logits, _source_index(size[0], 64), _source_index(size[1], 48))  # huge outputs
    assert (sparse == ref).mean() >= 0.999
    np.testing.assert_array_equal(dense, ref)  # the torch path is the reference's own upsampling
    assert (banded == ref).mean() >= 0.999
    assert len(np.unique(ref)) > 5


def test_candidate_pruning_keeps_a_class_that_wins_at_no_corner():
    # class 2 is second everywhere at the corners but first in the middle of the cell
    logits = np.zeros((3, 2, 2), np.float32)
    logits[0] = [[10, 0], [0, 10]]
    logits[1] = [[0, 10], [10, 0]]
    logits[2] = 6.0
    out = upsample_labels(logits, (8, 8))
    np.testing.assert_array_equal(out, _reference_labels(logits, (8, 8)))
    assert (out == 2).any()


def test_argmax_ties_go_to_lowest_class():
    logits = np.zeros((5, 3, 4), np.float32)
    assert (argmax_classes(logits) == 0).all()
    logits[2] = logits[4] = 1.0
    assert (argmax_classes(logits) == 2).all()
    rng = np.random.default_rng(2)
    noise = np.round(rng.standard_normal((29, 40, 30)), 1).astype(np.float32)  # many ties
    np.testing.assert_array_equal(argmax_classes(noise), torch.from_numpy(noise).argmax(0).numpy())


def test_padding_box_and_crop_match_processor_arithmetic():
    # 300 x 512 into 256 x 192: scale 0.375 -> 112 x 192, centred: 72 rows above
    assert padding_box((300, 512), (256, 192)) == (72, 0, 184, 192)
    assert padding_box((512, 512), (256, 192)) == (32, 0, 224, 192)
    assert padding_box((1920, 1080), (1024, 768)) == (0, 96, 1024, 672)
    maps = np.arange(256 * 192, dtype=np.float32).reshape(256, 192, 1)
    cropped = crop_padding(maps, (300, 512), (256, 192))
    assert cropped.shape == (112, 192, 1) and cropped[0, 0, 0] == 72 * 192


def test_resize_map_matches_torch_bilinear():
    rng = np.random.default_rng(3)
    maps = rng.standard_normal((37, 29, 5)).astype(np.float32)
    ours = resize_map(maps, (101, 64))
    ref = F.interpolate(torch.from_numpy(maps).permute(2, 0, 1)[None], size=(101, 64), mode="bilinear",
                        align_corners=False)[0].permute(1, 2, 0).numpy()
    assert ours.shape == (101, 64, 5)
    np.testing.assert_allclose(ours, ref, atol=1e-4)


def test_unit_normals():
    vectors = np.array([[3.0, 0.0, 4.0], [0.0, 0.0, 0.0], [0.0, -2.0, 0.0]], np.float32)
    np.testing.assert_allclose(unit_normals(vectors), [[0.6, 0, 0.8], [0, 0, 0], [0, -1, 0]], atol=1e-7)
    assert unit_normals(vectors).dtype == np.float32


# -- the map helpers against transformers' post_process_* on random model outputs ----------------

from types import SimpleNamespace  # noqa: E402

from sapiens2_demo.pipelines.postprocess import postprocess_matting, postprocess_normals, postprocess_pointmap  # noqa: E402


@pytest.fixture(scope="module")
def processor():
    from transformers import Sapiens2ImageProcessor

    return Sapiens2ImageProcessor(size={"height": 64, "width": 48})


@pytest.mark.parametrize("image_hw", [(150, 260), (300, 90), (64, 48), (33, 17)])
def test_map_helpers_match_transformers(processor, image_hw):
    rng = np.random.default_rng(5)
    smooth = lambda c: F.interpolate(torch.randn(1, c, 8, 6, generator=torch.Generator().manual_seed(c)),  # noqa: E731
                                     size=(64, 48), mode="bicubic", align_corners=False)
    normals, points, scales = smooth(3), smooth(3) + 4.0, torch.tensor([[1.7]])
    ref_n = processor.post_process_normal_estimation(SimpleNamespace(normals=normals), source_sizes=[image_hw])
    ref_n = F.normalize(ref_n[0]["normals"], dim=0).permute(1, 2, 0).numpy()
    ours_n = postprocess_normals(normals[0], image_hw, (64, 48))
    assert ours_n.shape == (*image_hw, 3)
    assert np.quantile(np.abs(ours_n - ref_n), 0.999) <= 1e-4

    ref_p = processor.post_process_pointmap_estimation(SimpleNamespace(pointmaps=points, scales=scales),
                                                       source_sizes=[image_hw])[0]["pointmap"]
    ours_p = postprocess_pointmap(points[0], 1.7, image_hw, (64, 48))
    np.testing.assert_allclose(ours_p, ref_p.permute(1, 2, 0).numpy(), atol=1e-4)

    fg, alpha = torch.from_numpy(rng.uniform(-0.1, 1.1, (1, 3, 64, 48)).astype(np.float32)), smooth(1).sigmoid()
    ref_m = processor.post_process_image_matting(SimpleNamespace(foregrounds=fg, alphas=alpha),
                                                 target_sizes=[image_hw])[0]
    ours_alpha, ours_fg = postprocess_matting(fg[0], alpha[0], image_hw)
    np.testing.assert_allclose(ours_alpha, ref_m["alpha"][0].numpy(), atol=1e-4)
    np.testing.assert_allclose(ours_fg, ref_m["foreground"].permute(1, 2, 0).numpy(), atol=1e-4)


def test_unit_normals_divides_as_numpys_broadcast_does():
    """The divisor laid out per component gives numpy's broadcast quotients bit for bit (a crop's strided view too)."""
    from sapiens2_demo.pipelines.postprocess import unit_normals

    rng = np.random.default_rng(3)
    maps = rng.standard_normal((40, 70, 3)).astype(np.float32) * 7
    maps[0, 0] = 0  # the eps floor
    large = [rng.standard_normal((300, 500, 3)).astype(np.float32) * scale for scale in (1e-3, 1, 1e3)]
    for normals in (maps, maps[5:30, 10:60], *large):  # OpenCV's sums of squares are einsum's, bit for bit
        norm = np.maximum(np.sqrt(np.einsum("...i,...i->...", normals, normals)), np.float32(1e-8))
        assert np.array_equal(unit_normals(normals), normals / norm[..., None])

"""The torch post-processing (pipelines/device_post.py), run on the CPU, against transformers' own
post_process_* on tiny-checkpoint outputs for a batch of three different images (a square, a landscape
and a portrait crop), and against our numpy path (pipelines/postprocess.py, pose.decode).

Tolerances (as tests/test_dense_parity.py's or tighter):
- segmentation: labels equal on >= 99.9% of pixels, against transformers and against the numpy path;
- normals: transformers does not re-normalise after the resize, so its result is re-normalised here;
  against it |ours - ref| <= 1e-5 (same torch resize; only the normalisation's rounding differs);
  against the numpy path (cv2 resize) <= 1e-4 on 99.9% of pixels and <= 1e-3 on all but near-zero
  interpolated vectors;
- pointmap: |ours - ref| <= 1e-6 * max|ref| + 1e-7 against transformers, <= 1e-5 * max|ref| + 1e-6 against
  the numpy path (cv2 vs torch bilinear weights);
- matting: alpha and foreground within 1e-6 of transformers, within 1e-4 of the numpy path;
- pose: keypoints within 0.05 px of transformers and scores equal to 1e-6 relative, also with every map sent
  down the reference path; against decode_heatmaps (same argmax and windows; its fast step in float64, ours in
  float32) scores equal and keypoints within the rounding bound of tests/heatmaps.assert_same_decode, with only the
  keypoints and scores copied off the device.
"""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from sapiens2_demo.pipelines import device_post
from sapiens2_demo.pipelines.postprocess import (
    postprocess_matting,
    postprocess_normals,
    postprocess_pointmap,
    upsample_labels,
)
from sapiens2_demo.pose.boxes import xyxy_to_xywh
from sapiens2_demo.pose.decode import decode_heatmaps
from tests.heatmaps import assert_same_decode, singular_map

TOL_PX = 0.05
_MODELS = {}


def _reference(tiny_dir, task):
    """transformers' model and processor for the tiny checkpoint of `task`, loaded once per module."""
    if task not in _MODELS:
        import transformers
        from transformers import Sapiens2ImageProcessor

        from sapiens2_demo.models.registry import TASKS, checkpoint

        path = tiny_dir / checkpoint(task, TASKS[task].sizes[0]).dirname
        model = getattr(transformers, TASKS[task].auto_class).from_pretrained(path, local_files_only=True).eval()
        _MODELS[task] = model, Sapiens2ImageProcessor.from_pretrained(path, local_files_only=True)
    return _MODELS[task]


def _run(tiny_dir, task, images, **kwargs):
    model, processor = _reference(tiny_dir, task)
    inputs = processor(images=images, return_tensors="pt", **kwargs)
    with torch.inference_mode():
        return model(**inputs), processor


def _input_hw(processor):
    return processor.size["height"], processor.size["width"]


@pytest.fixture(scope="module")
def images(person_image):
    # 512x512, 300x512 and 512x250: none is 4:3, so normals/pointmap crop padding top/bottom and left/right
    return [person_image.copy(), person_image[100:400].copy(), person_image[:, 150:400].copy()]


@pytest.fixture(scope="module")
def small(person_image):
    return person_image[200:240, 200:230].copy()  # 40x30: smaller than every tiny model output


def _sizes(images):
    return [im.shape[:2] for im in images]


def _same_layout(ours, expected):
    assert ours.shape == expected.shape and ours.dtype == expected.dtype
    assert ours.flags["C_CONTIGUOUS"] and ours.flags["WRITEABLE"]


# -- dense --------------------------------------------------------------------------------------

def test_segmentation_matches_transformers_and_numpy(tiny_dir, images):
    outputs, processor = _run(tiny_dir, "seg", images, do_pad=False)
    refs = processor.post_process_semantic_segmentation(outputs, target_sizes=_sizes(images))
    ours = device_post.segmentation_labels(outputs.logits, _sizes(images))
    assert len(ours) == 3
    for labels, ref, logits, image in zip(ours, refs, outputs.logits, images):
        numpy_labels = upsample_labels(logits.numpy(), image.shape[:2])
        _same_layout(labels, numpy_labels)
        assert labels.shape == image.shape[:2]
        assert len(np.unique(ref.numpy())) > 3  # random weights still give a mixed label map
        assert (labels == ref.numpy()).mean() >= 0.999
        assert (labels == numpy_labels).mean() >= 0.999


def test_segmentation_in_class_chunks_is_unchanged(monkeypatch):
    rng = np.random.default_rng(0)
    logits = torch.from_numpy(rng.standard_normal((2, 29, 16, 12)).astype(np.float32))
    logits[0, 20, :4] = logits[0, 3, :4] = 100.0  # a tie between classes in different chunks: 3 wins
    sizes = [(50, 37), (9, 7)]
    whole = device_post.segmentation_labels(logits, sizes)
    monkeypatch.setattr(device_post, "CHUNK_ELEMENTS", 50 * 37 * 4)  # 4 classes a step for the first image
    chunked = device_post.segmentation_labels(logits, sizes)
    for a, b, item, size in zip(whole, chunked, logits, sizes):
        ref = F.interpolate(item[None], size=size, mode="bilinear", align_corners=False)[0].argmax(0).numpy()
        np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(a, ref)
    assert (chunked[0][:10] == 3).all()


def test_normals_match_renormalised_transformers_and_numpy(tiny_dir, images):
    outputs, processor = _run(tiny_dir, "normal", images, do_pad=True)
    refs = processor.post_process_normal_estimation(outputs, source_sizes=_sizes(images))
    ours = device_post.normals(outputs.normals, _sizes(images), _input_hw(processor))
    for normals, ref, raw, image in zip(ours, refs, outputs.normals, images):
        ref = F.normalize(ref["normals"], dim=0, eps=1e-8).permute(1, 2, 0).numpy()
        numpy_normals = postprocess_normals(raw, image.shape[:2], _input_hw(processor))
        _same_layout(normals, numpy_normals)
        assert normals.shape == (*image.shape[:2], 3)
        np.testing.assert_allclose(np.linalg.norm(normals, axis=-1), 1.0, atol=1e-5)
        np.testing.assert_allclose(normals, ref, atol=1e-5, rtol=0)
        error = np.abs(normals - numpy_normals).max(axis=-1)
        assert np.quantile(error, 0.999) <= 1e-4
        assert error.max() <= 1e-3 or (error > 1e-3).mean() < 1e-4


def test_pointmaps_match_transformers_and_numpy(tiny_dir, images):
    outputs, processor = _run(tiny_dir, "pointmap", images, do_pad=True)
    refs = processor.post_process_pointmap_estimation(outputs, source_sizes=_sizes(images))
    ours = device_post.pointmaps(outputs.pointmaps, outputs.scales, _sizes(images), _input_hw(processor))
    assert len(set(outputs.scales[:, 0].tolist())) == 3  # three images, three scales: each must be its own
    for points, ref, raw, scale, image in zip(ours, refs, outputs.pointmaps, outputs.scales, images):
        ref = ref["pointmap"].permute(1, 2, 0).numpy()
        numpy_points = postprocess_pointmap(raw, float(scale[0]), image.shape[:2], _input_hw(processor))
        _same_layout(points, numpy_points)
        assert points.shape == (*image.shape[:2], 3)
        peak = np.abs(ref).max()
        np.testing.assert_allclose(points, ref, rtol=0, atol=1e-6 * peak + 1e-7)
        np.testing.assert_allclose(points, numpy_points, rtol=0, atol=1e-5 * peak + 1e-6)


def test_matting_matches_transformers_and_numpy(tiny_dir, images):
    outputs, processor = _run(tiny_dir, "matting", images, do_pad=False)
    refs = processor.post_process_image_matting(outputs, target_sizes=_sizes(images))
    ours = device_post.matting(outputs.foregrounds, outputs.alphas, _sizes(images))
    for (alpha, fg), ref, raw_fg, raw_alpha, image in zip(ours, refs, outputs.foregrounds, outputs.alphas, images):
        numpy_alpha, numpy_fg = postprocess_matting(raw_fg, raw_alpha, image.shape[:2])
        _same_layout(alpha, numpy_alpha)
        _same_layout(fg, numpy_fg)
        assert alpha.shape == image.shape[:2] and 0 <= alpha.min() < alpha.max() <= 1
        np.testing.assert_allclose(alpha, ref["alpha"][0].numpy(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(fg, ref["foreground"].permute(1, 2, 0).numpy(), atol=1e-6, rtol=0)
        np.testing.assert_allclose(alpha, numpy_alpha, atol=1e-4, rtol=0)
        np.testing.assert_allclose(fg, numpy_fg, atol=1e-4, rtol=0)


def test_one_small_image(tiny_dir, small):
    # B=1, and an image smaller than every model output (the resize shrinks): each task against the numpy path
    size = [small.shape[:2]]
    seg, _ = _run(tiny_dir, "seg", small, do_pad=False)
    assert seg.logits.shape[-2] > small.shape[0] and seg.logits.shape[-1] > small.shape[1]
    [labels] = device_post.segmentation_labels(seg.logits, size)
    assert (labels == upsample_labels(seg.logits[0].numpy(), size[0])).mean() >= 0.999

    normal, processor = _run(tiny_dir, "normal", small, do_pad=True)
    [normals] = device_post.normals(normal.normals, size, _input_hw(processor))
    expected = postprocess_normals(normal.normals[0], size[0], _input_hw(processor))
    _same_layout(normals, expected)
    assert np.quantile(np.abs(normals - expected), 0.999) <= 1e-4

    points, processor = _run(tiny_dir, "pointmap", small, do_pad=True)
    [xyz] = device_post.pointmaps(points.pointmaps, points.scales[:, 0], size, _input_hw(processor))
    expected = postprocess_pointmap(points.pointmaps[0], float(points.scales[0, 0]), size[0], _input_hw(processor))
    _same_layout(xyz, expected)
    np.testing.assert_allclose(xyz, expected, rtol=0, atol=1e-5 * np.abs(expected).max() + 1e-6)

    matte, _ = _run(tiny_dir, "matting", small, do_pad=False)
    [(alpha, fg)] = device_post.matting(matte.foregrounds, matte.alphas, size)
    expected_alpha, expected_fg = postprocess_matting(matte.foregrounds[0], matte.alphas[0], size[0])
    np.testing.assert_allclose(alpha, expected_alpha, atol=1e-4, rtol=0)
    np.testing.assert_allclose(fg, expected_fg, atol=1e-4, rtol=0)


def test_bad_batches_are_value_errors():
    maps = torch.zeros(2, 3, 8, 6)
    with pytest.raises(ValueError, match="image sizes"):
        device_post.normals(maps, [(8, 6)], (8, 6))
    with pytest.raises(ValueError, match="one scale per"):
        device_post.pointmaps(maps, torch.ones(3), [(8, 6), (8, 6)], (8, 6))
    with pytest.raises(ValueError, match="nothing of"):
        device_post.normals(maps[:1], [(8, 2000)], (8, 6))  # a sliver: the padding crop leaves no rows
    with pytest.raises(ValueError, match="heatmaps"):
        device_post.pose_keypoints(torch.zeros(3, 8, 6), np.zeros((3, 4), np.float32), (32, 24))
    with pytest.raises(ValueError, match="boxes"):
        device_post.pose_keypoints(torch.zeros(3, 2, 8, 6), np.zeros((2, 4), np.float32), (32, 24))


def test_chooser():
    assert device_post.use_device_post("cuda") and device_post.use_device_post("cuda:1")
    assert not device_post.use_device_post("cpu")  # measured: the numpy path is faster on a CPU


# -- pose ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("force_reference", [False, True])
def test_pose_keypoints_match_transformers_and_decode_heatmaps(tiny_dir, images, force_reference):
    from transformers.models.sapiens2.modeling_sapiens2 import Sapiens2PoseEstimatorOutput

    square, landscape, _ = images
    boxes = [np.array([[60, 40, 400, 500], [300, 10, 500, 200]], np.float32),
             np.array([[100, 50, 350, 290]], np.float32)]
    model, processor = _reference(tiny_dir, "pose")
    pixels = torch.cat([processor(images=image, boxes=[xyxy_to_xywh(b).tolist()], return_tensors="pt")["pixel_values"]
                        for image, b in zip([square, landscape], boxes)])
    with torch.inference_mode():
        heatmaps = model(pixel_values=pixels).heatmaps
    refs = [person for image in processor.post_process_pose_estimation(
        Sapiens2PoseEstimatorOutput(heatmaps=heatmaps), boxes=[xyxy_to_xywh(b).tolist() for b in boxes])
        for person in image]
    all_boxes = np.concatenate(boxes)

    keypoints, scores = device_post.pose_keypoints(heatmaps, all_boxes, _input_hw(processor),
                                                   force_reference=force_reference)
    expected_keypoints, expected_scores = decode_heatmaps(heatmaps, all_boxes, _input_hw(processor),
                                                          force_reference=force_reference)
    assert_same_decode((keypoints, scores), (expected_keypoints, expected_scores), all_boxes, _input_hw(processor),
                       heatmaps.shape[-2:])
    for person, ref in enumerate(refs):
        np.testing.assert_allclose(keypoints[person], ref["keypoints"].numpy(), atol=TOL_PX, rtol=0)
        np.testing.assert_allclose(scores[person], ref["scores"].numpy(), rtol=1e-6)


def _gaussians(n, k, h, w, seed):
    rng = np.random.default_rng(seed)
    cx, cy = rng.uniform(4, w - 5, (n, k, 1, 1)), rng.uniform(4, h - 5, (n, k, 1, 1))
    yy, xx = np.mgrid[0:h, 0:w]
    return (rng.uniform(0.1, 1.0, (n, k, 1, 1)) * np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 8)).astype(np.float32)


@pytest.fixture()
def host_copies(monkeypatch):
    """Every tensor -> numpy conversion, as (numel, where): the device path's one copy goes through to_host."""
    copies = []
    real_to_host, real_numpy = device_post.to_host, torch.Tensor.numpy

    def to_host(tensors):
        copies.append((sum(t.numel() for t in tensors), "to_host"))
        return real_to_host(tensors)

    def numpy(self, *args, **kwargs):
        copies.append((self.numel(), "numpy"))
        return real_numpy(self, *args, **kwargs)

    monkeypatch.setattr(device_post, "to_host", to_host)
    monkeypatch.setattr(torch.Tensor, "numpy", numpy)
    return copies


def test_pose_keypoints_leave_the_heatmaps_on_the_device(host_copies):
    """The clamp cases, the max <= 0 quirk (the previous map read), NaN and nearly flat maps all decode where
    the maps are; the only thing that crosses is the keypoints and scores, in one copy (3 floats a map)."""
    heatmaps = _gaussians(2, 20, 64, 48, seed=5)
    heatmaps[0, 0, :3, :3] = 5.0  # a peak in the corner: its window is replicate-padded
    heatmaps[1, 4] *= -1  # max <= 0: the reference's path, reading the previous map too
    heatmaps[1, 0] *= -1  # ... and one whose previous map is another person's last
    heatmaps[0, 7] *= 1e-3  # faint: the clamp bites near the peak
    heatmaps[0, 8] *= 80  # hot: above the clamp's 50
    heatmaps[0, 9] = np.nan
    heatmaps[0, 10] = singular_map()  # nearly flat: the reference's Hessian is singular (tests/heatmaps.py)
    boxes = np.array([[0, 0, 96, 128], [10, 10, 50, 40]], np.float32)
    expected = decode_heatmaps(heatmaps, boxes, (256, 192))
    host_copies.clear()
    keypoints, scores = device_post.pose_keypoints(torch.from_numpy(heatmaps), boxes, (256, 192))
    # the keypoints, scores and the count of maps that needed the reference's blur, in one copy
    assert [numel for numel, where in host_copies if where == "to_host"] == [2 * 20 * 3 + 1]
    assert max(numel for numel, _ in host_copies) == 2 * 20 * 3 + 1  # nothing bigger crossed
    assert_same_decode((keypoints, scores), expected, boxes, (256, 192), heatmaps.shape[-2:])
    assert np.isfinite(keypoints).all() and scores[0, 9] == 0 and scores[0, 10] == 0


def test_pose_keypoints_of_several_batches_cross_in_one_copy_and_a_full_set_is_redone(host_copies, monkeypatch):
    """A frame batch's crop batches decoded together: one copy for all; a batch whose maps needing the reference's
    blur outnumber the set picked without a count is decoded again, counted (the set then grows), same answers."""
    heatmaps = _gaussians(3, 20, 64, 48, seed=6)
    heatmaps[1, 4] *= -1  # max <= 0
    heatmaps[1, 0] *= -1  # ... the first of its batch: the map before is the batch's last
    heatmaps[0, 7] *= 1e-3
    heatmaps[2, 9] = singular_map()
    boxes = np.array([[0, 0, 96, 128], [10, 10, 50, 40], [5, 5, 60, 90]], np.float32)
    batches = [(torch.from_numpy(heatmaps[:1]), boxes[:1]), (torch.from_numpy(heatmaps[1:]), boxes[1:])]
    monkeypatch.setattr(device_post, "_REFERENCE_SHARE", [1.0])  # every map in the set: no count needed
    expected = device_post.pose_keypoints_many(batches, (256, 192))
    monkeypatch.setattr(device_post, "_REFERENCE_SHARE", [0.0])
    monkeypatch.setattr(device_post, "REFERENCE_MIN_MAPS", 1)  # a set of one map: too small for batches 2 and 3
    host_copies.clear()
    found = device_post.pose_keypoints_many(batches, (256, 192))
    copies = [numel for numel, where in host_copies if where == "to_host"]
    assert copies[0] == 3 * 20 * 3 + 2 and len(copies) == 2  # one for all, and the overflowing batch again
    assert copies[1] == 2 * 20 * 3
    assert device_post._REFERENCE_SHARE[0] > 0  # grown
    keypoints = np.concatenate([k for k, _ in found])
    scores = np.concatenate([s for _, s in found])
    np.testing.assert_array_equal(keypoints, np.concatenate([k for k, _ in expected]))
    np.testing.assert_array_equal(scores, np.concatenate([s for _, s in expected]))


def test_pose_keypoints_of_bf16_heatmaps_and_no_people():
    heatmaps = torch.from_numpy(_gaussians(1, 10, 32, 24, seed=7)).bfloat16()
    boxes = np.array([[0, 0, 30, 40]], np.float32)
    expected = decode_heatmaps(heatmaps, boxes, (128, 96))
    keypoints, scores = device_post.pose_keypoints(heatmaps, boxes, (128, 96))
    assert_same_decode((keypoints, scores), expected, boxes, (128, 96), heatmaps.shape[-2:])
    keypoints, scores = device_post.pose_keypoints(torch.zeros(0, 308, 64, 48), np.zeros((0, 4), np.float32),
                                                   (256, 192))
    assert keypoints.shape == (0, 308, 2) and scores.shape == (0, 308)

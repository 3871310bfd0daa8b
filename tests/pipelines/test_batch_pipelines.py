"""Batch-first pipelines: a batch of 4 different frames gives what 4 single calls give.

Frames differ in content and size (so the processor resizes/pads each differently). Tolerances: labels equal on
>= 99.9 % of pixels (a batched matmul may round differently in the last bit; in practice they are all equal),
float maps within 1e-4 (matting) or 1e-4 x the largest value (metric pointmaps, the normals model's raw output),
keypoints within 0.05 px (the DARK-UDP decode's own bound). Unit normals get a per-pixel bound derived from that
raw tolerance (`normals_bound`): normalising a short vector magnifies its rounding.
"""

import numpy as np
import pytest

from sapiens2_demo.models.inference import forward, input_size, preprocess
from sapiens2_demo.models.registry import checkpoint
from sapiens2_demo.pipelines import dense
from sapiens2_demo.pipelines.pose import Detections, estimate_pose, estimate_pose_batch


@pytest.fixture(scope="module")
def frames(person_image):
    rng = np.random.default_rng(0)
    noisy = np.clip(person_image.astype(np.int16) + rng.integers(-40, 40, person_image.shape), 0, 255)
    return [person_image.copy(), person_image[100:400].copy(), person_image[:, 50:300].copy(),
            noisy.astype(np.uint8)[::2, ::2].copy()]


def test_segmentation_batch_equals_single_calls(frames, manager):
    batched = dense.segment_batch(frames, manager)
    for frame, result in zip(frames, batched):
        single = dense.segment(frame, manager).labels
        assert result.labels.shape == frame.shape[:2]
        assert (result.labels == single).mean() >= 0.999
    assert not np.array_equal(batched[0].labels, batched[3].labels[: batched[0].labels.shape[0]])


def normals_bound(raw_chw: np.ndarray, raw_tol: float, image_hw, input_hw) -> np.ndarray:
    """Largest change of `postprocess_normals`' unit normals, per output pixel, when each raw element moves by up
    to `raw_tol`. Exact bounds, not first order: |v/|v| - w/|w|| <= 2|v - w|/|v| (triangle inequality), so a pixel
    whose raw vector (length |v|) moves by at most sqrt(3) * raw_tol turns by 2 sqrt(3) raw_tol / |v|; the
    bilinear resize is a convex combination, so its error is at most the same resize of those errors; the final
    re-normalisation divides by the length L of the resized unit vector (short where neighbours disagree)."""
    from sapiens2_demo.pipelines.postprocess import crop_padding, resize_map, unit_normals

    cropped = crop_padding(raw_chw.transpose(1, 2, 0).astype(np.float32), image_hw, input_hw)
    length = np.linalg.norm(cropped, axis=2, keepdims=True)
    first = 2 * np.sqrt(3) * raw_tol / np.maximum(length, 1e-8)
    resized = resize_map(unit_normals(cropped), image_hw)
    moved = resize_map(np.repeat(first, 3, axis=2), image_hw)[..., :1]
    return 2 * moved / np.maximum(np.linalg.norm(resized, axis=2, keepdims=True), 1e-8)


def test_normals_batch_equals_single_calls_within_the_normalisation_bound(frames, manager):
    loaded = manager.get(checkpoint("normal", "0.4b"))
    raw_batch = forward(loaded, preprocess(loaded, frames, "normal"))["normals"].numpy()
    for frame, raw, result in zip(frames, raw_batch, dense.normals_batch(frames, manager)):
        raw_single = forward(loaded, preprocess(loaded, [frame], "normal"))["normals"].numpy()[0]
        raw_tol = 1e-4 * np.abs(raw_single).max()  # float32 rounding of a batched matmul (as for pointmaps)
        np.testing.assert_allclose(raw, raw_single, atol=raw_tol, rtol=0)
        single = dense.estimate_normals(frame, manager).normals
        assert result.normals.shape == (*frame.shape[:2], 3)
        bound = normals_bound(raw_single, raw_tol, frame.shape[:2], input_size(loaded.processor))
        assert (np.abs(result.normals - single) <= bound + 1e-6).all()  # + float32 rounding of unit vectors


def test_padded_pointmap_batch_equals_single_calls(frames, manager):
    batched = dense.pointmap_batch(frames, manager)
    for frame, result in zip(frames, batched):
        single = dense.estimate_pointmap(frame, manager)
        assert result.points.shape == (*frame.shape[:2], 3)
        # float32 rounding of a batched matmul: within 1e-4 of the map's largest magnitude
        np.testing.assert_allclose(result.points, single.points, atol=1e-4 * np.abs(single.points).max(), rtol=0)
        assert result.scale == pytest.approx(single.scale, rel=1e-5)


def test_matting_batch_equals_single_calls(frames, manager):
    for frame, result in zip(frames, dense.matting_batch(frames, manager)):
        single = dense.estimate_matting(frame, manager)
        np.testing.assert_allclose(result.alpha, single.alpha, atol=1e-4)
        np.testing.assert_allclose(result.foreground, single.foreground, atol=1e-4)


def test_pose_batch_equals_single_calls_with_crops_batched_across_frames(frames, manager, monkeypatch):
    boxes = [[[10, 20, 200, 400], [150, 30, 300, 250]], [[0, 0, 100, 200]], [[20, 20, 240, 480]],
             [[5, 5, 200, 200], [50, 60, 250, 250], [0, 0, 100, 100]]]
    detections = [Detections(np.array(b, np.float32), np.ones(len(b), np.float32)) for b in boxes]
    model = manager.get(checkpoint("pose", "0.4b")).model
    calls, real = [], model.forward

    def counting(*args, **kwargs):
        calls.append(kwargs["pixel_values"].shape[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    batched = estimate_pose_batch(frames, manager, detections=detections, batch_size=4)
    # 7 crops of 4 frames in chunks of 4: the first chunk spans frames 0-2; the mirrored crops (flip test) go in
    # the same forward
    assert calls == [8, 6]
    calls.clear()
    for frame, b, result in zip(frames, boxes, batched):
        single = estimate_pose(frame, manager, boxes=b)
        assert result.keypoints.shape == single.keypoints.shape == (len(b), 308, 2)
        np.testing.assert_allclose(result.keypoints, single.keypoints, atol=0.05)
        np.testing.assert_allclose(result.keypoint_scores, single.keypoint_scores, atol=1e-4)


def test_device_post_wiring_gives_the_same_results(frames, manager, monkeypatch):
    """The CUDA wiring (outputs left on the device, torch post-processing, one copy) forced on the CPU: the
    same results as the numpy path (the functions themselves are checked against transformers in
    test_device_post.py)."""
    from sapiens2_demo.pipelines import device_post

    boxes = [Detections(np.array([[10, 20, 200, 400]], np.float32), np.ones(1, np.float32))] * 2

    def every_task():
        return {"seg": dense.segment_batch(frames[:2], manager), "normal": dense.normals_batch(frames[:2], manager),
                "pointmap": dense.pointmap_batch(frames[:2], manager),
                "matting": dense.matting_batch(frames[:2], manager),
                "pose": estimate_pose_batch(frames[:2], manager, detections=boxes)}

    expected = every_task()
    monkeypatch.setattr(dense, "use_device_post", lambda device: True)
    monkeypatch.setattr(device_post, "use_device_post", lambda device: True)
    got = every_task()
    for a, b in zip(expected["seg"], got["seg"]):
        assert (a.labels == b.labels).mean() >= 0.999
    for a, b in zip(expected["normal"], got["normal"]):
        np.testing.assert_allclose(a.normals, b.normals, atol=1e-3)  # cv2 vs torch bilinear, re-normalised
    for a, b in zip(expected["pointmap"], got["pointmap"]):
        np.testing.assert_allclose(a.points, b.points, atol=1e-4 * np.abs(a.points).max())
        assert a.scale == pytest.approx(b.scale)
    for a, b in zip(expected["matting"], got["matting"]):
        np.testing.assert_allclose(a.alpha, b.alpha, atol=1e-4)
    for a, b in zip(expected["pose"], got["pose"]):
        np.testing.assert_allclose(a.keypoints, b.keypoints, atol=0.05)

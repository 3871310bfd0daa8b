"""Batch-first pipelines: a batch of 4 different frames gives what 4 single calls give.

Frames differ in content and size (so the processor resizes/pads each differently). Tolerances: labels equal on
>= 99.9 % of pixels (a batched matmul may round differently in the last bit; in practice they are all equal),
float maps within 1e-4 (normals, matting) or 1e-4 x the largest value (metric pointmaps), keypoints within 0.05 px (the DARK-UDP decode's own bound).
"""

import numpy as np
import pytest

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


@pytest.mark.parametrize("name", ["normals", "pointmap"])
def test_padded_dense_batch_equals_single_calls(frames, manager, name):
    batch_fn, single_fn, field = {
        "normals": (dense.normals_batch, dense.estimate_normals, "normals"),
        "pointmap": (dense.pointmap_batch, dense.estimate_pointmap, "points"),
    }[name]
    batched = batch_fn(frames, manager)
    for frame, result in zip(frames, batched):
        single = getattr(single_fn(frame, manager), field)
        assert getattr(result, field).shape == (*frame.shape[:2], 3)
        # float32 rounding of a batched matmul: within 1e-4 of the map's largest magnitude
        np.testing.assert_allclose(getattr(result, field), single, atol=1e-4 * np.abs(single).max(), rtol=0)
    if name == "pointmap":
        for frame, result in zip(frames, batched):
            assert result.scale == pytest.approx(dense.estimate_pointmap(frame, manager).scale, rel=1e-5)


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
    # 7 crops of 4 frames in chunks of 4: the first chunk spans frames 0-2; each forward has its flipped twin
    assert calls == [4, 4, 3, 3]
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

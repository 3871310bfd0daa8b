"""estimate_pose end to end on the tiny checkpoints: boxes (detector, fallback, user), batching, flip test."""

import numpy as np
import pytest
import torch

from sapiens2_demo.models.manager import LoadedModel, ModelManager
from sapiens2_demo.models.registry import checkpoint
from sapiens2_demo.pipelines.pose import STAGES, estimate_pose, model_flip_pairs
from sapiens2_demo.pose import detector as detector_module
from sapiens2_demo.pose.detector import NO_PERSON_NOTE, detect_people
from sapiens2_demo.pose.meta import flip_pairs_from_indices

K = 308


def iou_matrix(boxes):
    from torchvision.ops import box_iou

    t = torch.from_numpy(boxes)
    return box_iou(t, t).numpy()


def test_detector_path_with_random_yolo(person_image, manager):
    boxes, scores = detect_people(person_image, manager, score_threshold=0.0, classes=None, max_people=5)
    height, width = person_image.shape[:2]
    assert 1 <= len(boxes) <= 5 and boxes.dtype == np.float32 and scores.shape == (len(boxes),)
    assert (np.diff(scores) <= 0).all()  # best first
    assert (boxes[:, [0, 1]] >= 0).all() and (boxes[:, 2] <= width).all() and (boxes[:, 3] <= height).all()
    assert ((boxes[:, 2] > boxes[:, 0]) & (boxes[:, 3] > boxes[:, 1])).all()
    overlaps = iou_matrix(boxes) - np.eye(len(boxes))
    assert overlaps.max() <= 0.3 + 1e-6  # greedy NMS at IoU 0.3

    timings = {}
    result = estimate_pose(person_image, manager, score_threshold=0.0, detector_classes=None, max_people=5,
                           timings=timings)
    np.testing.assert_allclose(result.boxes, boxes)
    np.testing.assert_allclose(result.box_scores, scores)
    assert result.notes == []
    assert result.keypoints.shape == (len(boxes), K, 2) and result.keypoint_scores.shape == (len(boxes), K)
    assert set(STAGES) <= set(timings) and timings["forward"] > 0 and timings["detect"] > 0


class _FakeBoxes:
    def __init__(self, xyxy, conf, cls):
        self.xyxy, self.conf, self.cls = (torch.tensor(v, dtype=torch.float32) for v in (xyxy, conf, cls))


class _FakeYolo:
    """Returns fixed boxes regardless of the thresholds; records what predict was asked."""

    def __init__(self, xyxy, conf, cls):
        self.result = type("Result", (), {"boxes": _FakeBoxes(xyxy, conf, cls)})()
        self.calls = []

    def predict(self, image, **kwargs):
        self.calls.append((image, kwargs))
        return [self.result]


class _FakeManager:
    def __init__(self, model):
        self.loaded = LoadedModel(model=model, processor=None, nbytes=0, source="fake", device="cpu")

    def get_detector(self):
        return self.loaded


def test_the_detector_leaves_torchs_threads_as_they_were(person_image, manager):
    """ultralytics sets torch's thread count, the whole process's, when its predictor is made (the first predict of
    a fresh detector, as this manager's): the count the app had must stay, for its other forwards."""
    from ultralytics.utils import NUM_THREADS

    before = torch.get_num_threads()
    wanted = NUM_THREADS + 1  # anything but the count ultralytics sets
    torch.set_num_threads(wanted)
    try:
        detect_people(person_image, manager, score_threshold=0.0, classes=None)
        assert torch.get_num_threads() == wanted
    finally:
        torch.set_num_threads(before)


def test_detector_filtering_rules():
    # person (0) boxes: two overlapping (IoU > 0.3), one low score, one far; a non-person box (class 2)
    fake = _FakeYolo(xyxy=[[0, 0, 100, 200], [5, 5, 105, 205], [300, 0, 400, 200], [200, 0, 260, 100],
                           [500, 0, 600, 100]],
                     conf=[0.9, 0.8, 0.2, 0.6, 0.95], cls=[0, 0, 0, 0, 2])
    image = np.zeros((240, 700, 3), np.uint8)
    image[..., 0] = 255  # red in RGB
    boxes, scores = detect_people(image, _FakeManager(fake))
    np.testing.assert_allclose(boxes, [[0, 0, 100, 200], [200, 0, 260, 100]])
    np.testing.assert_allclose(scores, [0.9, 0.6])
    sent, kwargs = fake.calls[0]
    assert kwargs["classes"] == [0] and kwargs["conf"] == 0.3 and kwargs["iou"] == 0.3  # person only by default
    assert sent[0, 0, 2] == 255 and sent[0, 0, 0] == 0  # ultralytics gets BGR
    boxes, _ = detect_people(image, _FakeManager(fake), max_people=1)
    assert len(boxes) == 1


def test_no_detection_falls_back_to_whole_image(person_image, manager):
    # The random YOLO never scores 0.99; boxes above threshold: none -> whole image, with a note.
    result = estimate_pose(person_image, manager, score_threshold=0.99)
    height, width = person_image.shape[:2]
    np.testing.assert_array_equal(result.boxes, [[0, 0, width, height]])
    np.testing.assert_array_equal(result.box_scores, [1.0])
    assert result.notes == [NO_PERSON_NOTE]
    assert result.keypoints.shape == (1, K, 2)


def test_unavailable_detector_falls_back(tiny_dir, person_image):
    manager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", detector="/nonexistent.pt")
    result = estimate_pose(person_image, manager)
    assert result.num_people == 1
    assert len(result.notes) == 1 and result.notes[0].startswith("Person detector unavailable")
    assert "whole image" in result.notes[0]


def test_user_boxes_skip_the_detector(person_image, manager, monkeypatch):
    monkeypatch.setattr(detector_module, "detect_people", lambda *a, **k: pytest.fail("detector was called"))
    result = estimate_pose(person_image, manager, boxes="[[-20, 50, 200, 480]]")
    np.testing.assert_array_equal(result.boxes, [[0, 50, 200, 480]])  # clipped
    np.testing.assert_array_equal(result.box_scores, [1.0])
    assert result.notes == [] and result.image_size == person_image.shape[:2]
    assert result.keypoints.shape == (1, K, 2) and result.keypoints.dtype == np.float32
    # keypoints land in the person's (padded) crop, in image pixels
    median = np.median(result.keypoints[0], axis=0)
    assert -100 < median[0] < 300 and 0 < median[1] < 560


def test_bad_user_boxes_raise_before_loading(person_image, manager):
    with pytest.raises(ValueError, match="inverted"):
        estimate_pose(person_image, manager, boxes=[[100, 100, 50, 200]])
    assert manager.loaded_keys == []


def twelve_boxes(image):
    height, width = image.shape[:2]
    rng = np.random.default_rng(0)
    x1 = rng.uniform(0, width * 0.7, 12)
    y1 = rng.uniform(0, height * 0.5, 12)
    return np.stack([x1, y1, x1 + rng.uniform(30, width * 0.3, 12), y1 + rng.uniform(60, height * 0.5, 12)], 1)


def test_batching_matches_one_by_one(person_image, manager):
    boxes = twelve_boxes(person_image).tolist()
    batched = estimate_pose(person_image, manager, boxes=boxes, batch_size=8)
    single = estimate_pose(person_image, manager, boxes=boxes, batch_size=1)
    assert batched.keypoints.shape == (12, K, 2)
    np.testing.assert_allclose(batched.keypoint_scores, single.keypoint_scores, rtol=1e-4, atol=1e-5)
    # Random weights give flat heatmaps where a 1e-7 change can move an argmax: nearly all must agree.
    close = np.abs(batched.keypoints - single.keypoints).max(-1) < 0.05
    assert close.mean() > 0.99


@pytest.fixture()
def one_thread():
    """One intra-op thread: random weights give flat heatmaps where a 1e-7 change moves an argmax, and torch's CPU
    kernels round by the threads they split the work over (the pipeline's one batch of crops and flipped crops
    against the reference's two forwards). The test passed in a file run only because an earlier test's detector
    had left the whole process on one thread (ultralytics' predictor did that until pose/detector.threads_kept)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.mark.parametrize("weights", ["random", "standin"])
@pytest.mark.parametrize("road", ["host", "device", "host+reference", "device+reference"])
def test_matches_transformers_post_processing(person_image, weights, road, request, monkeypatch, one_thread):
    """The whole pipeline against the transformers recipe: processor crops, flipped forward, post-process; on
    random and stand-in weights, decoded on the host or on the device (forced here on the CPU, as CUDA takes
    it), and with every keypoint map sent down the reference path."""
    from functools import partial

    from sapiens2_demo.pipelines import device_post
    from sapiens2_demo.pipelines import pose as pipeline

    manager = request.getfixturevalue("manager" if weights == "random" else "standin_manager")
    if road.startswith("device"):
        monkeypatch.setattr(device_post, "use_device_post", lambda device: True)
    if road.endswith("+reference"):
        monkeypatch.setattr(pipeline, "decode_heatmaps", partial(pipeline.decode_heatmaps, force_reference=True))
        monkeypatch.setattr(device_post, "pose_keypoints", partial(device_post.pose_keypoints, force_reference=True))
    boxes = twelve_boxes(person_image)[:3].astype(np.float32)  # float32 like parsed boxes: same crops
    boxes[0] = [30, 10, 370, 512]  # around the astronaut: the stand-ins' peaks are clear there
    result = estimate_pose(person_image, manager, boxes=boxes.tolist())
    loaded = manager.get(checkpoint("pose", "0.4b"))
    xywh = np.concatenate([boxes[:, :2], boxes[:, 2:] - boxes[:, :2]], 1).tolist()
    inputs = loaded.processor(images=np.array(person_image), boxes=[xywh], return_tensors="pt")
    pairs = torch.tensor(loaded.model.config.flip_pairs)
    with torch.inference_mode():
        outputs = loaded.model(pixel_values=inputs["pixel_values"])
        flipped = loaded.model(pixel_values=inputs["pixel_values"].flip(-1), flip_pairs=pairs)
    ref = loaded.processor.post_process_pose_estimation(outputs, boxes=[xywh], outputs_flipped=flipped)[0]
    for person, expected in enumerate(ref):
        np.testing.assert_allclose(result.keypoint_scores[person], expected["scores"].numpy(), rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(result.keypoints[person], expected["keypoints"].numpy(), atol=0.05, rtol=0)


def test_flip_test_runs_the_mirrored_crops_in_the_same_forward(person_image, manager):
    from sapiens2_demo.pipelines.pose import forward_with_flip, model_flip_pairs

    loaded = manager.get(checkpoint("pose", "0.4b"))
    calls = []
    real_forward = loaded.model.forward

    def recording_forward(pixel_values, flip_pairs=None, **kwargs):
        calls.append((pixel_values.clone(), flip_pairs))
        return real_forward(pixel_values, flip_pairs=flip_pairs, **kwargs)

    loaded.model.forward = recording_forward
    try:
        estimate_pose(person_image, manager, boxes=[[10, 10, 200, 400], [50, 60, 300, 300]])
        [(pixel_values, pairs)] = calls  # one forward: 2 crops, then the same 2 mirrored
        assert pixel_values.shape[0] == 4 and pairs is None
        torch.testing.assert_close(pixel_values[2:], pixel_values[:2].flip(-1))
        calls.clear()
        estimate_pose(person_image, manager, boxes=[[10, 10, 200, 400]], flip_test=False)
        assert len(calls) == 1 and calls[0][0].shape[0] == 1
    finally:
        del loaded.model.forward
    # the same heatmaps as the model's own flip test (a second forward with flip_pairs: left/right maps swapped)
    x = pixel_values[:2]
    pairs = model_flip_pairs(loaded.model)
    np.testing.assert_array_equal(pairs.numpy(), flip_pairs_from_indices())
    with torch.inference_mode():
        expected = (loaded.model(pixel_values=x).heatmaps + loaded.model(pixel_values=x.flip(-1), flip_pairs=pairs).heatmaps) / 2
    torch.testing.assert_close(forward_with_flip(loaded, x, pairs), expected, rtol=0,
                               atol=1e-5 * expected.abs().max().item())  # a batch of 4 rounds unlike 2 of 2


def test_flip_pairs_fall_back_to_keypoint_file():
    from sapiens2_demo.pose.meta import keypoint_meta

    pairs = flip_pairs_from_indices()
    flip = np.array(keypoint_meta()["flip_indices"])
    assert len(pairs) == (flip != np.arange(K)).sum() // 2  # self-symmetric points (nose, neck) have no pair
    assert [5, 6] in pairs.tolist() and [41, 62] in pairs.tolist() and [21, 42] in pairs.tolist()
    assert [0, 0] not in pairs.tolist() and [69, 69] not in pairs.tolist()
    np.testing.assert_array_equal(flip[pairs[:, 0]], pairs[:, 1])
    no_config = type("Model", (), {"config": type("Config", (), {"flip_pairs": None})()})()
    np.testing.assert_array_equal(model_flip_pairs(no_config).numpy(), pairs)


def test_flip_changes_the_result(person_image, manager):
    kwargs = dict(boxes=[[10, 10, 200, 400]])
    with_flip = estimate_pose(person_image, manager, **kwargs)
    without = estimate_pose(person_image, manager, flip_test=False, **kwargs)
    assert not np.allclose(with_flip.keypoint_scores, without.keypoint_scores)


def test_image_forms(manager):
    grey = np.full((64, 48), 128, np.uint8)
    assert estimate_pose(grey, manager, boxes=[[0, 0, 48, 64]]).image_size == (64, 48)
    with pytest.raises(ValueError, match="uint8"):
        estimate_pose(np.zeros((64, 48, 3), np.float32), manager)


def _posed(points, scores, image_size=(100, 200)):
    from sapiens2_demo.results import PoseResult

    points, scores = np.asarray(points, np.float32), np.asarray(scores, np.float32)
    return PoseResult(image_size=image_size, boxes=np.zeros((len(points), 4), np.float32),
                      box_scores=np.full(len(points), 0.9, np.float32), keypoints=points, keypoint_scores=scores)


def test_following_a_person_boxes_their_sure_keypoints_grown_and_clipped():
    from sapiens2_demo.pipelines.pose import FOLLOW_MIN_KEYPOINTS, FOLLOW_PAD, follow_people

    points = np.zeros((1, K, 2), np.float32)
    scores = np.zeros((1, K), np.float32)
    points[0, :FOLLOW_MIN_KEYPOINTS] = [[40, 20], [60, 80]] * (FOLLOW_MIN_KEYPOINTS // 2)
    scores[0, :FOLLOW_MIN_KEYPOINTS] = 0.9
    points[0, FOLLOW_MIN_KEYPOINTS] = [190, 99]  # unsure: not part of the box
    followed = follow_people(_posed(points, scores))
    half_w, half_h = 20 * FOLLOW_PAD / 2, 60 * FOLLOW_PAD / 2
    np.testing.assert_allclose(followed.boxes, [[50 - half_w, 50 - half_h, 50 + half_w, 50 + half_h]])
    np.testing.assert_allclose(followed.scores, [0.9])

    points[0, 0] = [0, 0]  # near the corner: the grown box is clipped to the frame
    assert followed.boxes.min() >= 0 and (follow_people(_posed(points, scores)).boxes[0, :2] == 0).all()


def test_a_lost_person_or_nobody_means_detect_again():
    from sapiens2_demo.pipelines.pose import FOLLOW_MIN_KEYPOINTS, follow_people

    scores = np.zeros((1, K), np.float32)
    scores[0, :FOLLOW_MIN_KEYPOINTS - 1] = 0.9
    assert follow_people(_posed(np.full((1, K, 2), 10.0), scores)) is None
    assert follow_people(_posed(np.zeros((0, K, 2)), np.zeros((0, K)))) is None


def test_video_runs_the_detector_on_every_nth_frame_only(person_image, manager, detector_frames):
    """Nine frames, detect_every=4: the detector on frames 0, 4 and 8 while people are followed; the
    followed frames' boxes come from the keypoints before them."""
    from sapiens2_demo.pipelines import pose as pipeline

    detected = detector_frames
    frames = [person_image] * 9
    results = pipeline.follow_pose_batch(frames, manager, detect_every=4, flip_test=False)
    assert len(results) == 9 and sum(detected) == 3
    expected = pipeline.follow_people(results[0]).boxes
    np.testing.assert_allclose(results[1].boxes, expected)

    detected.clear()
    pipeline.follow_pose_batch(frames[:3], manager, detect_every=1, flip_test=False)
    assert sum(detected) == 3  # every frame, as images and live do

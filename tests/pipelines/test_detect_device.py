"""The person detector on the device road (pipelines/detect_device.py) gives ultralytics' own boxes, and its copy back
rides with the next copy back (one wait for both)."""

import numpy as np
import pytest
import torch

from sapiens2_demo import ledger
from sapiens2_demo.pipelines import detect_device
from sapiens2_demo.pipelines.device_post import to_host
from sapiens2_demo.pipelines.riders import Rider
from sapiens2_demo.pose.detector import detect_people_batch

# Both roads run the same fused module on the same letterboxed pixels; only the batch they share a forward with
# differs, so a box may move by float32 rounding of coordinates up to 640 px (2^-24 * 640 ~ 4e-5 per operation).
BOX_TOLERANCE = 1e-3  # px
SCORE_TOLERANCE = 1e-6


@pytest.fixture(autouse=True)
def predict_on_torch(monkeypatch):
    """predict on the torch module, the one the device road runs: on a CPU it would run the ONNX export
    (models/detector_cpu.py), whose float32 sums round otherwise, and the random weights' tied anchors (240 share
    the best score) would then be told apart differently by NMS."""
    monkeypatch.setenv("SAPIENS2_CPU_DETECTOR", "torch")


def _second_score(manager, image, classes) -> float:
    """The second-highest score any anchor gets for `image`: as a threshold it keeps the best anchors only (the
    random-weight detector scores by level: 240 anchors of a 1080p frame's letterboxed 640 x 384 share the best)."""
    net, (_, letterbox) = detect_device._network(manager.get_detector())
    x = torch.from_numpy(letterbox(image=np.ascontiguousarray(image[..., ::-1]))).permute(2, 0, 1)[None]
    with torch.inference_mode():
        raw = net(x.flip(1).float() / 255)[0]
    scores = raw[0, 4:] if classes is None else raw[0, 4:][list(classes)]
    return float(np.unique(scores.max(0).values.numpy())[-2])


def _frames(person_image):
    """The test photo, and a 1080p frame of it tiled (predict's letterbox at a third: a 640 x 384 input)."""
    wide = np.tile(person_image, (3, 4, 1))[:1080, :1920]
    return [person_image, np.ascontiguousarray(person_image[:, ::-1])], [wide, np.ascontiguousarray(wide[::-1])]


@pytest.mark.parametrize("classes", [None, (0,)])
@pytest.mark.parametrize("kept", ["all", "best"])
def test_the_device_detector_gives_predicts_boxes(manager, person_image, classes, kept, monkeypatch):
    """Every anchor above the threshold, or the best: 400 of the photo's (more than cross: every anchor crosses in
    a second copy) and 240 of the 1080p frame's (all of them cross in the first)."""
    seconds = []
    first_host = detect_device._first_host
    monkeypatch.setattr(detect_device, "_first_host", lambda raw: seconds.append(1) or first_host(raw))
    for frames in _frames(person_image):
        threshold = 0.0 if kept == "all" else _second_score(manager, frames[0], classes)
        expected = detect_people_batch(frames, manager, threshold, 0.3, 20, classes)
        found = [get() for get in detect_device.find_people_queued(frames, manager, threshold, 0.3, 20, classes)]
        for (boxes, scores), (got_boxes, got_scores, notes) in zip(expected, found):
            assert len(boxes) > 0 and notes == []
            assert got_boxes.shape == boxes.shape and got_boxes.dtype == np.float32
            np.testing.assert_allclose(got_boxes, boxes, rtol=0, atol=BOX_TOLERANCE)
            np.testing.assert_allclose(got_scores, scores, rtol=0, atol=SCORE_TOLERANCE)
    assert len(seconds) == (2 if kept == "all" else 1)  # the 1080p frames' best crossed in one copy


def test_images_of_several_sizes_get_predicts_boxes(manager, person_image):
    """Images of different sizes in one call: letterboxed to 640 x 640 each, as predict does."""
    frames = [person_image, _frames(person_image)[1][0]]
    expected = detect_people_batch(frames, manager, 0.0, 0.3, 20, None)
    found = [get() for get in detect_device.find_people_queued(frames, manager, 0.0, 0.3, 20, None)]
    for (boxes, scores), (got_boxes, got_scores, _) in zip(expected, found):
        assert len(boxes) > 0 and got_boxes.shape == boxes.shape
        np.testing.assert_allclose(got_boxes, boxes, rtol=0, atol=BOX_TOLERANCE)
        np.testing.assert_allclose(got_scores, scores, rtol=0, atol=SCORE_TOLERANCE)


def test_nobody_found_falls_back_to_the_whole_image(manager, person_image):
    [(boxes, scores, notes)] = [get() for get in detect_device.find_people_queued([person_image], manager, 0.99)]
    height, width = person_image.shape[:2]
    assert boxes.tolist() == [[0, 0, width, height]] and scores.tolist() == [1.0] and len(notes) == 1


def test_the_boxes_ride_with_the_next_copy_back(manager, person_image):
    wide = _frames(person_image)[1][0]
    threshold = _second_score(manager, wide, None)  # 240 candidates: all of them cross
    with ledger.recording() as book:
        [get] = detect_device.find_people_queued([wide], manager, threshold, 0.3, 5, None)
        keypoints = ledger.on_device(torch.arange(6, dtype=torch.float32))
        [host] = to_host([keypoints])
        boxes, _, _ = get()
    assert host.tolist() == list(range(6))
    assert [e.what for e in book.events if e.wait] == ["cpu"], book.table()  # one copy back, one wait
    assert 1 <= len(boxes) <= 5
    with ledger.recording() as book:  # asked for with nothing to ride: a copy of its own
        [get] = detect_device.find_people_queued([person_image], manager, 0.0, 0.3, 5, None)
        get()
    assert book.waits >= 1


def test_a_rider_of_another_dtype_waits_for_its_own_copy():
    rider = Rider(torch.ones(3, dtype=torch.float64))
    [host] = to_host([torch.zeros(2)])
    assert host.tolist() == [0, 0]
    assert rider.host().tolist() == [1, 1, 1]  # not taken by a float32 copy: copied on its own

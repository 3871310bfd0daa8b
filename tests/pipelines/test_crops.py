"""Our person crops (models/crops.py) against the processor's own: equal, with no wait on the device road."""

import numpy as np
import pytest


def _boxes(h, w):
    """Boxes that take both interpolation modes, two frames, one box partly outside the image."""
    return np.float32([[10, 20, 200, 380],      # a person
                       [0, 0, w, h],            # the whole frame
                       [w - 40, h - 60, w + 30, h + 20],  # partly outside
                       [50.5, 60.25, 58.75, 71.5]])  # tiny: upscaled (bicubic)


@pytest.fixture()
def pose_model(manager):
    from sapiens2_demo.models.registry import checkpoint

    return manager.get(checkpoint("pose", "0.4b"))


def test_crops_equal_the_processor(pose_model, person_image):
    from sapiens2_demo.models.crops import _crop_params, crop_people
    from sapiens2_demo.models.inference import input_size, preprocess, upload
    from sapiens2_demo.pose.boxes import xyxy_to_xywh

    frames = [person_image, np.ascontiguousarray(person_image[::-1, ::-1])]
    h, w = person_image.shape[:2]
    boxes = _boxes(h, w)
    owners = [0, 0, 1, 1]
    _, bilinear = _crop_params(boxes, input_size(pose_model.processor))
    assert set(bilinear) == {True, False}  # both of the processor's interpolation modes are compared
    theirs = preprocess(pose_model, frames, "pose", [xyxy_to_xywh(boxes[:2]), xyxy_to_xywh(boxes[2:])])
    ours = crop_people(pose_model, frames, owners, boxes)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    # the same float32 operations in the same order: equal, not close
    assert np.array_equal(ours.numpy(), theirs.numpy())
    uploaded = crop_people(pose_model, upload(frames, "cpu"), owners, boxes)  # the device road's tensors
    assert np.array_equal(uploaded.numpy(), theirs.numpy())
    # frames of two sizes (an API batch): each run's grid from its own frame's size
    frames[1] = np.ascontiguousarray(frames[1][40:, :-30])
    theirs = preprocess(pose_model, frames, "pose", [xyxy_to_xywh(boxes[:2]), xyxy_to_xywh(boxes[2:])])
    for given in (frames, upload(frames, "cpu")):
        assert np.array_equal(crop_people(pose_model, given, owners, boxes).numpy(), theirs.numpy())


def test_modes_are_decided_per_crop():
    from sapiens2_demo.models.crops import _crop_params, _runs

    _, bilinear = _crop_params(np.float32([[0, 0, 2000, 3000], [0, 0, 20, 30], [0, 0, 4000, 10]]), (1024, 768))
    assert bilinear == [True, False, True]  # larger than the input: downscaled; smaller: upscaled
    assert list(_runs([0, 0, 0, 1], [True, False, False, False])) == [(0, 1), (1, 3), (3, 4)]


def test_crops_wait_for_nothing(pose_model, person_image):
    from sapiens2_demo import ledger
    from sapiens2_demo.models.crops import crop_people
    from sapiens2_demo.models.inference import upload

    h, w = person_image.shape[:2]
    with ledger.recording() as book:
        frames = upload([person_image], "cpu")
        crop_people(pose_model, frames, [0, 0], _boxes(h, w)[:2])
    copies_in = [e for e in book.of("h2d") if e.what == "to_device"]
    assert len(copies_in) == 1 and copies_in[0].nbytes == 2 * 6 * 4 and not copies_in[0].wait
    assert book.waits == 0 and not book.of("d2h")


"""SkeletonAnnotator: draws links and circles only where scores pass, face toggle, boxes, no mutation."""

import numpy as np

from sapiens2_demo.pose.meta import keypoint_meta
from sapiens2_demo.render.skeleton import SkeletonAnnotator
from sapiens2_demo.results import PoseResult

K = 308


def one_person(score=0.9, size=(400, 300)):
    height, width = size
    rng = np.random.default_rng(0)
    keypoints = np.stack([rng.uniform(40, width - 40, K), rng.uniform(40, height - 40, K)], 1)[None]
    return PoseResult(image_size=size, boxes=np.array([[20, 20, width - 20, height - 20]], np.float32),
                      box_scores=np.ones(1, np.float32), keypoints=keypoints.astype(np.float32),
                      keypoint_scores=np.full((1, K), score, np.float32))


def test_draws_on_a_copy():
    image = np.zeros((400, 300, 3), np.uint8)
    out = SkeletonAnnotator().annotate(image, one_person())
    assert out.shape == image.shape and out.dtype == np.uint8
    assert image.max() == 0 and out.max() > 0


def test_low_scores_are_hidden():
    image = np.zeros((400, 300, 3), np.uint8)
    annotator = SkeletonAnnotator()
    hidden = annotator.annotate(image, one_person(score=0.2), keypoint_threshold=0.3, show_boxes=False)
    assert hidden.max() == 0
    shown = annotator.annotate(image, one_person(score=0.2), keypoint_threshold=0.1, show_boxes=False)
    assert shown.max() > 0


def test_link_needs_both_endpoints():
    result = one_person(score=0.0)
    result.keypoints[0, 5] = [50, 200]  # left shoulder
    result.keypoints[0, 6] = [250, 200]  # right shoulder, linked to 5
    result.keypoint_scores[0, 5] = 0.9
    image = np.zeros((400, 300, 3), np.uint8)
    annotator = SkeletonAnnotator()
    one = annotator.annotate(image, result, show_boxes=False)
    assert one[200, 150].max() == 0  # midpoint of the link: not drawn
    result.keypoint_scores[0, 6] = 0.9
    both = annotator.annotate(image, result, show_boxes=False)
    link = [tuple(pair) for pair in keypoint_meta()["skeleton_links"]].index((5, 6))
    column = both[195:206, 150].astype(int)  # anti-aliased: the brightest pixel across the line
    brightest, color = column[column.sum(1).argmax()], np.array(keypoint_meta()["skeleton_link_colors"][link])
    assert brightest.max() > 200  # RGB as given, not swapped to BGR (anti-aliasing only dims it a little)
    np.testing.assert_allclose(brightest / brightest.max(), color / color.max(), atol=0.03)


def test_face_toggle_and_boxes():
    result = one_person()
    result.keypoint_scores[0, :70] = 0.0  # only face points visible
    image = np.zeros((400, 300, 3), np.uint8)
    annotator = SkeletonAnnotator()
    assert annotator.annotate(image, result, show_face=True, show_boxes=False).max() > 0
    assert annotator.annotate(image, result, show_face=False, show_boxes=False).max() == 0
    boxed = annotator.annotate(image, result, show_face=False, show_boxes=True)
    assert boxed[200, 20].max() > 0  # left edge of the box


def test_odd_inputs_do_not_crash():
    result = one_person()
    result.keypoints[0, :10] = np.nan
    result.keypoints[0, 10:20] = 1e12
    out = SkeletonAnnotator().annotate(np.zeros((50, 40, 3), np.uint8), result)
    assert out.shape == (50, 40, 3)
    empty = PoseResult((50, 40), np.zeros((0, 4), np.float32), np.zeros(0, np.float32),
                       np.zeros((0, K, 2), np.float32), np.zeros((0, K), np.float32))
    assert SkeletonAnnotator().annotate(np.zeros((50, 40, 3), np.uint8), empty).max() == 0

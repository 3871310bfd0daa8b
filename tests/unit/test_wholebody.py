"""COCO-WholeBody export: part order and mapping checked by name against the reference keypoints308.json."""

import json
from pathlib import Path

import numpy as np
import pytest

from sapiens2_demo.export.pose_formats import to_coco17
from sapiens2_demo.export.pose_wholebody import WHOLEBODY_INDICES, to_coco_wholebody, write_coco_wholebody
from sapiens2_demo.results import PoseResult

# read directly, not through the package's metadata module, so the test does not trust the code it checks
KEYPOINTS_JSON = Path(__file__).resolve().parents[2] / "sapiens2_demo" / "data" / "keypoints308.json"
NAMES = json.loads(KEYPOINTS_JSON.read_text())["names"]
FINGERS = ["thumb", "forefinger", "middle_finger", "ring_finger", "pinky_finger"]
PARTS = {"keypoints": 17, "foot_kpts": 6, "face_kpts": 68, "lefthand_kpts": 21, "righthand_kpts": 21}


def triples(flat) -> np.ndarray:
    return np.asarray(flat, dtype=np.float64).reshape(-1, 3)


def expected_hand(side: str) -> list[str]:
    """Hand root = wrist, then each finger from the palm out: the 308 set's third_joint, 2, 3, 4 (tip)."""
    return [f"{side}_wrist"] + [f"{side}_{f}{j}" for f in FINGERS for j in ("_third_joint", "2", "3", "4")]


@pytest.fixture()
def result() -> PoseResult:
    rng = np.random.default_rng(0)
    n, k = 2, len(NAMES)
    return PoseResult(image_size=(480, 640),
                      boxes=np.array([[10, 20, 200, 400], [300, 40, 600, 470]], np.float32),
                      box_scores=np.array([0.9, 0.8], np.float32),
                      keypoints=rng.uniform(0, 480, (n, k, 2)).astype(np.float32),
                      keypoint_scores=rng.uniform(0, 1, (n, k)).astype(np.float32))


def test_indices_cover_133_with_an_unmapped_face():
    assert len(WHOLEBODY_INDICES) == 133
    assert WHOLEBODY_INDICES[23:91] == [-1] * 68
    assert all(0 <= i < len(NAMES) for i in WHOLEBODY_INDICES[:23] + WHOLEBODY_INDICES[91:])


def test_body_equals_the_coco17_export(result):
    whole, coco = to_coco_wholebody(result), to_coco17(result)
    assert whole["images"] == coco["images"]
    for a, b in zip(whole["annotations"], coco["annotations"], strict=True):
        for key in ("keypoints", "bbox", "score", "num_keypoints", "id", "image_id", "category_id"):
            assert a[key] == b[key], key


@pytest.mark.parametrize("part, names", [
    ("foot_kpts", ["left_big_toe", "left_small_toe", "left_heel", "right_big_toe", "right_small_toe", "right_heel"]),
    ("lefthand_kpts", expected_hand("left")),
    ("righthand_kpts", expected_hand("right")),
])
def test_feet_and_hands_by_name(result, part, names):
    threshold = 0.3
    document = to_coco_wholebody(result, threshold)
    for person, annotation in enumerate(document["annotations"]):
        got = triples(annotation[part])
        rows = [NAMES.index(name) for name in names]
        np.testing.assert_allclose(got[:, :2], result.keypoints[person, rows], atol=1e-3)
        scores = result.keypoint_scores[person, rows]
        np.testing.assert_array_equal(got[:, 2], np.where(scores >= threshold, 2, 1))  # COCO-17's rule


def test_parts_total_133_and_face_is_unlabelled(result):
    for annotation in to_coco_wholebody(result)["annotations"]:
        assert {part: len(annotation[part]) // 3 for part in PARTS} == PARTS
        assert sum(len(annotation[part]) for part in PARTS) == 133 * 3
        assert annotation["face_kpts"] == [0] * 68 * 3
        assert annotation["face_valid"] is False and annotation["face_box"] == [0, 0, 0, 0]


def test_valid_flags_and_part_boxes(result):
    result.keypoint_scores[0] = 0.0  # person 1: nothing confident
    result.keypoint_scores[1] = 1.0  # person 2: everything confident
    quiet, sure = to_coco_wholebody(result)["annotations"]
    for key in ("foot_valid", "lefthand_valid", "righthand_valid"):
        assert quiet[key] is False and sure[key] is True
    assert quiet["lefthand_box"] == [0, 0, 0, 0]
    hand = triples(sure["righthand_kpts"])[:, :2]
    x, y, w, h = sure["righthand_box"]
    np.testing.assert_allclose([x, y, x + w, y + h], [*hand.min(0), *hand.max(0)], atol=0.02)


def test_no_people_gives_an_empty_valid_document(tmp_path):
    empty = PoseResult(image_size=(100, 200), boxes=np.zeros((0, 4), np.float32),
                       box_scores=np.zeros(0, np.float32), keypoints=np.zeros((0, len(NAMES), 2), np.float32),
                       keypoint_scores=np.zeros((0, len(NAMES)), np.float32))
    path = write_coco_wholebody(empty, tmp_path)
    document = json.loads(path.read_text())
    assert document["annotations"] == []
    assert document["images"] == [{"id": 1, "width": 200, "height": 100}]
    assert path.name == "pose_coco_wholebody.json" and not list(tmp_path.glob("*.partial"))


def test_written_file_matches_the_document(result, tmp_path):
    path = write_coco_wholebody(result, tmp_path / "out", name="people.json")
    assert json.loads(path.read_text()) == json.loads(json.dumps(to_coco_wholebody(result)))

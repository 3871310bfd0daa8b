"""Exports: name-derived mappings, the three JSON files, and write/read round trips."""

import json

import numpy as np

from sapiens2_demo.export.pose_formats import (
    BODY25_NAMES,
    COCO17_NAMES,
    body25_indices,
    coco17_indices,
    hand21_indices,
    openpose_arrays,
    read_coco17,
    read_official_json,
    read_openpose,
    to_coco17,
    to_official_json,
    to_openpose,
    write_exports,
)
from sapiens2_demo.pose.meta import keypoint_meta, keypoint_names
from sapiens2_demo.results import PoseResult

K = 308


def make_result(n=3, seed=0):
    rng = np.random.default_rng(seed)
    keypoints = rng.uniform(0, 500, (n, K, 2)).astype(np.float32)
    scores = rng.uniform(0, 1.2, (n, K)).astype(np.float32)
    boxes = np.array([[10 + i, 20, 200 + i, 400] for i in range(n)], np.float32)
    return PoseResult(image_size=(480, 640), boxes=boxes, box_scores=np.linspace(0.9, 0.5, n).astype(np.float32),
                      keypoints=keypoints, keypoint_scores=scores)


def test_coco17_order_is_the_reference_one():
    assert coco17_indices() == [0, 1, 2, 3, 4, 5, 6, 7, 8, 62, 41, 9, 10, 11, 12, 13, 14]


def test_body25_mapping_from_names():
    names = keypoint_names()
    index = body25_indices()
    assert len(index) == 25 and index[8] == -1  # mid hip is computed
    assert index[1] == 69 and names[69] == "neck"
    assert [names[i] for i in index if i >= 0] == [n for n in BODY25_NAMES if n != "mid_hip"]
    assert index[4] == 41 and index[7] == 62  # right wrist, left wrist (308 order is not COCO's)
    assert [names[i] for i in index[19:]] == ["left_big_toe", "left_small_toe", "left_heel", "right_big_toe",
                                              "right_small_toe", "right_heel"]


def test_hand_order_follows_the_skeleton_from_wrist_to_tip():
    links = [tuple(link) for link in keypoint_meta()["skeleton_links"]]
    for side in ("left", "right"):
        hand = hand21_indices(side)
        names = [keypoint_names()[i] for i in hand]
        assert names[0] == f"{side}_wrist"
        assert all(name.startswith(side) for name in names)
        for finger in range(5):  # OpenPose: wrist -> joint 1 -> 2 -> 3 -> 4 (tip) for each finger
            chain = [hand[0]] + hand[1 + 4 * finger: 5 + 4 * finger]
            for a, b in zip(chain, chain[1:]):
                assert (a, b) in links or (b, a) in links, (side, finger, keypoint_names()[a], keypoint_names()[b])
        assert "thumb" in names[1] and "forefinger" in names[5] and "pinky" in names[20]
        assert names[4].endswith("thumb4")  # the tip


def test_official_json_schema():
    result = make_result()
    doc = to_official_json(result, keypoint_threshold=0.3)
    assert doc["image_size"] == [480, 640] and doc["num_keypoints"] == K and doc["kpt_thr_used"] == 0.3
    assert doc["keypoint_names"] == keypoint_names()
    inst = doc["instances"][1]
    assert set(inst) == {"bbox", "bbox_score", "keypoints", "keypoint_scores"}
    assert inst["bbox"] == [11.0, 20.0, 201.0, 400.0]
    assert len(inst["keypoints"]) == K and len(inst["keypoint_scores"]) == K  # low scores kept too
    json.dumps(doc, allow_nan=False)


def test_coco17_visibility_and_layout():
    result = make_result()
    result.keypoint_scores[0, 62] = 0.1  # left wrist, COCO slot 9
    result.keypoint_scores[0, 41] = 0.9  # right wrist, COCO slot 10
    doc = to_coco17(result, keypoint_threshold=0.3)
    ann = doc["annotations"][0]
    assert doc["categories"][0]["keypoints"] == COCO17_NAMES and len(ann["keypoints"]) == 51
    triples = np.array(ann["keypoints"]).reshape(17, 3)
    assert triples[9, 2] == 1 and triples[10, 2] == 2
    np.testing.assert_allclose(triples[9, :2], result.keypoints[0, 62], atol=1e-3)
    assert ann["bbox"] == [10.0, 20.0, 190.0, 380.0] and ann["num_keypoints"] == int((triples[:, 2] == 2).sum())


def test_openpose_layout():
    result = make_result(n=1)
    names = {name: i for i, name in enumerate(keypoint_names())}
    result.keypoint_scores[0, [names["left_hip"], names["right_hip"]]] = [0.8, 0.5]
    result.keypoint_scores[0, names["neck"]] = 1.3  # > 1: written clipped to 1
    result.keypoint_scores[0, names["left_eye"]] = 0.1  # hidden
    result.keypoint_scores[0, [41, names["right_pinky_finger4"]]] = [0.7, 0.9]
    doc = to_openpose(result, keypoint_threshold=0.3)
    person = doc["people"][0]
    assert len(person["pose_keypoints_2d"]) == 75 and len(person["hand_left_keypoints_2d"]) == 63
    assert len(person["hand_right_keypoints_2d"]) == 63 and person["face_keypoints_2d"] == []
    pose = np.array(person["pose_keypoints_2d"]).reshape(25, 3)
    hips = result.keypoints[0, [names["left_hip"], names["right_hip"]]]
    np.testing.assert_allclose(pose[8], [*hips.mean(0), 0.5], atol=1e-3)
    np.testing.assert_allclose(pose[1], [*result.keypoints[0, 69], 1.0], atol=1e-3)
    np.testing.assert_array_equal(pose[16], [0, 0, 0])  # left eye under threshold
    right = np.array(person["hand_right_keypoints_2d"]).reshape(21, 3)
    np.testing.assert_allclose(right[0], [*result.keypoints[0, 41], 0.7], atol=1e-3)  # wrist
    np.testing.assert_allclose(right[20], [*result.keypoints[0, names["right_pinky_finger4"]], 0.9], atol=1e-3)


def test_write_and_read_back(tmp_path):
    result = make_result(n=4)
    result.keypoints[2, 7] = np.nan  # a degenerate heatmap must still give valid JSON
    paths = write_exports(result, tmp_path / "out", stem="photo", keypoint_threshold=0.4)
    assert set(paths) == {"official", "coco17", "openpose"} and all(p.is_file() for p in paths.values())
    for path in paths.values():
        json.loads(path.read_text())  # strict JSON: no NaN tokens

    back = read_official_json(paths["official"])
    assert back.image_size == (480, 640) and back.num_people == 4
    np.testing.assert_allclose(back.boxes, result.boxes, atol=1e-2)
    np.testing.assert_allclose(back.box_scores, result.box_scores, atol=1e-4)
    np.testing.assert_allclose(back.keypoints, result.keypoints, atol=1e-3)  # NaN == NaN here
    np.testing.assert_allclose(back.keypoint_scores, result.keypoint_scores, atol=1e-4)

    keypoints, visibility, boxes = read_coco17(paths["coco17"])
    idx = coco17_indices()
    np.testing.assert_allclose(keypoints, result.keypoints[:, idx], atol=1e-3)
    np.testing.assert_array_equal(visibility, np.where(result.keypoint_scores[:, idx] >= 0.4, 2, 1))
    np.testing.assert_allclose(boxes, result.boxes, atol=1e-2)

    arrays = read_openpose(paths["openpose"])
    expected = openpose_arrays(result, keypoint_threshold=0.4)
    for key in ("pose", "hand_left", "hand_right"):
        np.testing.assert_allclose(arrays[key], expected[key], atol=1e-3)


def test_empty_result_round_trip(tmp_path):
    empty = PoseResult((10, 20), np.zeros((0, 4), np.float32), np.zeros(0, np.float32),
                       np.zeros((0, K, 2), np.float32), np.zeros((0, K), np.float32))
    paths = write_exports(empty, tmp_path)
    assert read_official_json(paths["official"]).num_people == 0
    assert read_coco17(paths["coco17"])[0].shape == (0, 17, 2)
    assert read_openpose(paths["openpose"])["pose"].shape == (0, 25, 3)

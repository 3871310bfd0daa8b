"""pose/lift.py (2D keypoints + pointmap -> 3D) and export/pose3d.py (its JSON and skeleton GLB)."""

import json

import numpy as np
import pytest
import trimesh

from sapiens2_demo.export.image import NothingToExport
from sapiens2_demo.export.pose3d import (
    pose3d_document,
    skeleton_bones,
    skeleton_mesh,
    write_pose3d_json,
    write_skeleton_glb,
)
from sapiens2_demo.pose.lift import Pose3DResult, lift_keypoints
from sapiens2_demo.pose.meta import FACE_START, NUM_KEYPOINTS, keypoint_meta, keypoint_names
from sapiens2_demo.results import PointmapResult, PoseResult

FOCAL = 500.0
HEIGHT, WIDTH = 200, 300


def plane_points(depth_of_column=lambda u: 2 + 0.001 * u) -> np.ndarray:
    """Pinhole (f = 500, centre principal point) pointmap whose depth depends on the column u."""
    v, u = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float64)
    z = depth_of_column(u)
    return np.stack([(u - WIDTH / 2) / FOCAL * z, (v - HEIGHT / 2) / FOCAL * z, z], axis=-1).astype(np.float32)


def pointmap(points: np.ndarray, mask: np.ndarray | None = None) -> PointmapResult:
    return PointmapResult(points=points, scale=1.0, focal_length=FOCAL, mask=mask)


def pose_at(pixels, scores=None, track_ids=None) -> PoseResult:
    """One person per row of `pixels` (N, K, 2)."""
    keypoints = np.asarray(pixels, dtype=np.float32)
    people, count = keypoints.shape[:2]
    scores = np.ones((people, count), np.float32) if scores is None else np.asarray(scores, np.float32)
    return PoseResult(image_size=(HEIGHT, WIDTH), boxes=np.zeros((people, 4), np.float32),
                      box_scores=np.ones(people, np.float32), keypoints=keypoints, keypoint_scores=scores,
                      track_ids=track_ids)


def random_pixels(people: int, seed: int = 0, margin: int = 5) -> np.ndarray:
    """Integer pixels at least `margin` from the border, so the default window is whole."""
    rng = np.random.default_rng(seed)
    return np.stack([rng.integers(margin, WIDTH - margin, (people, NUM_KEYPOINTS)),
                     rng.integers(margin, HEIGHT - margin, (people, NUM_KEYPOINTS))], axis=-1)


# -- lifting --------------------------------------------------------------------------------------

def test_lifted_points_are_the_plane_at_the_keypoints():
    points = plane_points()
    pixels = random_pixels(2)
    result = lift_keypoints(pose_at(pixels), pointmap(points))
    assert result.points.shape == (2, NUM_KEYPOINTS, 3) and result.points.dtype == np.float32
    assert result.available.all()
    np.testing.assert_allclose(result.points, points[pixels[..., 1], pixels[..., 0]], atol=1e-3)
    np.testing.assert_array_equal(result.scores, np.ones((2, NUM_KEYPOINTS), np.float32))


def test_a_covered_keypoint_keeps_its_ray():
    """Keypoints behind someone 2 m nearer (columns 100-160) read the cover's depth: not available, and `covered`
    holds the point read there, on the keypoint's own pixel ray (the mocap path places it along that ray)."""
    points = plane_points(lambda u: np.where((u >= 100) & (u < 160), 2.0, 4.0))
    pixels = random_pixels(1, seed=3, margin=8)
    pixels[0, :5, 0] = [120, 125, 130, 135, 140]  # five keypoints well inside the cover
    pixels[0, 5:, 0] = np.where((pixels[0, 5:, 0] >= 90) & (pixels[0, 5:, 0] < 170), 60, pixels[0, 5:, 0])
    result = lift_keypoints(pose_at(pixels), pointmap(points))
    hidden = np.zeros(NUM_KEYPOINTS, bool)
    hidden[:5] = True
    assert result.available[0].tolist() == (~hidden).tolist()
    assert np.isfinite(result.covered[0, hidden]).all() and np.isnan(result.covered[0, ~hidden]).all()
    ray = (pixels[0, hidden] - [WIDTH / 2, HEIGHT / 2]) / FOCAL
    np.testing.assert_allclose(result.covered[0, hidden, :2] / result.covered[0, hidden, 2:], ray, atol=1e-4)
    np.testing.assert_allclose(result.covered[0, hidden, 2], 2.0, atol=1e-6)


def test_keypoints_at_the_border_use_the_clipped_window():
    points = plane_points()
    corners = np.array([[[0, 0], [WIDTH - 1, 0], [0, HEIGHT - 1], [WIDTH - 1, HEIGHT - 1]]])
    result = lift_keypoints(pose_at(corners), pointmap(points))
    assert result.available.all()
    # the median of a one-sided window sits a few pixels inwards: ~2.5 px x 4 mm here
    np.testing.assert_allclose(result.points[0], points[corners[0, :, 1], corners[0, :, 0]], atol=0.02)


def test_keypoint_outside_mask_or_image_is_not_available():
    mask = np.ones((HEIGHT, WIDTH), bool)
    mask[50:100, 100:200] = False
    pixels = [[[150, 75], [20, 20], [-5, 10], [WIDTH + 3, 10], [np.nan, 5]]]
    for result in (lift_keypoints(pose_at(pixels), pointmap(plane_points(), mask)),  # the pointmap's own mask
                   lift_keypoints(pose_at(pixels), pointmap(plane_points()), mask)):  # an explicit one
        assert result.available.tolist() == [[False, True, False, False, False]]
        assert np.isnan(result.points[0, [0, 2, 3, 4]]).all() and np.isfinite(result.points[0, 1]).all()


def test_low_score_keypoint_is_not_available():
    result = lift_keypoints(pose_at([[[30, 30], [60, 60]]], scores=[[0.29, 0.3]]), pointmap(plane_points()))
    assert result.available.tolist() == [[False, True]]
    assert result.scores[0, 0] == pytest.approx(0.29)


def test_keypoint_on_a_depth_step_is_not_available():
    points = plane_points(lambda u: np.where(u < WIDTH // 2, 2.0, 3.0))
    result = lift_keypoints(pose_at([[[WIDTH // 2, 100], [WIDTH // 2 - 20, 100], [WIDTH // 2 + 20, 100]]]),
                            pointmap(points))
    assert result.available.tolist() == [[False, True, True]]
    assert result.points[0, 1, 2] == pytest.approx(2.0) and result.points[0, 2, 2] == pytest.approx(3.0)


def test_too_few_valid_samples_is_not_available():
    points = plane_points()
    points[::2] = np.nan  # every other row invalid ...
    points[:, ::2] = np.nan  # ... and every other column: 25 of 121 samples valid (< 25 %)
    result = lift_keypoints(pose_at([[[101, 101]]]), pointmap(points))
    assert result.available.tolist() == [[False]]


@pytest.mark.parametrize("keypoints", [np.zeros((0, 0, 2)), np.zeros((0, NUM_KEYPOINTS, 2))])
def test_no_people_gives_empty_arrays(keypoints):
    pose = PoseResult(image_size=(HEIGHT, WIDTH), boxes=np.zeros((0, 4), np.float32),
                      box_scores=np.zeros(0, np.float32), keypoints=keypoints.astype(np.float32),
                      keypoint_scores=np.zeros(keypoints.shape[:2], np.float32))
    result = lift_keypoints(pose, pointmap(plane_points()))
    assert result.points.shape == (0, NUM_KEYPOINTS, 3)
    assert result.available.shape == result.scores.shape == (0, NUM_KEYPOINTS)


def test_size_mismatch_is_refused():
    with pytest.raises(ValueError):
        lift_keypoints(pose_at(random_pixels(1)), pointmap(plane_points()[:100]))


def test_the_device_twin_lifts_what_the_host_lifts():
    """pose.lift.lift_on_device (the video's lift where the pointmap is) against lift_keypoints on one hard map:
    noise, a depth step, holes, a mask, keypoints at the border, outside, unsure, between pixels and not finite,
    and a person in front of another. Equal to the bit: the same float64 sort and interpolation on both sides."""
    import torch

    from sapiens2_demo.pose.lift import lift_on_device

    rng = np.random.default_rng(3)
    points = plane_points(lambda u: np.where(u < WIDTH // 2, 2.0, 2.6) + 0.001 * u)
    points += rng.normal(0, 0.02, points.shape).astype(np.float32)  # spreads around max_spread (0.1 m) somewhere
    points[rng.random((HEIGHT, WIDTH)) < 0.5, 2] = np.nan  # holes: some windows have too few samples
    points[40:60, 200:260, 2] = -1.0  # behind the camera
    mask = np.ones((HEIGHT, WIDTH), bool)
    mask[120:170, 20:90] = False
    pixels = rng.uniform(-10, [WIDTH + 10, HEIGHT + 10], (3, NUM_KEYPOINTS, 2))
    pixels[0, :4] = [[0, 0], [WIDTH - 1, HEIGHT - 1], [np.nan, 5], [1e12, 3]]
    scores = rng.uniform(0, 1, (3, NUM_KEYPOINTS))
    pose = pose_at(pixels, scores=scores, track_ids=np.array([1, 2, 3]))
    pose.boxes = np.array([[0, 0, WIDTH, HEIGHT], [0, 0, WIDTH / 2, HEIGHT], [10, 10, 50, 50]], np.float32)
    nobody = pose_at(np.zeros((0, NUM_KEYPOINTS, 2)))
    for given in (mask, None):
        host = lift_keypoints(pose, pointmap(points, given))
        device_mask = None if given is None else torch.from_numpy(given)
        empty, device, again = lift_on_device([nobody, pose, pose], [torch.from_numpy(points)] * 3, [device_mask] * 3)
        assert empty.points.shape == (0, NUM_KEYPOINTS, 3) and not empty.available.size
        np.testing.assert_array_equal(again.points, device.points)  # each frame's rows of the one copy back
        assert 0.2 < host.available.mean() < 0.8  # both kinds, many of each
        np.testing.assert_array_equal(device.available, host.available)
        np.testing.assert_array_equal(device.points, host.points)
        np.testing.assert_array_equal(device.scores, host.scores)
        np.testing.assert_array_equal(device.track_ids, host.track_ids)


def test_the_lift_from_keypoints_still_on_the_device_is_the_hosts():
    """sample_people_on_device (the keypoints sampled before they cross, in the keypoints' copy) against
    lift_keypoints on the hard map above: keypoints half way between pixels (rounded half to even on both sides),
    outside, unsure, not finite; frames with nobody between."""
    import torch

    from sapiens2_demo.pose.lift import lifted_from_sampled, sample_people_on_device

    rng = np.random.default_rng(4)
    points = plane_points(lambda u: np.where(u < WIDTH // 2, 2.0, 2.6) + 0.001 * u)
    points += rng.normal(0, 0.02, points.shape).astype(np.float32)
    points[rng.random((HEIGHT, WIDTH)) < 0.5, 2] = np.nan
    pixels = rng.uniform(-10, [WIDTH + 10, HEIGHT + 10], (2, NUM_KEYPOINTS, 2))
    pixels[0, :5] = [[10.5, 20.5], [11.5, 21.5], [WIDTH - 0.5, 3], [np.nan, 5], [np.inf, 3]]
    scores = rng.uniform(0, 1, (2, NUM_KEYPOINTS))
    pose = pose_at(pixels, scores=scores, track_ids=np.array([1, 2]))
    pose.boxes = np.array([[0, 0, WIDTH, HEIGHT], [0, 0, WIDTH / 2, HEIGHT]], np.float32)
    nobody = pose_at(np.zeros((0, NUM_KEYPOINTS, 2)))
    mask = np.ones((HEIGHT, WIDTH), bool)
    mask[120:170, 20:90] = False
    host = lift_keypoints(pose, pointmap(points, mask))
    frames = [nobody, pose, nobody, pose]
    keypoints = torch.from_numpy(np.concatenate([np.asarray(p.keypoints, np.float32) for p in frames]))
    sure = torch.from_numpy(np.concatenate([np.asarray(p.keypoint_scores, np.float32) for p in frames]))
    sampled = sample_people_on_device(keypoints, sure, [p.num_people for p in frames],
                                      [torch.from_numpy(points)] * 4, [torch.from_numpy(mask)] * 4)
    lifted = lifted_from_sampled(frames, sampled.numpy())
    assert lifted[0].points.shape == (0, NUM_KEYPOINTS, 3) and 0.2 < host.available.mean() < 0.8
    for device in (lifted[1], lifted[3]):
        np.testing.assert_array_equal(device.available, host.available)
        np.testing.assert_array_equal(device.points, host.points)
        np.testing.assert_array_equal(device.scores, host.scores)


def hard_map(seed: int, height: int = HEIGHT, width: int = WIDTH) -> np.ndarray:
    """The hard map above (a depth step, noise, holes), of its own seed and size."""
    rng = np.random.default_rng(seed)
    points = plane_points(lambda u: np.where(u < WIDTH // 2, 2.0 + 0.1 * seed, 2.6) + 0.001 * u)[:height, :width]
    points = points + rng.normal(0, 0.02, points.shape).astype(np.float32)
    points[rng.random((height, width)) < 0.5, 2] = np.nan
    return points


def test_each_frame_of_a_batch_is_lifted_in_its_own_map():
    """The device lifts sample a batch's frames in one pass (pose.lift._sample_frames): each frame's keypoints still
    read its own pointmap and mask, across frames with nobody and frames of another size (a run of their own)."""
    import torch

    from sapiens2_demo.pose.lift import lift_on_device, lifted_from_sampled, sample_people_on_device

    rng = np.random.default_rng(6)
    small = (150, 250)
    maps = [hard_map(0), None, hard_map(1), hard_map(2, *small), hard_map(3)]
    masks = [np.ones((HEIGHT, WIDTH), bool), None, None, np.ones(small, bool), np.ones((HEIGHT, WIDTH), bool)]
    masks[0][100:160, 10:120] = False
    masks[3][:40] = False
    poses = []
    for points in maps:
        people = 0 if points is None else int(rng.integers(1, 4))
        pixels = rng.uniform(-10, [WIDTH + 10, HEIGHT + 10], (people, NUM_KEYPOINTS, 2))
        pose = pose_at(pixels, scores=rng.uniform(0, 1, (people, NUM_KEYPOINTS)))
        pose.boxes = np.tile(np.array([[0, 0, WIDTH / 2, HEIGHT]], np.float32), (people, 1))
        if points is not None:
            pose.image_size = points.shape[:2]
        poses.append(pose)
    host = [None if points is None else lift_keypoints(pose, pointmap(points, mask))
            for pose, points, mask in zip(poses, maps, masks)]
    device_maps = [torch.from_numpy(points if points is not None else hard_map(9)) for points in maps]
    device_masks = [None if mask is None else torch.from_numpy(mask) for mask in masks]
    lifted = lift_on_device(poses, device_maps, device_masks)
    keypoints = torch.from_numpy(np.concatenate([np.asarray(p.keypoints, np.float32) for p in poses]))
    sure = torch.from_numpy(np.concatenate([np.asarray(p.keypoint_scores, np.float32) for p in poses]))
    sampled = sample_people_on_device(keypoints, sure, [p.num_people for p in poses], device_maps, device_masks)
    before_crossing = lifted_from_sampled(poses, sampled.numpy())
    for expected, one, other in zip(host, lifted, before_crossing):
        if expected is None:
            assert one.points.shape == other.points.shape == (0, NUM_KEYPOINTS, 3)
            continue
        assert 0.1 < expected.available.mean() < 0.9  # both kinds
        for got in (one, other):
            np.testing.assert_array_equal(got.available, expected.available)
            np.testing.assert_array_equal(got.points, expected.points)


def test_heatmap_to_image_on_the_device_is_the_hosts_to_the_bit():
    import torch

    from sapiens2_demo.pose.decode import heatmap_to_image, heatmap_to_image_on_device

    rng = np.random.default_rng(5)
    coords = rng.uniform(-2, 200, (6, NUM_KEYPOINTS, 2)).astype(np.float32)
    corner = rng.uniform(0, 1500, (6, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(5, 600, (6, 2))], 1).astype(np.float32)
    host = heatmap_to_image(coords, boxes, (1024, 768), (256, 192))
    device = heatmap_to_image_on_device(torch.from_numpy(coords), boxes, (1024, 768), (256, 192))
    assert device.dtype == torch.float32
    np.testing.assert_array_equal(device.numpy(), host)


# -- export ---------------------------------------------------------------------------------------

@pytest.fixture()
def lifted() -> Pose3DResult:
    scores = np.ones((2, NUM_KEYPOINTS), np.float32)
    scores[1, ::3] = 0.1  # a third of the second person's keypoints are not available
    return lift_keypoints(pose_at(random_pixels(2), scores=scores, track_ids=np.array([4, -1])),
                          pointmap(plane_points()))


def test_json_document(tmp_path, lifted):
    path = write_pose3d_json(lifted, tmp_path, keypoint_names())
    assert path.name == "pose_3d.json" and sorted(p.name for p in tmp_path.iterdir()) == ["pose_3d.json"]
    document = json.loads(path.read_text())
    assert document["units"] == "metres" and "z forward" in document["camera"]
    assert document["num_keypoints"] == NUM_KEYPOINTS and document["keypoint_names"] == keypoint_names()
    values = np.array([person["keypoints"] for person in document["people"]], dtype=object)
    assert values.shape == (2, NUM_KEYPOINTS, 4)
    assert [person["track_id"] for person in document["people"]] == [4, -1]
    missing = np.vectorize(lambda v: v is None)(values[..., :3]).all(axis=2)
    np.testing.assert_array_equal(missing, ~lifted.available)
    assert lifted.available[0].all() and not lifted.available[1, ::3].any()
    np.testing.assert_allclose(values[0, :, :3].astype(float), lifted.points[0], atol=1e-5)
    assert values[1, 0, 3] == pytest.approx(0.1)  # the score stays even where the point is missing


def test_json_without_people_or_tracks():
    empty = Pose3DResult(points=np.zeros((0, 3, 3), np.float32), scores=np.zeros((0, 3), np.float32),
                         available=np.zeros((0, 3), bool))
    document = pose3d_document(empty, ["a", "b", "c"])
    assert document["people"] == [] and document["num_keypoints"] == 3
    json.dumps(document, allow_nan=False)


def test_skeleton_glb_opens_with_faces_and_colours(tmp_path, lifted):
    path = write_skeleton_glb(lifted, tmp_path)
    assert path.name == "pose_3d.glb" and sorted(p.name for p in tmp_path.iterdir()) == ["pose_3d.glb"]
    loaded = trimesh.load(path, force="mesh")
    assert len(loaded.faces) > 0
    assert np.asarray(loaded.visual.vertex_colors).shape == (len(loaded.vertices), 4)
    assert loaded.vertices[:, 2].max() < 0  # glTF frame: in front of the camera is -z


def test_skeleton_uses_body_links_and_only_available_joints(lifted):
    bones = skeleton_bones()
    assert bones and all(a < FACE_START and b < FACE_START for a, b in bones)
    full = skeleton_mesh(lifted, bones)
    one = Pose3DResult(points=lifted.points[:1], scores=lifted.scores[:1], available=lifted.available[:1])
    single = skeleton_mesh(one, bones)
    assert len(single.faces) < len(full.faces) < 2 * len(single.faces)  # person 2 lost joints and bones


def test_one_bone_is_two_outward_spheres_and_a_cylinder_in_the_gltf_frame():
    points = np.full((1, NUM_KEYPOINTS, 3), np.nan, np.float32)
    points[0, 5], points[0, 7] = (0.1, -0.2, 2.0), (0.3, 0.1, 2.2)  # left shoulder, left elbow
    available = np.isfinite(points).all(axis=2)
    mesh = skeleton_mesh(Pose3DResult(points=points, scores=np.ones((1, NUM_KEYPOINTS), np.float32),
                                      available=available), [(5, 7), (7, 62)])
    sphere = trimesh.creation.icosphere(subdivisions=1, radius=0.015)
    length = float(np.linalg.norm(points[0, 7] - points[0, 5]))
    cylinder = trimesh.creation.cylinder(radius=0.006, height=length, sections=8)
    assert len(mesh.faces) == 2 * len(sphere.faces) + len(cylinder.faces)  # bone (7, 62) has a missing end
    # signed volume: an inward-wound part would subtract its volume instead of adding it
    assert mesh.volume == pytest.approx(2 * sphere.volume + cylinder.volume, rel=1e-4)
    first_sphere = mesh.vertices[:len(sphere.vertices)].mean(axis=0)
    np.testing.assert_allclose(first_sphere, points[0, 5] * [1, -1, -1], atol=1e-6)
    meta = keypoint_meta()
    colours = np.asarray(mesh.visual.vertex_colors)
    assert colours[0, :3].tolist() == list(meta["keypoint_colors"][5]) and (colours[:, 3] == 255).all()
    link = [list(map(int, pair)) for pair in meta["skeleton_links"]].index([5, 7])
    assert colours[-1, :3].tolist() == list(meta["skeleton_link_colors"][link])  # the bone: its 2D link's colour


def test_no_available_joint_raises(tmp_path, lifted):
    nothing = Pose3DResult(points=np.full_like(lifted.points, np.nan), scores=lifted.scores,
                           available=np.zeros_like(lifted.available))
    assert skeleton_mesh(nothing, skeleton_bones()) is None
    with pytest.raises(NothingToExport):
        write_skeleton_glb(nothing, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_keypoints_far_in_front_of_their_person_took_an_occluders_depth():
    """A hidden keypoint reads the depth of whoever covers it: more than max_depth_gap (0.8 m) in front of its
    person's depth it is not available, even with half the person covered; an arm reaching 0.6 m forward is kept;
    nobody lifted: no change."""
    from sapiens2_demo.pose.lift import drop_in_front

    points = np.zeros((3, 6, 3), np.float32)
    points[..., 2] = 4.0
    points[0, 1, 2] = 2.0  # behind someone 2 m nearer
    points[0, 2, 2] = 3.4  # a hand reaching forward
    points[1, :, 2] = 6.0
    points[1, :3, 2] = 4.5  # half of this one behind someone
    available = np.ones((3, 6), bool)
    available[0, 5] = False
    available[2] = False
    dropped = drop_in_front(points, available)
    assert available[0].tolist() == [True, False, True, True, True, False] and np.isnan(points[0, 1]).all()
    assert dropped[0].tolist() == [False, True] + [False] * 4 and dropped[1].tolist() == [True] * 3 + [False] * 3
    assert available[1].tolist() == [False] * 3 + [True] * 3
    assert not available[2].any() and points[0, 2, 2] == np.float32(3.4)


def test_a_keypoint_inside_a_nearer_persons_box_at_their_depth_is_theirs():
    """Two people 0.8 m apart in depth (under max_depth_gap): the far one's keypoint that reads the near one's depth
    inside the near one's box is dropped; the same depth outside that box, or without boxes, is kept."""
    from sapiens2_demo.pose.lift import drop_in_front

    points = np.zeros((2, 4, 3), np.float32)
    points[0, :, 2], points[1, :, 2] = 4.0, 4.8
    points[1, 0, 2] = points[1, 1, 2] = 4.05  # two keypoints of the far person at the near one's depth
    keypoints = np.array([[[10, 10]] * 4, [[15, 15], [80, 80], [90, 90], [95, 95]]], np.float32)
    boxes = np.array([[0, 0, 50, 50], [60, 0, 120, 120]], np.float32)
    for given, expected in (({}, [True] * 4), ({"keypoints": keypoints, "boxes": boxes}, [False, True, True, True])):
        available = np.ones((2, 4), bool)
        drop_in_front(points.copy(), available, **given)
        assert available[1].tolist() == expected and available[0].all(), given

"""The floor the pointmap shows beside the feet (pose/floor_pixels.py): sampled on the background only, the floor a
standing person's clip gets from it (pose/world.py), and one photo's skeleton turned upright on it
(export/pose3d.py)."""

import numpy as np
import pytest
import trimesh

from sapiens2_demo.export.pose3d import pose3d_document, write_skeleton_glb
from sapiens2_demo.pose.floor_pixels import floor_pixels, photo_floor
from sapiens2_demo.pose.lift import Pose3DResult
from sapiens2_demo.pose.meta import NUM_KEYPOINTS, keypoint_names, name_index
from sapiens2_demo.pose.world import find_world
from sapiens2_demo.results import PoseResult
from tests.unit.test_motion_world import FPS, camera_from_world, stepping

SIZE, FOCAL = (360, 640), 500.0
BODY_DEPTH = 99.0  # the person's pixels in the test pointmaps: a floor sample must never be one


def floor_pointmap(height: float, pitch: float, roll: float, wall_at: float | None = None) -> np.ndarray:
    """(H, W, 3) the camera frame's points of a floor `height` m below a camera tilted `pitch` down and rolled `roll`
    (NaN above the horizon); `wall_at`: a wall that far ahead fills the view instead."""
    rotation, _ = camera_from_world(height, pitch, roll)
    up = rotation @ [0.0, 1.0, 0.0]
    v, u = np.mgrid[0:SIZE[0], 0:SIZE[1]].astype(np.float64)
    rays = np.stack([(u - SIZE[1] / 2) / FOCAL, (v - SIZE[0] / 2) / FOCAL, np.ones_like(u)], -1)
    along = rays @ up
    with np.errstate(divide="ignore", invalid="ignore"):
        reach = np.where(along < 0, -height / along, np.nan) if wall_at is None else np.full(along.shape, wall_at)
    return (rays * reach[..., None]).astype(np.float32)


def person_on(points: np.ndarray, box=(250, 60, 390, 300)) -> tuple[PoseResult, np.ndarray]:
    """A person whose box is `box` (their pixels BODY_DEPTH in `points`, the foreground) with their feet at the
    box's bottom, on the floor; (pose, foreground)."""
    x1, y1, x2, y2 = box
    foreground = np.zeros(SIZE, bool)
    foreground[y1:y2, x1:x2] = True
    points[foreground] = BODY_DEPTH
    keypoints = np.full((1, NUM_KEYPOINTS, 2), np.nan, np.float32)
    index = name_index()
    for k, name in enumerate(("left_heel", "right_heel", "left_big_toe", "right_big_toe")):
        keypoints[0, index[name]] = (x1 + 30 + 25 * k, y2 - 5)
    pose = PoseResult(image_size=SIZE, boxes=np.array([box], np.float32), box_scores=np.ones(1, np.float32),
                      keypoints=keypoints, keypoint_scores=np.where(np.isfinite(keypoints[..., 0]), 0.9, 0.0))
    return pose, foreground


def test_floor_pixels_come_from_the_background_about_the_feet_only():
    points = floor_pointmap(1.5, 20.0, 0.0)
    pose, foreground = person_on(points)
    samples = floor_pixels(points, foreground, pose)
    assert samples is not None and 50 <= len(samples) <= 300
    assert (samples[:, 2] != BODY_DEPTH).all()  # never a body pixel
    rotation, _ = camera_from_world(1.5, 20.0, 0.0)
    assert np.abs(samples @ (rotation @ [0.0, 1.0, 0.0]) + 1.5).max() < 1e-3  # all on the floor
    assert floor_pixels(points, None, pose) is None and floor_pixels(None, foreground, pose) is None


def test_one_photo_is_turned_upright_on_the_floor_beside_the_feet(tmp_path):
    height, pitch, roll = 1.5, 20.0, 6.0
    points = floor_pointmap(height, pitch, roll)
    pose, foreground = person_on(points)
    rotation, centre = camera_from_world(height, pitch, roll)
    feet = np.full((1, NUM_KEYPOINTS, 3), np.nan, np.float32)
    index = name_index()
    world_feet = np.array([[0.0, 0.0, -4.0], [0.2, 0.0, -4.0], [0.0, 0.02, -3.8], [0.0, 1.0, -4.0]])
    for name, point in zip(("left_heel", "right_heel", "left_big_toe", "neck"), world_feet):
        feet[0, index[name]] = (point - centre) @ rotation.T
    lifted = Pose3DResult(points=feet, scores=np.ones((1, NUM_KEYPOINTS), np.float32),
                          available=np.isfinite(feet).all(-1), floor=floor_pixels(points, foreground, pose))
    up, offset = photo_floor(lifted.floor, feet[0])
    assert np.degrees(np.arccos(min(1.0, up @ (rotation @ [0.0, 1.0, 0.0])))) < 0.5 and abs(offset - height) < 0.01
    document = pose3d_document(lifted, keypoint_names())
    assert abs(document["floor"]["offset"] - height) < 0.01
    notes = []
    path = write_skeleton_glb(lifted, tmp_path, bones=[(index["left_heel"], index["neck"])], notes=notes)
    assert "turned upright" in notes[0] and "20 degrees down" in notes[0], notes
    scene = trimesh.load(path, force="scene")
    floor = next(g for name, g in scene.geometry.items() if "floor" in name)
    skeleton = next(g for name, g in scene.geometry.items() if "floor" not in name)
    assert np.ptp(floor.vertices[:, 1]) < 0.003  # the disc lies flat: the floor's up along +Y
    heel, neck = skeleton.vertices[:, 1].min(), skeleton.vertices[:, 1].max()
    assert abs(heel + 0.015 - floor.vertices[:, 1].max()) < 0.01  # the heel's sphere rests on the disc
    assert neck - heel == pytest.approx(1.0 + 0.03, abs=0.01)  # the neck straight above it: upright


def test_a_wall_beside_the_feet_is_no_floor_and_the_note_says_so(tmp_path):
    points = floor_pointmap(1.5, 20.0, 0.0, wall_at=6.0)
    pose, foreground = person_on(points)
    samples = floor_pixels(points, foreground, pose)
    feet = np.full((1, NUM_KEYPOINTS, 3), np.nan, np.float32)
    feet[0, name_index()["left_heel"]] = (0.0, 1.0, 4.0)
    feet[0, name_index()["neck"]] = (0.0, -0.5, 4.0)
    assert photo_floor(samples, feet[0]) is None
    lifted = Pose3DResult(points=feet, scores=np.ones((1, NUM_KEYPOINTS), np.float32),
                          available=np.isfinite(feet).all(-1), floor=samples)
    notes = []
    write_skeleton_glb(lifted, tmp_path, bones=[(name_index()["left_heel"], name_index()["neck"])], notes=notes)
    assert "no floor seen beside the feet" in notes[0]
    assert pose3d_document(lifted, keypoint_names())["floor"] is None


def test_a_person_standing_still_gets_the_floor_from_the_pixels_beside_their_feet():
    height, pitch, roll = 1.6, 15.0, 4.0
    points = stepping()
    points[:] = points[:1]  # both feet planted on one spot all clip: the feet alone give no tilt
    rotation, centre = camera_from_world(height, pitch, roll)
    camera_points = (points - centre) @ rotation.T
    world, note = find_world([camera_points], FPS)
    assert world is None and "no floor pixels beside them" in note
    rng = np.random.default_rng(0)
    ground = np.stack([rng.uniform(-1.5, 1.5, 2000), np.zeros(2000), rng.uniform(-6, -3.5, 2000)], 1)
    pixels = (ground - centre) @ rotation.T
    pixels[:, 2] += rng.normal(0, 0.02, len(pixels))  # the pointmap's depth noise
    world, note = find_world([camera_points], FPS, floor_pixels=pixels)
    assert world is not None, note
    assert np.degrees(np.arccos(world.up @ (rotation @ [0.0, 1.0, 0.0]))) < 1.0
    assert abs(world.height - height) < 0.02 and 1500 < world.floor_pixels <= 2000, (world.height, note)
    assert f"and {world.floor_pixels} floor pixels beside them" in note
    assert not world.holds_feet  # feet on the spot may pivot: kept above the floor, not held still


def test_the_host_road_keeps_each_frame_s_floor_pixels_off_the_person():
    from sapiens2_demo.results import PointmapResult
    from sapiens2_demo.tasks.runs import _lift

    points = floor_pointmap(1.5, 20.0, 0.0)
    pose, foreground = person_on(points)
    points[foreground] = (0.0, 0.0, 4.0)  # the person, 4 m away (their keypoints lift there)
    pose.keypoint_scores[:] = 0.9
    pose.keypoints[0] = np.nan_to_num(pose.keypoints[0], nan=320.0)
    _lift([pose], [PointmapResult(points, 1.0, FOCAL, mask=foreground)], [0])
    floor = pose.lifted.floor
    assert floor is not None and len(floor) >= 50 and not np.isclose(floor, (0.0, 0.0, 4.0)).all(1).any()
    rotation, _ = camera_from_world(1.5, 20.0, 0.0)
    assert np.abs(floor @ (rotation @ [0.0, 1.0, 0.0]) + 1.5).max() < 1e-3


def test_the_device_road_samples_the_same_floor_pixels():
    # floor_on_device (the device road: the grid where the pointmaps are, riding in the keypoints' copy) gives
    # floor_pixels' samples to the bit, for two frames with one and two people (one with no sure foot)
    import torch

    from sapiens2_demo.pose.floor_pixels import floor_from_device, floor_on_device

    frames = []
    for pitch, boxes in ((20.0, [(250, 60, 390, 300)]), (10.0, [(100, 80, 220, 330), (400, 50, 520, 250)])):
        points = floor_pointmap(1.5, pitch, 3.0)
        poses = [person_on(points, box) for box in boxes]
        foreground = np.any([f for _, f in poses], axis=0)
        pose = PoseResult(image_size=SIZE, boxes=np.concatenate([p.boxes for p, _ in poses]),
                          box_scores=np.ones(len(poses), np.float32),
                          keypoints=np.concatenate([p.keypoints for p, _ in poses]),
                          keypoint_scores=np.concatenate([p.keypoint_scores for p, _ in poses]))
        frames.append((points, foreground, pose))
    frames[1][2].keypoint_scores[1] = 0.1  # the second person's feet unsure: no band
    poses = [pose for _, _, pose in frames]
    sampled = floor_on_device(torch.from_numpy(np.concatenate([p.keypoints for p in poses])),
                              torch.from_numpy(np.concatenate([p.keypoint_scores for p in poses])),
                              [p.num_people for p in poses], np.concatenate([p.boxes for p in poses]),
                              [torch.from_numpy(points) for points, _, _ in frames],
                              [torch.from_numpy(foreground) for _, foreground, _ in frames])
    for (points, foreground, pose), floor in zip(frames, floor_from_device(poses, sampled.numpy())):
        host = floor_pixels(points, foreground, pose)
        assert host is not None and len(host) >= 50 and (host[:, 2] != BODY_DEPTH).all()
        np.testing.assert_array_equal(floor, host)

"""The world a still camera looks at (pose/world.py): gravity and the floor from the planted feet, the camera's
height, pitch and roll, and the files in that frame (export/mocap_video.py, export/motion_gltf.py)."""

import json

import numpy as np
import pytest

from sapiens2_demo.pose.meta import name_index
from sapiens2_demo.pose.world import World, find_world
from tests.motion_clips import rot

FPS = 24.0


def camera_from_world(height: float, pitch: float, roll: float) -> tuple[np.ndarray, np.ndarray]:
    """(rotation, centre): world (Y up, the floor at Y = 0, the camera looking along -Z) -> camera frame (x right,
    y down, z forward) for a camera `height` metres up, tilted `pitch` degrees down and rolled `roll` degrees."""
    level = np.diag([1.0, -1.0, -1.0])
    rotation = rot("z", np.radians([roll]))[0] @ rot("x", np.radians([pitch]))[0] @ level
    return rotation, np.array([0.0, height, 0.0])


def stepping(frames: int = 192) -> np.ndarray:
    """(T, 70, 3) world-frame keypoints (NaN but hips, neck and feet) of a person stepping about a 1.5 x 1.5 m patch
    4-5.5 m in front of the camera, facing it: each foot planted for 12 frames (heel and toes on the floor), then
    moved to its next foothold over 8, lifted 10 cm."""
    index = name_index()
    rng = np.random.default_rng(3)
    points = np.full((frames, 70, 3), np.nan)
    feet = {}
    for k, side in enumerate(("left", "right")):
        holds = np.stack([rng.uniform(-0.75, 0.75, 12) + (0.15 if side == "left" else -0.15), np.zeros(12),
                          rng.uniform(-5.5, -4.0, 12)], 1)
        path = []
        for a, b in zip(holds, holds[1:]):
            path += [a] * 12 + [a + (b - a) * u + [0, 0.1 * np.sin(np.pi * u), 0] for u in np.linspace(0, 1, 8)]
        path = np.array(path)
        path = np.roll(path, 10 * k, axis=0)[:frames]
        feet[side] = path
        points[:, index[f"{side}_heel"]] = path
        points[:, index[f"{side}_big_toe"]] = path + [0.02 if side == "left" else -0.02, 0, 0.15]
        points[:, index[f"{side}_small_toe"]] = path + [0.06 if side == "left" else -0.06, 0, 0.12]
        points[:, index[f"{side}_ankle"]] = path + [0, 0.08, 0.03]
    pelvis = (feet["left"] + feet["right"]) / 2 + [0, 0.95, 0]
    points[:, index["left_hip"]] = pelvis + [0.09, 0, 0]
    points[:, index["right_hip"]] = pelvis - [0.09, 0, 0]
    points[:, index["neck"]] = pelvis + [0, 0.53, 0]
    return points


def test_the_floor_and_the_camera_come_from_the_planted_feet():
    for height, pitch, roll in ((1.6, 15.0, 4.0), (0.6, 0.0, 0.0), (2.4, 25.0, -8.0)):
        rotation, centre = camera_from_world(height, pitch, roll)
        world_points = stepping()
        camera_points = (world_points - centre) @ rotation.T
        world, note = find_world([camera_points], FPS)
        assert world is not None, note
        true_up = rotation @ [0.0, 1.0, 0.0]
        assert np.degrees(np.arccos(np.clip(world.up @ true_up, -1, 1))) < 0.3, (height, pitch, roll)
        assert abs(world.height - height) < 0.01 and abs(world.pitch - pitch) < 0.3, (world.height, world.pitch)
        assert abs(world.roll - roll) < 0.3, world.roll
        assert f"camera {height:.1f} m above it, tilted {pitch:.0f} degrees down" in note, note
        mapped = world.to_world(camera_points)
        heels = mapped[:, [name_index()["left_heel"], name_index()["right_heel"]]]
        assert np.abs(heels[..., 1].min()) < 0.005  # the planted heels on Y = 0
        index = name_index()
        root = (mapped[0, index["left_hip"]] + mapped[0, index["right_hip"]]) / 2
        assert np.abs(root[[0, 2]]).max() < 1e-6 and abs(root[1] - 0.95) < 0.01  # above the origin
        left = mapped[0, index["left_hip"]] - mapped[0, index["right_hip"]]
        assert left[0] > 0.17 and abs(left[2]) < 1e-6  # facing +Z: the person's left at +X
        assert abs(world.camera_position[1] - height) < 0.01


def test_a_person_standing_still_gives_no_floor_and_says_why():
    points = stepping()
    points[:] = points[:1]  # both feet planted on one spot all clip: their tilt is not known
    rotation, centre = camera_from_world(1.6, 15.0, 4.0)
    world, note = find_world([(points - centre) @ rotation.T], FPS)
    assert world is None and note.startswith("no floor found: the planted feet covered") and "camera's frame" in note
    world, note = find_world([np.full((40, 70, 3), np.nan)], FPS)
    assert world is None and "planted on 0 frames" in note


def test_contacts_on_two_levels_keep_the_floor_most_agree_on():
    points = stepping()
    index = name_index()
    feet = [index[f"{s}_{k}"] for s in ("left", "right") for k in ("heel", "big_toe", "small_toe", "ankle")]
    late = np.arange(len(points)) >= 150  # a step up of 18 cm for the clip's last quarter
    points[np.ix_(late, feet)] += [0, 0.18, 0]
    rotation, centre = camera_from_world(1.6, 15.0, 4.0)
    camera_points = (points - centre) @ rotation.T
    world, note = find_world([camera_points], FPS)
    assert world is not None and abs(world.height - 1.6) < 0.01 and world.off_floor > 0
    contacts = world.contacts(camera_points, FPS)
    # up the step a foot still for a quarter second rests there: held as a contact too (before, none were, and a
    # walk's stances on a step slid 4-6 cm); only while still
    heels = points[:, [index["left_heel"], index["right_heel"]]]
    still = np.linalg.norm(np.gradient(heels, axis=0), axis=-1) * FPS < 0.05
    assert contacts[:150].sum() > 100 and contacts[150:].sum() > 30, contacts[150:].sum()
    assert still[150:][contacts[150:]].all()


def test_the_files_are_in_the_world_frame_with_the_floor_and_the_camera(tmp_path, monkeypatch):
    """The export writes the BVH and motion.glb in the world find_world gives (here a known camera's, so the
    check is of the files, not of the floor's search: the tests above do that) and fills pose_3d.jsonl's camera
    and contacts."""
    import pygltflib

    from sapiens2_demo.export import mocap_video
    from sapiens2_demo.pose.lift import Pose3DResult
    from sapiens2_demo.results import PoseResult
    from tests.unit.test_mocap_export import read_bvh, walking_keypoints

    rotation, centre = camera_from_world(1.6, 15.0, 4.0)  # world -> camera
    up = rotation @ [0.0, 1.0, 0.0]
    to_world = rotation.T  # camera -> world
    origin = -rotation @ centre  # the camera-frame place of the world's origin (on the floor below the camera)
    fixed = World(to_world, origin, up, 1.6, 15.0, 4.0, 100, 0)
    monkeypatch.setattr(mocap_video, "find_world", lambda *a, **k: (fixed, fixed.note()))
    keypoints = walking_keypoints(frames=24)
    export = mocap_video.MotionVideoExport(tmp_path, fps=FPS)
    for t, points in enumerate(keypoints):
        available = np.isfinite(points).all(1)
        pose = PoseResult(image_size=(360, 640), boxes=np.zeros((1, 4), np.float32),
                          box_scores=np.ones(1, np.float32), keypoints=np.zeros((1, 308, 2), np.float32),
                          keypoint_scores=np.where(available, 0.9, 0.0)[None].astype(np.float32))
        pose.lifted = Pose3DResult(points=points[None].astype(np.float32), scores=pose.keypoint_scores,
                                   available=available[None], track_ids=np.array([4]))
        export.add(t, t / FPS, None, pose)
    files = {p.name: p for p in export.close()}
    assert "the files are in the world frame" in export.notes[1] and "camera 1.6 m above it" in export.notes[1]
    lines = [json.loads(line) for line in files["pose_3d.jsonl"].read_text().splitlines()]
    assert len(lines) == 24 and np.allclose(lines[3]["camera"]["rotation"], to_world, atol=1e-4)
    assert np.allclose(lines[3]["camera"]["position"], to_world @ (-origin), atol=1e-4)
    assert all(len(line["people"][0]["contacts"]) == 2 for line in lines)
    bvh = read_bvh(files["motion_4.bvh"].read_text())
    hips = np.array([row[:3] for row in bvh["frames"]])
    pelvis = (keypoints[:, name_index()["left_hip"]] + keypoints[:, name_index()["right_hip"]]) / 2
    assert np.abs(hips - fixed.to_world(pelvis)).max() < 0.02  # the root in the world, not the camera's frame
    gltf = pygltflib.GLTF2().load(str(files["motion.glb"]))
    names = [n.name for n in gltf.nodes]
    assert "floor" in names and "camera" in names
    camera = gltf.nodes[names.index("camera")]
    assert np.allclose(camera.translation, fixed.camera_position, atol=1e-5)


@pytest.mark.parametrize("pitch", [0.0, 20.0])
def test_pitch_is_down_and_roll_signed(pitch):
    rotation, centre = camera_from_world(1.2, pitch, 0.0)
    world, _ = find_world([(stepping() - centre) @ rotation.T], FPS)
    assert abs(world.pitch - pitch) < 0.3 and abs(world.roll) < 0.3


def test_a_stance_under_noise_is_one_contact_from_its_landing_to_its_lift():
    # each foot's contact on the stepping person (planted 12 frames, moved over 8) with 8 mm of white noise on
    # every keypoint (about what a fit under 2 cm of depth noise keeps): measured over two frames either side it
    # is one span per stance, a frame or two short at each end; frame to frame (before) the noise broke each stance
    # into pieces (a run's 5-7 frame stance into none)
    rotation, centre = camera_from_world(1.6, 15.0, 4.0)
    clean = (stepping() - centre) @ rotation.T
    world, note = find_world([clean], FPS)
    assert world is not None, note
    noisy = clean + np.random.default_rng(0).normal(0, 0.008, clean.shape)
    found = world.contacts(noisy, FPS)
    true = world.contacts(clean, FPS)
    for side in range(2):
        edges = np.flatnonzero(np.diff(np.concatenate([[0], found[:, side].astype(int), [0]])))
        spans = list(zip(edges[::2], edges[1::2]))
        true_edges = np.flatnonzero(np.diff(np.concatenate([[0], true[:, side].astype(int), [0]])))
        assert len(spans) == len(true_edges) // 2, (side, spans)
        assert all(b - a >= 8 for a, b in spans[1:-1]), spans  # of the stance's 12 frames


def test_a_stance_the_clip_cuts_goes_on_while_its_foot_hugs_the_floor():
    # the fit's acceleration prior lifts the foot of a stance the clip's first frame cuts a frame or two early: its
    # last still frames read 0.3-0.4 m/s and were no contact, and the foot slid 2 cm there (the curve clip); within
    # the clip a stance's edges are the foot's own (grown there too, the clean curve came out 0.8 -> 1.6 mm)
    level = np.diag([1.0, -1.0, -1.0])
    world = World(level, np.array([0.0, 1.0, 4.0]), np.array([0.0, -1.0, 0.0]), 1.0, 0.0, 0.0, 100, 0)
    x = np.zeros(50)
    lift = np.zeros(50)
    x[7:10] = [0.015, 0.03, 0.045]  # the first stance's last three frames creep at 0.36 m/s
    x[10:18], lift[10:18] = np.linspace(0.1, 0.55, 8), 0.1  # a swing
    x[18:28] = 0.6
    x[25:28] += [0.015, 0.03, 0.045]  # and a stance inside the clip creeps the same
    x[28:36], lift[28:36] = np.linspace(0.7, 1.15, 8), 0.1
    x[36:] = 1.2
    points = np.full((50, 70, 3), np.nan)
    index = name_index()
    for part, ahead in (("heel", 0.0), ("big_toe", 0.15), ("small_toe", 0.12)):
        points[:, index[f"left_{part}"]] = np.stack([x + ahead, 1.0 - lift, np.full(50, 4.0)], 1)
        points[:, index[f"right_{part}"]] = (0.3 + ahead, 1.0, 4.0)  # the other foot stands still
    found = world.contacts(points, FPS)[:, 0]
    # the creep's first frame, 0.27 m/s over the window, is held at the clip's start and not inside the clip (its
    # next frames are quicker still)
    assert found[:8].all() and not found[8:20].any()
    assert found[20:25].all() and not found[25:38].any() and found[38:].all()


def test_a_landing_the_fit_sinks_under_the_floor_is_a_contact_from_there():
    # a junk frame beside a landing drags the first fit's foot under the floor and on at 0.3-0.5 m/s for a few
    # frames (the curve clip under faults, frame 57): the contact began two frames after the landing and the foot
    # slid 17 mm in the world there; a slow foot sunk under the floor has landed. The same creep at the floor's
    # height (a heel strike rolling onto the toes) keeps the stance's edge where the foot stops
    level = np.diag([1.0, -1.0, -1.0])
    world = World(level, np.array([0.0, 1.0, 4.0]), np.array([0.0, -1.0, 0.0]), 1.0, 0.0, 0.0, 100, 0)
    x, lift = np.zeros(40), np.zeros(40)
    x[:10], lift[:10] = np.linspace(0.0, 0.45, 10), np.linspace(0.1, 0.0, 10)  # a swing coming down
    x[10:16] = 0.46 + 0.015 * np.arange(6)  # the landing creeps on at 0.36 m/s ...
    x[16:30] = x[15]
    x[30:], lift[30:] = x[15] + np.linspace(0.05, 0.5, 10), 0.1  # and off again: a stance inside the clip
    index = name_index()
    first = {}
    for sunk in (True, False):
        lift[10:16] = [-0.004, -0.01, -0.015, -0.015, -0.01, -0.005] if sunk else 0.0  # (image y is down)
        points = np.full((40, 70, 3), np.nan)
        for part, ahead in (("heel", 0.0), ("big_toe", 0.15), ("small_toe", 0.12)):
            points[:, index[f"left_{part}"]] = np.stack([x + ahead, 1.0 - lift, np.full(40, 4.0)], 1)
            points[:, index[f"right_{part}"]] = (0.3 + ahead, 1.0, 4.0)
        found = world.contacts(points, FPS)[:, 0]
        first[sunk] = int(np.argmax(found))
        assert not found[:first[sunk]].any() and found[first[sunk]:28].all() and not found[31:].any(), found
    assert first[True] <= 12 and first[False] >= 14, first

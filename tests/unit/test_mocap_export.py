"""Mocap files from a synthetic walking skeleton: a small BVH reader here (independent of the writer) runs forward
kinematics and must land every joint on its marker within 1 cm; motion.glb loads with pygltflib and trimesh."""

import math

import numpy as np
import pytest

from sapiens2_demo.pose.meta import NUM_KEYPOINTS, name_index
from sapiens2_demo.pose.skeleton3d import CAMERA_TO_SKELETON, markers
from tests.motion_clips import apply, rot

FPS, FRAMES = 25.0, 60


def walking_keypoints(frames: int = FRAMES, fps: float = FPS, turn: float = 0.6) -> np.ndarray:
    """(T, 308, 3) camera-frame keypoints (metres; NaN for the face) of a rigid-segment person walking across the
    view about 4 m away: the pelvis bobs and yaws, the torso twists and leans, arms and legs swing, knees and
    elbows bend, fingers curl. Made here, not by a model."""
    t = np.arange(frames) / fps
    phase = 2 * np.pi * 0.9 * t
    index = name_index()
    out = np.full((frames, NUM_KEYPOINTS, 3), np.nan)

    def put(name, value):
        out[:, index[name]] = value

    yaw = rot("y", turn + 0.2 * np.sin(phase / 3))
    pelvis = np.stack([-1.0 + 0.8 * t, 0.95 + 0.03 * np.sin(2 * phase), -4.0 + 0.2 * t], 1)
    hips = yaw @ rot("z", 0.05 * np.sin(phase))
    torso = hips @ rot("y", 0.15 * np.sin(phase)) @ rot("x", 0.1 + 0.05 * np.sin(2 * phase))
    put("left_hip", pelvis + apply(hips, [0.1, 0, 0]))
    put("right_hip", pelvis + apply(hips, [-0.1, 0, 0]))
    neck = pelvis + apply(torso, [0, 0.52, 0])
    put("neck", neck)
    head = torso @ rot("x", 0.1 * np.sin(phase)) @ rot("y", 0.2 * np.sin(phase / 2))
    for name, offset in (("left_ear", [0.08, 0.16, -0.02]), ("right_ear", [-0.08, 0.16, -0.02]),
                         ("nose", [0, 0.15, 0.1]), ("left_eye", [0.03, 0.19, 0.08]), ("right_eye", [-0.03, 0.19, 0.08])):
        put(name, neck + apply(head, offset))
    for sign, s in ((1, "left"), (-1, "right")):
        shoulder = neck + apply(torso, [sign * 0.18, -0.03, 0])
        put(f"{s}_shoulder", shoulder)
        upper = torso @ rot("z", sign * 0.15) @ rot("x", -0.5 * sign * np.sin(phase))
        elbow = shoulder + apply(upper, [0, -0.28, 0])
        fore = upper @ rot("x", -0.4 - 0.2 * np.sin(phase))
        wrist = elbow + apply(fore, [0, -0.26, 0])
        put(f"{s}_elbow", elbow)
        put(f"{s}_wrist", wrist)
        for finger, spread in (("thumb", 0.05), ("forefinger", 0.03), ("middle_finger", 0.0),
                               ("ring_finger", -0.02), ("pinky_finger", -0.04)):
            hand = fore @ rot("y", sign * 0.1)
            base = wrist + apply(hand, [sign * 0.01, -0.08, spread])
            put(f"{s}_{finger}_third_joint", base)
            curl = hand
            for joint in ("2", "3", "4"):
                curl = curl @ rot("x", 0.2 + 0.1 * np.sin(phase))
                base = base + apply(curl, [0, -0.03, 0])
                put(f"{s}_{finger}{joint}", base)
        thigh = hips @ rot("x", -0.45 * sign * np.sin(phase))
        knee = out[:, index[f"{s}_hip"]] + apply(thigh, [0, -0.42, 0])
        shin = thigh @ rot("x", 0.3 + 0.3 * np.sin(phase + sign * 1.0))
        ankle = knee + apply(shin, [0, -0.41, 0])
        put(f"{s}_knee", knee)
        put(f"{s}_ankle", ankle)
        foot = shin @ rot("x", -0.3)
        put(f"{s}_big_toe", ankle + apply(foot, [0.02 * sign, -0.06, 0.14]))
        put(f"{s}_small_toe", ankle + apply(foot, [0.06 * sign, -0.06, 0.12]))
        put(f"{s}_heel", ankle + apply(foot, [0, -0.07, -0.05]))
    return out @ CAMERA_TO_SKELETON.T  # made Y up, facing +Z; the camera frame is x right, y down, z forward


# -- an independent BVH reader ---------------------------------------------------------------------------------
def read_bvh(text: str) -> dict:
    """{names, parents, offsets, channels (per joint), ends, frames (T, C), frame_time}."""
    tokens = iter(text.split())
    names, parents, offsets, channels, ends, stack = [], [], [], [], {}, []
    for token in tokens:
        if token in ("ROOT", "JOINT"):
            names.append(next(tokens))
            parents.append(stack[-1] if stack else -1)
        elif token == "End":
            next(tokens)  # "Site"
            assert next(tokens) == "{" and next(tokens) == "OFFSET"
            ends[len(names) - 1 if not stack else stack[-1]] = [float(next(tokens)) for _ in range(3)]
            assert next(tokens) == "}"
        elif token == "{":
            stack.append(len(names) - 1)
        elif token == "}":
            stack.pop()
        elif token == "OFFSET":
            offsets.append([float(next(tokens)) for _ in range(3)])
        elif token == "CHANNELS":
            channels.append([next(tokens) for _ in range(int(next(tokens)))])
        elif token == "MOTION":
            break
    motion = text.split("MOTION", 1)[1].strip().splitlines()
    count = int(motion[0].split(":")[1])
    frame_time = float(motion[1].split(":")[1])
    frames = np.array([[float(v) for v in line.split()] for line in motion[2:] if line.strip()])
    assert len(frames) == count
    return dict(names=names, parents=parents, offsets=np.array(offsets), channels=channels, ends=ends,
                frames=frames, frame_time=frame_time)


def forward_kinematics(bvh: dict) -> tuple[np.ndarray, dict]:
    """(T, J, 3) joint positions and {joint: (T, 3) End Site position}, channels read in their written order."""
    frames = bvh["frames"]
    count, joints = len(frames), len(bvh["names"])
    positions, rotations = np.zeros((count, joints, 3)), np.zeros((count, joints, 3, 3))
    column = 0
    for j in range(joints):
        rotation, translation = np.broadcast_to(np.eye(3), (count, 3, 3)), np.zeros((count, 3))
        for channel in bvh["channels"][j]:
            values = frames[:, column]
            column += 1
            axis = channel[0].lower()
            if channel.endswith("rotation"):
                rotation = rotation @ rot(axis, np.radians(values))
            else:
                translation[:, "xyz".index(axis)] = values
        parent = bvh["parents"][j]
        if parent < 0:
            positions[:, j] = bvh["offsets"][j] + translation
            rotations[:, j] = rotation
        else:
            positions[:, j] = positions[:, parent] + apply(rotations[:, parent], bvh["offsets"][j])
            rotations[:, j] = rotations[:, parent] @ rotation
    ends = {bvh["names"][j]: positions[:, j] + apply(rotations[:, j], offset) for j, offset in bvh["ends"].items()}
    return positions, ends


# -- the marker each BVH joint must land on (its definition, written out here again) ---------------------------
def expected_markers(keypoints_camera: np.ndarray) -> dict:
    y_up = keypoints_camera[:, :70] @ CAMERA_TO_SKELETON.T
    named = markers(y_up)
    expected = {"Hips": "pelvis", "Spine": "spine", "Neck": "neck", "Head": "head"}
    for side, s in (("Left", "left"), ("Right", "right")):
        expected.update({f"{side}Shoulder": "neck", f"{side}Arm": f"{s}_shoulder", f"{side}ForeArm": f"{s}_elbow",
                         f"{side}Hand": f"{s}_wrist", f"{side}HipJoint": "pelvis", f"{side}UpLeg": f"{s}_hip",
                         f"{side}Leg": f"{s}_knee", f"{side}Foot": f"{s}_ankle", f"{side}ToeBase": f"{s}_toes"})
        for bvh, finger in (("Thumb", "thumb"), ("Index", "forefinger"), ("Middle", "middle_finger"),
                            ("Ring", "ring_finger"), ("Pinky", "pinky_finger")):
            expected.update({f"{side}Hand{bvh}0": f"{s}_wrist", f"{side}Hand{bvh}1": f"{s}_{finger}_third_joint",
                             f"{side}Hand{bvh}2": f"{s}_{finger}2", f"{side}Hand{bvh}3": f"{s}_{finger}3"})
    return {joint: named[marker] for joint, marker in expected.items()}


def record(keypoints, scores=None, smoothing=False, fps=FPS):
    from sapiens2_demo.pose.lift import Pose3DResult
    from sapiens2_demo.pose.motion import MotionRecorder

    recorder = MotionRecorder(smoothing=smoothing)
    for t, points in enumerate(keypoints):
        available = np.isfinite(points).all(1)
        score = np.where(available, 0.9, 0.0).astype(np.float32) if scores is None else scores[t]
        recorder.add(t / fps, Pose3DResult(points=points[None].astype(np.float32), scores=score[None],
                                           available=available[None], track_ids=np.array([7])))
    return recorder


def test_bvh_forward_kinematics_lands_every_joint_on_its_marker(tmp_path):
    from sapiens2_demo.export.bvh import write_bvh

    keypoints = walking_keypoints()
    [track] = record(keypoints).tracks()
    motion = track.solve()
    path = write_bvh(motion, tmp_path, "motion_7.bvh", 1 / FPS)
    bvh = read_bvh(path.read_text())
    assert len(bvh["frames"]) == FRAMES and bvh["frame_time"] == pytest.approx(1 / FPS, abs=1e-8)
    assert bvh["channels"][0] == ["Xposition", "Yposition", "Zposition", "Zrotation", "Xrotation", "Yrotation"]
    positions, ends = forward_kinematics(bvh)
    expected = expected_markers(keypoints)
    assert set(expected) == set(bvh["names"]), set(expected) ^ set(bvh["names"])  # body and both hands
    for j, name in enumerate(bvh["names"]):
        error = np.linalg.norm(positions[:, j] - expected[name], axis=1).max()
        assert error < 0.01, f"{name}: {error * 100:.2f} cm"
    # End Sites with a marker: the nose and the fingertips
    y_up = markers(keypoints[:, :70] @ CAMERA_TO_SKELETON.T)
    assert np.linalg.norm(ends["Head"] - y_up["nose"], axis=1).max() < 0.01
    assert np.linalg.norm(ends["LeftHandIndex3"] - y_up["left_forefinger4"], axis=1).max() < 0.01
    # the person faces the camera side: Y up, the head above the hips, and the hips 4 m away on -Z
    assert (positions[:, bvh["names"].index("Head"), 1] > positions[:, 0, 1]).all()
    assert positions[:, 0, 2].mean() == pytest.approx(-4.0 + 0.2 * (FRAMES - 1) / FPS / 2, abs=0.05)


def test_gaps_are_filled_and_unsure_hands_left_out(tmp_path):
    """A keypoint the lift missed on some frames is filled; hands lifted on under half the frames are not
    in the hierarchy (the wrist ends in an End Site); FK still lands the body within 1 cm."""
    from sapiens2_demo.export.bvh import bvh_text
    from sapiens2_demo.pose.skeleton3d import hand_keypoints

    keypoints = walking_keypoints()
    holed = keypoints.copy()
    holed[10:14, name_index()["left_knee"]] = np.nan  # four frames without the knee
    fingers = {side: [k for k in hand_keypoints(side) if k != name_index()[f"{side}_wrist"]] for side in ("left", "right")}
    holed[::3, fingers["right"]] = np.nan  # the right fingers on 2/3 of the frames: kept
    holed[1::2, fingers["left"]] = np.nan
    holed[::4, fingers["left"]] = np.nan  # the left fingers on 3/8 of the frames: left out
    [track] = record(holed).tracks()
    assert not track.measured[10:14, name_index()["left_knee"]].any()
    bvh = read_bvh(bvh_text(track.solve(), 1 / FPS))
    assert "LeftHandIndex1" not in bvh["names"] and "RightHandIndex1" in bvh["names"]
    positions, ends = forward_kinematics(bvh)
    expected = expected_markers(track.points)  # the positions written: filled where the lift missed
    # a filled frame is not rigid (its bones have other lengths): exact on every frame that measured them all
    used = [k for k in range(70) if k not in fingers["left"] and np.isfinite(keypoints[0, k]).all()]
    whole = track.measured[:, used].all(axis=1)
    assert 20 < whole.sum() < FRAMES
    for j, name in enumerate(bvh["names"]):
        error = np.linalg.norm(positions[:, j] - expected[name], axis=1)
        assert error[whole].max() < 0.01 and error.max() < 0.05, name
    assert "LeftHand" in ends
    knee = name_index()["left_knee"]
    filled = track.points[10:14, knee]  # filled by the clip's fit: the thigh and shin keep their lengths
    straight = np.linspace(keypoints[9, knee], keypoints[14, knee], 6)[1:-1]
    error, straight_error = (np.linalg.norm(v - keypoints[10:14, knee], axis=1).max() for v in (filled, straight))
    assert error < 0.015 and error < straight_error / 2, (error, straight_error)


def test_motion_glb_has_one_animation_per_person_with_a_keyframe_per_frame(tmp_path):
    import pygltflib
    import trimesh

    from sapiens2_demo.export.motion_gltf import write_motion_glb

    keypoints = walking_keypoints()
    other = walking_keypoints(turn=-0.4) + np.array([1.5, 0, 1.0])
    people = [(7, record(keypoints).tracks()[0].solve()), (9, record(other).tracks()[0].solve())]
    path = write_motion_glb(people, np.arange(FRAMES) / FPS, tmp_path)
    gltf = pygltflib.GLTF2().load(str(path))
    assert [a.name for a in gltf.animations] == ["track_7", "track_9"]
    for animation, (_, motion) in zip(gltf.animations, people):
        paths = [c.target.path for c in animation.channels]
        assert paths.count("rotation") == len(motion.names) and paths.count("translation") == 1
        for sampler in animation.samplers:
            assert gltf.accessors[sampler.input].count == FRAMES
            assert gltf.accessors[sampler.output].count == FRAMES
        times = gltf.accessors[animation.samplers[0].input]
        assert times.max[0] == pytest.approx((FRAMES - 1) / FPS, rel=1e-6)
    scene = trimesh.load(path)  # a second reader: the meshes are there
    assert len(scene.geometry) == sum(len(m.names) for _, m in people)
    # node rotations at frame 0 composed down the hierarchy put the root where the BVH puts it
    root = gltf.nodes[gltf.nodes[gltf.scenes[0].nodes[0]].children[0]]
    assert np.allclose(root.translation, people[0][1].root[0], atol=1e-5)


def test_quaternions_and_euler_round_trip():
    from sapiens2_demo.export.bvh import euler_zxy
    from sapiens2_demo.export.motion_gltf import quaternions

    rng = np.random.default_rng(0)
    angles = rng.uniform(-math.pi, math.pi, (200, 3))
    angles[:10, 1] = math.pi / 2  # gimbal lock
    matrices = rot("z", angles[:, 0]) @ rot("x", angles[:, 1]) @ rot("y", angles[:, 2])
    z, x, y = euler_zxy(matrices).T
    assert np.allclose(rot("z", z) @ rot("x", x) @ rot("y", y), matrices, atol=1e-9)
    q = quaternions(matrices)
    qx, qy, qz, qw = q.T
    rebuilt = np.stack([[1 - 2 * (qy**2 + qz**2), 2 * (qx * qy - qz * qw), 2 * (qx * qz + qy * qw)],
                        [2 * (qx * qy + qz * qw), 1 - 2 * (qx**2 + qz**2), 2 * (qy * qz - qx * qw)],
                        [2 * (qx * qz - qy * qw), 2 * (qy * qz + qx * qw), 1 - 2 * (qx**2 + qy**2)]])
    assert np.allclose(np.moveaxis(rebuilt, [0, 1], [-2, -1]), matrices, atol=1e-9)


def test_a_person_never_lifted_gets_no_skeleton():
    keypoints = walking_keypoints()
    keypoints[:, [name_index()["left_hip"], name_index()["neck"]]] = np.nan
    [track] = record(keypoints).tracks()
    with pytest.raises(ValueError, match="hips and neck"):
        track.solve()


def test_recorder_smooths_jitter_in_3d_with_the_video_filter():
    """A still person whose lifted depth jitters by 2 cm: the One Euro filter (the video defaults, in pixel-
    equivalent units: the person's 2D spread over their 3D spread) cuts the jitter; unlifted keypoints are held
    and marked, never-lifted ones stay NaN."""
    from sapiens2_demo.pose.lift import Pose3DResult
    from sapiens2_demo.pose.motion import MotionRecorder

    rng = np.random.default_rng(3)
    still = walking_keypoints(1)[0]
    body = np.isfinite(still).all(1)
    recorder = MotionRecorder()
    outputs, inputs = [], []
    for t in range(60):
        noisy = still + rng.normal(0, 0.02, still.shape) * [0.2, 0.2, 1.0]
        available = body.copy()
        available[0] = t % 2 == 0  # the nose lifted every other frame
        projected = 500 * noisy[:, :2] / noisy[:, 2:3] + [320, 240]  # f = 500 px: ~125 px per metre at 4 m
        lifted = Pose3DResult(points=np.where(available[:, None], noisy, np.nan)[None].astype(np.float32),
                              scores=np.full((1, NUM_KEYPOINTS), 0.9, np.float32), available=available[None],
                              track_ids=np.array([1]))
        [person] = recorder.add(t / 30, lifted, projected[None])
        outputs.append(person["points"])
        inputs.append(noisy)
        assert person["measured"][0] == (t % 2 == 0) and np.isfinite(person["points"][0]).all()
        assert np.isnan(person["points"][~body]).all()
    jitter_in = np.std(np.array(inputs)[20:, body, 2], axis=0).mean()
    jitter_out = np.std(np.array(outputs)[20:, body, 2], axis=0).mean()
    assert jitter_out * 2.5 < jitter_in, (jitter_in, jitter_out)
    assert 100 < recorder._tracks[1].scale < 160  # pixels per metre, from the person's own spreads


def _animated_joints(gltf, animation) -> np.ndarray:
    """(frames, joints, 3): every joint node's world position at each keyframe of `animation`, by composing the
    file's node transforms (the animated rotations and root translation) down the hierarchy: read back from the
    .glb, not from the exporter."""
    def data(accessor):
        view = gltf.bufferViews[gltf.accessors[accessor].bufferView]
        width = {"SCALAR": 1, "VEC3": 3, "VEC4": 4}[gltf.accessors[accessor].type]
        raw = gltf.binary_blob()[view.byteOffset:view.byteOffset + view.byteLength]
        return np.frombuffer(raw, np.float32).reshape(-1, width)

    def rotation(q):  # glTF's (x, y, z, w)
        x, y, z, w = q
        return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                         [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                         [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])

    tracks = {(c.target.node, c.target.path): data(animation.samplers[c.sampler].output) for c in animation.channels}
    frames = len(next(iter(tracks.values())))
    first = min(node for node, _ in tracks)
    out = []
    for t in range(frames):
        world = {}

        def visit(node, parent_rotation, parent_position):
            n = gltf.nodes[node]
            translation = tracks.get((node, "translation"), [n.translation] * frames)[t]
            turn = rotation(tracks.get((node, "rotation"), [n.rotation] * frames)[t])
            world[node] = parent_position + parent_rotation @ np.asarray(translation, float)
            for child in n.children or []:
                visit(child, parent_rotation @ turn, world[node])

        visit(first, np.eye(3), np.zeros(3))
        out.append([world[node] for node in sorted(world)])
    return np.array(out)


def test_motion_glb_is_framed_on_the_whole_walk(tmp_path):
    """A person walking across: the viewer's camera (ui.viewers.framing, with the viewer aiming at the centre of
    the animated box) sees every joint at every frame, read back from the file's animation; framed on the file's
    static bounds (the first frame), the walk left the view."""
    import math

    import pygltflib

    from sapiens2_demo.export.motion_gltf import read_animated_bounds, write_motion_glb
    from sapiens2_demo.ui.viewers import FIELD_OF_VIEW, NARROWEST, framing

    path = write_motion_glb([(3, record(walking_keypoints(turn=0.0)).tracks()[0].solve())],
                            np.arange(FRAMES) / FPS, tmp_path)
    gltf = pygltflib.GLTF2().load(str(path))
    joints = _animated_joints(gltf, gltf.animations[0]).reshape(-1, 3)
    bounds = read_animated_bounds(path)
    assert (bounds[0] <= joints.min(0)).all() and (joints.max(0) <= bounds[1]).all()
    assert np.ptp(joints[:, 0]) > 1.5  # it walks across: metres, the static bounds are one stride wide

    def fits(radius, box) -> bool:  # from in front of the box's centre, every joint within the view's half-angle
        centre = box.mean(0)
        near = radius - (joints[:, 2] - centre[2])  # the distance to each joint along the view
        across = np.maximum(np.abs(joints[:, 1] - centre[1]), np.abs(joints[:, 0] - centre[0]) / NARROWEST)
        return bool((across / near <= math.tan(FIELD_OF_VIEW / 2)).all())

    alpha, beta, radius = framing(path)
    assert (alpha, beta) == (90.0, 90.0) and fits(radius, bounds)
    gltf.scenes[0].extras = {}  # the same file without its animated box: framed on the first frame's bounds
    gltf.save(str(tmp_path / "static.glb"))
    assert read_animated_bounds(tmp_path / "static.glb") is None
    assert not fits(framing(tmp_path / "static.glb")[2], bounds)

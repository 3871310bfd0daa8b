"""A panning camera through the motion export (export/mocap_video.py): rendered frames of a textured panorama seen
through the pan (tests/camera_frames.py) beside a walk's keypoints as that camera sees them; the camera's turn is
found from the frames and taken out, so the character in the files does not turn with the pan."""

import json

import numpy as np

from sapiens2_demo.export import mocap_video
from sapiens2_demo.pose.lift import Pose3DResult, focal_length
from sapiens2_demo.pose.world import World
from sapiens2_demo.results import PoseResult
from tests import camera_frames
from tests.motion_truth import _angle, local_rotations
from tests.unit.test_mocap_export import read_bvh, walking_keypoints

FPS, FRAMES, WIDTH, HEIGHT, PAN = 24.0, 48, 480, 270, 40.0


def export_walk(folder, to_first: np.ndarray, crowd: bool = False, segmented: bool = False
                ) -> tuple[dict, mocap_video.MotionVideoExport]:
    """The walk (its keypoints in the first frame's camera) seen by a camera turned by `to_first` per frame; with
    `crowd` someone with a texture of their own fills half the view beside the walker's box, and with `segmented`
    the lift carries the segmentation's background (the host road's)."""
    focal, centre = camera_frames.focal(WIDTH), (np.array([WIDTH, HEIGHT]) - 1) / 2
    walk = walking_keypoints(frames=FRAMES)
    export = mocap_video.MotionVideoExport(folder, fps=FPS)
    rendered = camera_frames.render_turning(to_first, WIDTH, HEIGHT, person=crowd, person_size=2.2)
    for t, ((frame, background), points) in enumerate(zip(rendered, walk)):
        points = points @ to_first[t]  # the first frame's camera -> this frame's
        available = np.isfinite(points).all(1)
        pixels = focal * points[:, :2] / points[:, 2:] + centre
        seen = pixels[available]
        box = np.concatenate([seen.min(0), seen.max(0)])[None].astype(np.float32)
        pose = PoseResult(image_size=(HEIGHT, WIDTH), boxes=box, box_scores=np.ones(1, np.float32),
                          keypoints=np.nan_to_num(pixels)[None].astype(np.float32),
                          keypoint_scores=np.where(available, 0.9, 0.0)[None].astype(np.float32))
        pose.lifted = Pose3DResult(points=points[None].astype(np.float32), scores=pose.keypoint_scores,
                                   available=available[None], track_ids=np.array([1]),
                                   background=background[::2, ::2] if segmented else None,
                                   focal=focal_length(pose.keypoints, points[None], available[None], (HEIGHT, WIDTH)))
        export.add(t, t / FPS, frame, pose)
    return {p.name: p for p in export.close()}, export


def hips(files: dict) -> tuple[np.ndarray, np.ndarray]:
    bvh = read_bvh(files["motion_1.bvh"].read_text())
    return np.array([row[:3] for row in bvh["frames"]]), local_rotations(bvh)[0][:, 0]


def test_a_panning_camera_does_not_turn_the_character(tmp_path):
    still_files, _ = export_walk(tmp_path / "still", camera_frames.still(FRAMES))
    pan_files, export = export_walk(tmp_path / "pan", camera_frames.pan(FRAMES, PAN))
    assert "3D motion: camera panned 40 degrees to the right (taken out of the files)." in export.notes
    (still_root, still_facing), (pan_root, pan_facing) = hips(still_files), hips(pan_files)
    assert _angle(still_facing, pan_facing).max() < 2.0  # the pan turns the camera-frame hips by up to 40 degrees
    assert np.abs(still_root - pan_root).max() < 0.05


def test_the_turn_is_read_where_the_segmentation_saw_nobody(tmp_path):
    _, segmented = export_walk(tmp_path / "segmented", camera_frames.pan(FRAMES, PAN), crowd=True, segmented=True)
    assert "3D motion: camera panned 40 degrees to the right (taken out of the files)." in segmented.notes
    _, boxed = export_walk(tmp_path / "boxed", camera_frames.pan(FRAMES, PAN), crowd=True)
    assert any("does not move as a turning camera's" in note for note in boxed.notes)  # the crowd's texture


def test_the_host_road_keeps_the_segmentation_s_background_small():
    from sapiens2_demo.results import PointmapResult
    from sapiens2_demo.tasks.runs import _lift

    foreground = np.zeros((720, 1280), bool)
    foreground[100:600, 400:800] = True
    points = np.dstack([*np.meshgrid(np.linspace(-1, 1, 1280), np.linspace(-0.6, 0.6, 720)), np.full((720, 1280), 3.0)])
    pose = PoseResult(image_size=(720, 1280), boxes=np.array([[400, 100, 800, 600]], np.float32),
                      box_scores=np.ones(1, np.float32), keypoints=np.full((1, 308, 2), 500, np.float32),
                      keypoint_scores=np.ones((1, 308), np.float32))
    _lift([pose], [PointmapResult(points.astype(np.float32), 1.0, 1000.0, mask=foreground)], [0])
    background = pose.lifted.background
    assert background.shape == (180, 320) and background.dtype == bool
    assert not background[25:150, 100:200].any() and background[:25].all() and background[:, :100].all()


def test_the_world_carries_the_camera_s_turn_per_frame(tmp_path, monkeypatch):
    """With a floor (a known one here: the floor's search has its own tests) pose_3d.jsonl's camera turns frame by
    frame, motion.glb's camera node is animated, and the note says how the camera turned."""
    import pygltflib

    level = np.diag([1.0, -1.0, -1.0])  # the first frame's camera -> a world with Y up, 1 m below the camera
    fixed = World(level, np.array([0.0, 1.0, 0.0]), np.array([0.0, -1.0, 0.0]), 1.0, 0.0, 0.0, 100, 0)
    monkeypatch.setattr(mocap_video, "find_world", lambda *a, **k: (fixed, fixed.note()))
    truth = camera_frames.pan(FRAMES, PAN)
    files, export = export_walk(tmp_path, truth)
    assert "camera 1.0 m above it, tilted 0 degrees down, panned 40 degrees to the right" in export.notes[1]
    lines = [json.loads(line) for line in files["pose_3d.jsonl"].read_text().splitlines()]
    rotations = np.array([line["camera"]["rotation"] for line in lines])
    assert _angle(rotations, level @ truth).max() < 0.5
    gltf = pygltflib.GLTF2().load(str(files["motion.glb"]))
    camera = [n.name for n in gltf.nodes].index("camera")
    assert any(c.target.node == camera and c.target.path == "rotation" for c in gltf.animations[0].channels)


def test_the_focal_length_is_read_at_the_lift():
    """lift.focal_length, on the pixels the points were read at, gives the pointmap's focal length: the export takes
    it from the lift, not from the keypoints the video's 2D smoother has moved since (its lag follows the motion)."""
    from sapiens2_demo.pose.lift import lift_keypoints
    from sapiens2_demo.results import PointmapResult

    focal = camera_frames.focal(WIDTH)
    v, u = np.mgrid[0:HEIGHT, 0:WIDTH].astype(np.float64)
    depth = 3.0 + 0.002 * u  # a slanted surface: each pixel's point on its own ray
    points = np.stack([(u - (WIDTH - 1) / 2) / focal * depth, (v - (HEIGHT - 1) / 2) / focal * depth, depth], -1)
    rng = np.random.default_rng(0)
    pixels = rng.uniform([40, 30], [WIDTH - 40, HEIGHT - 30], (1, 308, 2)).astype(np.float32)
    pose = PoseResult(image_size=(HEIGHT, WIDTH), boxes=np.array([[0, 0, WIDTH, HEIGHT]], np.float32),
                      box_scores=np.ones(1, np.float32), keypoints=pixels, keypoint_scores=np.ones((1, 308), np.float32))
    lifted = lift_keypoints(pose, PointmapResult(points.astype(np.float32), 1.0, focal), window=0,
                            max_depth_gap=None)
    assert abs(lifted.focal - focal) < 0.01 * focal
    moved = focal_length(pixels + [15.0, 0.0], lifted.points, lifted.available, (HEIGHT, WIDTH))
    assert abs(moved - focal) > 0.01 * focal  # what the smoothed keypoints would have given

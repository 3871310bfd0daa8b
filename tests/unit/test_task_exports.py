"""Issue 16 wired into the task downloads (no model): the surface mesh beside the point clouds, COCO-WholeBody and
the 3D keypoints beside the pose formats, bad input answered with a note, and the options appended for the API."""

import json
from types import SimpleNamespace

import numpy as np
import pytest

from sapiens2_demo import tasks
from sapiens2_demo.export import task_files
from sapiens2_demo.pose.lift import Pose3DResult
from sapiens2_demo.pose.meta import NUM_KEYPOINTS
from sapiens2_demo.results import PointmapResult, PoseResult


def plane_pointmap(height=40, width=60, mask=None) -> PointmapResult:
    """A fronto-parallel plane 2 m away seen by a pinhole camera (f = 50 px)."""
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    z = np.full_like(x, 2.0)
    points = np.stack([(x - width / 2) * z / 50, (y - height / 2) * z / 50, z], axis=-1)
    return PointmapResult(points=points, scale=1.0, focal_length=50.0, mask=mask)


def shown_then_written(task, image, result, folder, **options):
    """An image request's two steps: the presenter's display, then the spec's downloads (TaskSpec.finish)."""
    spec = tasks.get(task)
    options = {**spec.defaults(), **options}
    out = spec.present(image, result, **options)
    assert out.files == [] and out.model3d is None  # nothing written before the display
    return spec.finish(out, image.rgb, result, folder, **options)


def rgb(height=40, width=60) -> np.ndarray:
    return np.random.default_rng(0).integers(0, 255, (height, width, 3), dtype=np.uint8)


def no_person() -> PoseResult:
    return PoseResult(image_size=(40, 60), boxes=np.zeros((0, 4), np.float32), box_scores=np.zeros(0, np.float32),
                      keypoints=np.zeros((0, NUM_KEYPOINTS, 2), np.float32),
                      keypoint_scores=np.zeros((0, NUM_KEYPOINTS), np.float32))


def one_person(lifted=None) -> PoseResult:
    rng = np.random.default_rng(1)
    return PoseResult(image_size=(40, 60), boxes=np.array([[5, 5, 50, 35]], np.float32),
                      box_scores=np.ones(1, np.float32),
                      keypoints=rng.uniform(5, 35, (1, NUM_KEYPOINTS, 2)).astype(np.float32),
                      keypoint_scores=np.ones((1, NUM_KEYPOINTS), np.float32), lifted=lifted)


def test_pointmap_writes_the_surface_mesh_and_shows_it(tmp_path):
    import trimesh

    image = SimpleNamespace(rgb=rgb(), notes=[])
    out = shown_then_written("pointmap", image, plane_pointmap(), tmp_path, max_faces=1000, raw_data=True)
    names = [path.name for path in out.files]
    assert {"person.ply", "person.glb", "person_mesh.glb"} <= set(names)
    assert out.model3d.name == "person_mesh.glb"
    mesh = next(iter(trimesh.load(out.model3d).geometry.values()))
    assert 0 < len(mesh.faces) <= 1000


def test_pointmap_with_no_valid_face_is_a_note_and_no_mesh(tmp_path):
    """One valid pixel: a point cloud, but no triangle; the viewer falls back to the cloud."""
    mask = np.zeros((40, 60), bool)
    mask[20, 30] = True
    image = SimpleNamespace(rgb=rgb(), notes=[])
    out = shown_then_written("pointmap", image, plane_pointmap(mask=mask), tmp_path)
    names = [path.name for path in out.files]
    assert "person_mesh.glb" not in names and not (tmp_path / "person_mesh.glb").exists()
    assert out.model3d.name == "person.glb"
    assert any("no mesh to save" in note for note in out.notes)


def test_pose_without_a_person_writes_an_empty_valid_wholebody_file(tmp_path):
    written = task_files.export_pose(rgb(), no_person(), tmp_path)
    assert [p.name for p in written] == ["pose_sapiens2.json", "pose_coco17.json", "pose_openpose_keypoints.json",
                                         "pose_coco_wholebody.json"]
    document = json.loads((tmp_path / "pose_coco_wholebody.json").read_text())
    assert document["annotations"] == [] and len(document["categories"][0]["wholebody_keypoints"]) == 133


def test_pose_lifted_writes_the_3d_files(tmp_path):
    points = np.random.default_rng(2).uniform(-1, 1, (1, NUM_KEYPOINTS, 3)).astype(np.float32)
    points[..., 2] += 3
    available = np.ones((1, NUM_KEYPOINTS), bool)
    available[0, :5] = False
    lifted = Pose3DResult(points=np.where(available[..., None], points, np.nan), available=available,
                          scores=np.ones((1, NUM_KEYPOINTS), np.float32))
    out = shown_then_written("pose", SimpleNamespace(rgb=rgb(), notes=[]), one_person(lifted), tmp_path)
    names = [p.name for p in out.files]
    assert names[-2:] == ["pose_3d.json", "pose_3d.glb"] and out.model3d.name == "pose_3d.glb"
    document = json.loads((tmp_path / "pose_3d.json").read_text())
    [person] = document["people"]
    assert np.asarray(person["keypoints"], dtype=float).shape == (NUM_KEYPOINTS, 4)
    assert person["keypoints"][0][:3] == [None, None, None]
    assert any(f"{NUM_KEYPOINTS - 5} of {NUM_KEYPOINTS} keypoints placed" in note for note in out.notes)


def test_pose_lifted_with_no_joint_placed_is_a_note_and_no_skeleton(tmp_path):
    lifted = Pose3DResult(points=np.full((1, NUM_KEYPOINTS, 3), np.nan, np.float32),
                          scores=np.ones((1, NUM_KEYPOINTS), np.float32), available=np.zeros((1, NUM_KEYPOINTS), bool))
    notes = []
    written = task_files.export_pose(rgb(), one_person(lifted), tmp_path, notes=notes)
    assert [p.name for p in written][-1] == "pose_3d.json" and not (tmp_path / "pose_3d.glb").exists()
    assert any("no 3D skeleton" in note for note in notes)


def test_lift_on_frames_without_people_runs_no_model_and_stays_valid(tmp_path):
    from sapiens2_demo.tasks.runs import lift_poses

    poses = [no_person()]
    lift_poses([rgb()], poses, manager=None, size="0.4b")  # no person: no pointmap forward (manager unused)
    assert poses[0].lifted.points.shape == (0, NUM_KEYPOINTS, 3)
    written = task_files.export_pose(rgb(), poses[0], tmp_path, notes=[])
    assert json.loads((tmp_path / "pose_3d.json").read_text())["people"] == []
    assert "pose_3d.glb" not in [p.name for p in written]


@pytest.mark.parametrize("task,names", [("pose", ["lift_3d"]), ("pointmap", ["max_faces", "raw_data"]),
                                        ("normals", ["png_bits", "raw_data"])])
def test_new_options_are_appended_so_positional_api_calls_keep_working(task, names):
    spec = tasks.get(task)
    assert [option.name for option in spec.options[-len(names):]] == names


def test_all_tasks_lift_and_the_job_carries_it():
    spec = tasks.get("pose")
    assert spec.all_options == {"lift_3d": True}
    assert spec.job("0.4b", spec.all_options).options["lift_3d"] is True
    assert spec.job("0.4b").options["lift_3d"] is False
    assert spec.viewer_file == "pose_3d.glb" and "pose_3d.json" in spec.optional_files
    assert "person_mesh.glb" in tasks.get("pointmap").optional_files


def test_cli_flag_reaches_the_pose_job_and_loads_the_pointmap():
    from sapiens2_demo.batch import BatchOptions
    from sapiens2_demo.cli import options_from, parse_args

    options = options_from(parse_args(["-i", "x", "-o", "y", "--tasks", "pose", "--lift-3d"]))
    assert options.lift_3d and options.needs_segmentation
    [job] = options.jobs()
    assert job.options["lift_3d"] is True
    assert {c.repo_id.split("/")[-1] for c in options.checkpoints()} == {
        "sapiens2-pose-0.4b", "sapiens2-pointmap-0.4b", "sapiens2-seg-0.4b"}
    assert not BatchOptions(tasks=("pose",)).lift_3d

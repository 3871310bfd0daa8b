"""Blender's own BVH importer reads motion_<id>.bvh as is: default settings, every bone's head lands on its marker,
and a walk in the motion's world frame stands on Blender's ground.

Needs a Python with Blender's `bpy` module (`pip install bpy` in a venv of its own: a large wheel, not one of the
project's requirements), named by SAPIENS2_BLENDER_PYTHON; skipped without it.
"""

import os
import subprocess

import numpy as np
import pytest

from tests.unit.test_mocap_export import FPS, FRAMES, expected_markers, record, walking_keypoints

BLENDER_PYTHON = os.environ.get("SAPIENS2_BLENDER_PYTHON")
pytestmark = pytest.mark.skipif(not BLENDER_PYTHON, reason="SAPIENS2_BLENDER_PYTHON (a Python with bpy) not set")

IMPORT = """
import sys, bpy, numpy as np
folder = sys.argv[1]
bpy.ops.wm.read_factory_settings(use_empty=True)
bpy.ops.import_anim.bvh(filepath=folder + "/motion_7.bvh", update_scene_fps=True)  # the importer's defaults
armature = bpy.context.selected_objects[0]
scene = bpy.context.scene
names = [bone.name for bone in armature.pose.bones]
heads = []
for frame in range(1, int(sys.argv[2]) + 1):
    scene.frame_set(frame)
    heads.append([list(armature.matrix_world @ bone.head) for bone in armature.pose.bones])
np.savez(folder + "/blender.npz", heads=np.array(heads), names=np.array(names), fps=scene.render.fps)
"""


def test_blender_imports_the_bvh_with_every_joint_on_its_marker(tmp_path):
    from sapiens2_demo.export.bvh import write_bvh

    keypoints = walking_keypoints()
    [track] = record(keypoints).tracks()
    write_bvh(track.solve(), tmp_path, "motion_7.bvh", 1 / FPS)
    done = subprocess.run([BLENDER_PYTHON, "-c", IMPORT, str(tmp_path), str(FRAMES)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    blender = np.load(tmp_path / "blender.npz")
    assert int(blender["fps"]) == FPS and blender["heads"].shape[0] == FRAMES
    expected = expected_markers(keypoints)
    for j, name in enumerate(blender["names"].tolist()):
        x, y, z = np.moveaxis(expected[name], 1, 0)
        want = np.stack([x, -z, y], axis=1)  # Y up in the BVH -> Blender's Z up (its Forward -Z, Up Y defaults)
        assert np.linalg.norm(blender["heads"][:, j] - want, axis=1).max() < 0.01, name


def test_blender_stands_a_walk_from_a_tilted_camera_on_its_ground(tmp_path):
    """The motion world frame as Blender imports it: a walk seen by a camera 1.8 m up, 15 degrees down and rolled
    4 (under 2 px and 2 cm of noise), through the video job's after-model path; on every frame the lowest foot
    joint (an ankle or the toes) within 2 cm of Blender's ground (Z = 0). Measured: within 3 mm."""
    from tests.motion_clips import make_clip
    from tests.motion_truth import _main_id, run

    clip = make_clip("curve", noise=True, faults=False, camera=(1.8, 15.0, 4.0))
    ids, _, _ = run(clip, tmp_path)
    script = IMPORT.replace("motion_7.bvh", f"motion_{_main_id(ids[0])}.bvh")
    done = subprocess.run([BLENDER_PYTHON, "-c", script, str(tmp_path), str(clip.frames)], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    blender = np.load(tmp_path / "blender.npz")
    names = blender["names"].tolist()
    feet = [names.index(f"{side}{part}") for side in ("Left", "Right") for part in ("Foot", "ToeBase")]
    lowest = blender["heads"][:, feet, 2].min(axis=1)  # Blender's Z is up
    assert len(lowest) == clip.frames and np.abs(lowest).max() < 0.02, np.round(lowest, 3)

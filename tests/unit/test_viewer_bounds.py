"""The 3D viewers frame a model from the bounds its exporter had (export/bounds.py), not by reading the .glb back."""

import numpy as np
import pytest

from sapiens2_demo.export import bounds
from sapiens2_demo.export.pointcloud import to_gltf_frame


def test_gltf_bounds_are_those_of_the_flipped_points():
    points = np.random.default_rng(0).normal(size=(500, 3)).astype(np.float32)
    flipped = to_gltf_frame(points)
    np.testing.assert_array_equal(bounds.gltf_bounds(points), [flipped.min(axis=0), flipped.max(axis=0)])


def _forbid_reading_back(monkeypatch):
    import trimesh

    from sapiens2_demo.ui import viewers

    def refuse(*args, **kwargs):
        raise AssertionError("the viewer read the .glb back")

    monkeypatch.setattr(trimesh, "load", refuse)
    monkeypatch.setattr(viewers, "read_animated_bounds", refuse)
    return viewers


@pytest.mark.parametrize("writer", ["mesh", "cloud", "skeleton"])
def test_each_glb_writer_records_the_bounds_the_file_has(tmp_path, monkeypatch, writer):
    import trimesh

    from sapiens2_demo.export import image as files
    from sapiens2_demo.export.mesh import write_mesh_glb
    from sapiens2_demo.export.pointcloud import PointCloud
    from sapiens2_demo.ui import viewers

    rng = np.random.default_rng(1)
    if writer == "mesh":
        box = trimesh.creation.box(extents=(0.5, 1.8, 0.3))
        box.apply_translation((0.1, -0.2, 2.5))
        path = write_mesh_glb(box, tmp_path)
    elif writer == "cloud":
        cloud = PointCloud(rng.normal(size=(300, 3)).astype(np.float32) + (0, 0, 3),
                           rng.integers(0, 255, (300, 3), dtype=np.uint8))
        path = files.write_glb(None, None, tmp_path, cloud=cloud)
    else:
        from sapiens2_demo.export.pose3d import write_skeleton_glb
        from sapiens2_demo.pose.lift import Pose3DResult

        count = 308
        points = rng.normal(scale=0.4, size=(1, count, 3)).astype(np.float32) + (0, 0, 3)
        lifted = Pose3DResult(points=points, scores=np.ones((1, count), np.float32), available=np.ones((1, count), bool))
        path = write_skeleton_glb(lifted, tmp_path)
    read_back = trimesh.load(str(path), force="scene").bounds
    np.testing.assert_allclose(bounds.recorded(path), read_back, rtol=1e-6, atol=1e-6)
    expected = viewers.framing(path)
    bounds._BOUNDS.clear()  # what the viewer did before: read the file
    assert viewers.framing(path) == pytest.approx(expected)
    bounds.remember(path, read_back)
    _forbid_reading_back(monkeypatch)
    assert viewers.framing(path) == pytest.approx(expected)


def test_a_file_no_writer_recorded_is_still_framed(tmp_path):
    import trimesh

    from sapiens2_demo.ui import viewers

    path = tmp_path / "other.glb"
    path.write_bytes(trimesh.Scene(trimesh.creation.box(extents=(1, 2, 1))).export(file_type="glb"))
    assert bounds.recorded(path) is None and viewers.framing(path) is not None

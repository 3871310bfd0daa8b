"""export/mesh.py: the pointmap surface mesh and its GLB."""

import math

import numpy as np
import pytest
import trimesh

from sapiens2_demo.export.image import NothingToExport
from sapiens2_demo.export.mesh import grid_stride, pointmap_mesh, write_mesh_glb

FOCAL = 500.0


def rays(height: int, width: int) -> np.ndarray:
    """(H, W, 3) pinhole ray directions with z = 1, principal point at the image centre."""
    v, u = np.mgrid[0:height, 0:width].astype(np.float64)
    return np.stack([(u - width / 2) / FOCAL, (v - height / 2) / FOCAL, np.ones_like(u)], axis=-1)


def step_map(height: int = 60, width: int = 80) -> np.ndarray:
    """z = 2 m on the left half, 3 m on the right."""
    depth = np.where(np.arange(width) < width // 2, 2.0, 3.0)
    return (rays(height, width) * np.broadcast_to(depth, (height, width))[..., None]).astype(np.float32)


def tilted_plane(height: int, width: int, degrees: float, distance: float = 3.0) -> np.ndarray:
    """A plane through (0, 0, distance), turned `degrees` about the y axis from facing the camera."""
    t = math.radians(degrees)
    normal = np.array([math.sin(t), 0.0, -math.cos(t)])
    d = rays(height, width)
    return (d * ((np.array([0.0, 0.0, distance]) @ normal) / (d @ normal))[..., None]).astype(np.float32)


def pixel_coded_image(height: int, width: int) -> np.ndarray:
    """Every pixel's colour tells its (row, column)."""
    v, u = np.mgrid[0:height, 0:width]
    return np.stack([v % 256, u % 256, (v // 256) * 16 + u // 256], axis=-1).astype(np.uint8)


def vertex_pixels(vertices: np.ndarray, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """(rows, cols) of camera-frame vertices, projected through the pinhole."""
    u = np.rint(vertices[:, 0] / vertices[:, 2] * FOCAL + width / 2).astype(int)
    v = np.rint(vertices[:, 1] / vertices[:, 2] * FOCAL + height / 2).astype(int)
    return v, u


def test_no_face_bridges_a_depth_step():
    points = step_map()
    mesh = pointmap_mesh(points, np.zeros((*points.shape[:2], 3), np.uint8))
    depth = mesh.vertices[mesh.faces][..., 2]  # (F, 3)
    assert len(mesh.faces) > 0.9 * 2 * 59 * 78  # both sides are meshed
    assert not ((depth.min(axis=1) < 2.5) & (depth.max(axis=1) > 2.5)).any()


def test_masked_out_pixels_have_no_face():
    points = tilted_plane(60, 80, 20)
    mask = np.ones((60, 80), bool)
    mask[10:30, 20:50] = False
    mesh = pointmap_mesh(points, pixel_coded_image(60, 80), mask=mask)
    rows, cols = vertex_pixels(mesh.vertices, 60, 80)
    assert mask[rows, cols].all()
    assert len(mesh.vertices) == len(np.unique(mesh.faces))  # no unreferenced vertex


def test_vertex_colours_are_the_image_at_the_vertex_pixels():
    image = pixel_coded_image(300, 400)
    mesh = pointmap_mesh(tilted_plane(300, 400, 30), image, max_faces=20_000)
    rows, cols = vertex_pixels(mesh.vertices, 300, 400)
    colours = mesh.visual.vertex_colors
    np.testing.assert_array_equal(colours[:, :3], image[rows, cols])
    assert (colours[:, 3] == 255).all()


@pytest.mark.parametrize("max_faces", [2, 1000, 50_000, 300_000])
def test_face_budget_holds_for_a_big_map(max_faces):
    points = tilted_plane(1080, 1920, 10)
    mesh = pointmap_mesh(points, np.zeros((1080, 1920, 3), np.uint8), max_faces=max_faces)
    assert 0 < len(mesh.faces) <= max_faces
    if max_faces == 50_000:
        assert grid_stride(1080, 1920, 50_000) == 10 and len(mesh.faces) > 40_000  # not coarser than needed


def test_faces_look_at_the_camera():
    mesh = pointmap_mesh(tilted_plane(40, 50, 30), np.zeros((40, 50, 3), np.uint8))
    assert (mesh.face_normals[:, 2] < 0).all()  # camera frame: the camera is towards -z


def test_steep_plane_keeps_nearly_all_faces():
    points = tilted_plane(200, 300, 60)
    mesh = pointmap_mesh(points, np.zeros((200, 300, 3), np.uint8))
    assert len(mesh.faces) > 0.95 * 2 * 199 * 299


def test_all_invalid_map_raises():
    image = np.zeros((20, 30, 3), np.uint8)
    with pytest.raises(NothingToExport):
        pointmap_mesh(np.full((20, 30, 3), np.nan, np.float32), image)
    behind = step_map(20, 30) * np.float32(-1)  # z < 0 everywhere
    with pytest.raises(NothingToExport):
        pointmap_mesh(behind, image)
    with pytest.raises(NothingToExport):
        pointmap_mesh(step_map(20, 30), image, mask=np.zeros((20, 30), bool))


def test_glb_opens_with_colours_and_faces_towards_the_viewer(tmp_path):
    image = pixel_coded_image(60, 80)
    mesh = pointmap_mesh(tilted_plane(60, 80, 30), image)
    path = write_mesh_glb(mesh, tmp_path / "out")
    assert path == tmp_path / "out" / "person_mesh.glb"
    assert sorted(p.name for p in path.parent.iterdir()) == ["person_mesh.glb"]  # no partial file left

    loaded = trimesh.load(path, force="mesh")
    assert len(loaded.faces) == len(mesh.faces)
    assert (loaded.face_normals[:, 2] > 0).all()  # glTF: the viewer is on +z
    assert loaded.vertices[:, 2].max() < 0 and loaded.vertices[:, 1].max() > 0  # z flipped; y up (top rows > 0)
    np.testing.assert_allclose(np.sort(loaded.vertices[:, 1]), np.sort(-mesh.vertices[:, 1]), atol=1e-6)
    colours = np.asarray(loaded.visual.vertex_colors)
    assert colours.shape == (len(loaded.vertices), 4)
    assert {tuple(c) for c in colours[:, :3]} == {tuple(c) for c in mesh.visual.vertex_colors[:, :3]}

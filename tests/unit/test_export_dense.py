"""Dense exports written, read back, compared: labels, normals, depth, point clouds, matting."""

import cv2
import numpy as np
import pytest
import trimesh
from PIL import Image

from sapiens2_demo.export import image as export
from sapiens2_demo.export.pointcloud import even_subsample, person_points
from sapiens2_demo.render.parts import palette
from sapiens2_demo.results import MattingResult, NormalsResult, PointmapResult, SegmentationResult

H, W = 60, 80


@pytest.fixture()
def mask():
    mask = np.zeros((H, W), bool)
    mask[10:50, 20:60] = True  # 1600 px
    return mask


@pytest.fixture()
def image():
    return np.random.default_rng(0).integers(0, 256, (H, W, 3), dtype=np.uint8)


@pytest.fixture()
def pointmap(mask):
    rng = np.random.default_rng(1)
    points = np.dstack([rng.uniform(-1, 1, (H, W)), rng.uniform(-1, 1, (H, W)),
                        rng.uniform(0.3, 60.0, (H, W))]).astype(np.float32)
    return PointmapResult(points=points, scale=1.0, focal_length=768.0, mask=mask)


def test_label_pngs_round_trip(tmp_path):
    labels = np.random.default_rng(2).integers(0, 29, (H, W)).astype(np.uint8)
    path = export.write_label_png(SegmentationResult(labels), tmp_path)
    assert path.exists() and path.parent == tmp_path
    with Image.open(path) as png:
        assert png.mode == "L" and png.size == (W, H)
        np.testing.assert_array_equal(np.asarray(png), labels)
    with Image.open(export.write_parts_colour_png(labels, tmp_path / "sub")) as png:
        np.testing.assert_array_equal(np.asarray(png.convert("RGB")), palette()[labels])


def _normals(mask=None):
    rng = np.random.default_rng(3)
    normals = rng.standard_normal((H, W, 3)).astype(np.float32)
    return NormalsResult(normals / np.linalg.norm(normals, axis=-1, keepdims=True), mask=mask)


def test_normals_npy_and_png_round_trip(tmp_path, mask):
    result = _normals()
    loaded = np.load(export.write_normals_npy(result, tmp_path))
    assert loaded.dtype == np.float32 and loaded.shape == (H, W, 3)
    np.testing.assert_array_equal(loaded, result.normals)
    png8 = cv2.imread(str(export.write_normals_png(result, tmp_path)), cv2.IMREAD_UNCHANGED)[..., ::-1]
    assert png8.dtype == np.uint8
    np.testing.assert_allclose(png8 / 255.0 * 2 - 1, result.normals, atol=1.01 / 255)
    png16 = cv2.imread(str(export.write_normals_png(result, tmp_path, bits=16)), cv2.IMREAD_UNCHANGED)[..., ::-1]
    assert png16.dtype == np.uint16
    np.testing.assert_allclose(png16 / 65535.0 * 2 - 1, result.normals, atol=1.01 / 65535)


def test_normals_png_masks_background_npy_stays_raw(tmp_path, mask):
    result = _normals(mask)
    raw = np.load(export.write_normals_npy(result, tmp_path))
    np.testing.assert_array_equal(raw, result.normals)  # the result's mask does not touch the data file
    masked = np.load(export.write_normals_npy(result, tmp_path, mask=mask, name="masked.npy"))
    assert (masked[~mask] == 0).all()
    np.testing.assert_array_equal(masked[mask], result.normals[mask])
    png = np.asarray(Image.open(export.write_normals_png(result, tmp_path)))
    assert (png[~mask] == 0).all() and (png[mask] != 0).any(axis=-1).all()


def test_depth_png16_back_to_metres_within_1mm(tmp_path, pointmap, mask):
    depth = pointmap.depth.copy()
    depth[12, 25] = 70.0  # beyond 65.535 m: clipped
    pointmap.points[12, 25, 2] = 70.0
    pointmap.points[13, 25, 2] = np.nan  # invalid inside the mask
    path = export.write_depth_png(pointmap, tmp_path)
    with Image.open(path) as png:
        mm = np.asarray(png)
    assert mm.dtype == np.uint16 and mm.shape == (H, W)
    assert (mm[~mask] == 0).all() and mm[13, 25] == 0 and mm[12, 25] == 65535
    check = mask.copy()
    check[12:14, 25] = False
    assert np.abs(mm[check] / 1000.0 - depth[check]).max() <= 0.0005 + 1e-6
    assert (mm[check] > 0).all()


def test_depth_npy_metres(tmp_path, pointmap, mask):
    raw = np.load(export.write_depth_npy(pointmap, tmp_path))
    assert raw.dtype == np.float32 and raw.shape == (H, W)
    np.testing.assert_array_equal(raw, pointmap.depth)  # raw data: the result's mask is not applied
    masked = np.load(export.write_depth_npy(pointmap, tmp_path, mask=mask, name="masked.npy"))
    np.testing.assert_array_equal(masked[mask], pointmap.depth[mask])
    assert (masked[~mask] == 0).all()


def _sorted_rows(points, colors):
    rows = np.concatenate([np.round(points, 5), colors[:, :3].astype(np.float64)], axis=1)
    return rows[np.lexsort(rows.T[::-1])]


def test_ply_round_trip_points_and_colours(tmp_path, pointmap, image, mask):
    loaded = trimesh.load(export.write_ply(pointmap, image, tmp_path))
    assert isinstance(loaded, trimesh.PointCloud) and len(loaded.vertices) == mask.sum()
    expected = _sorted_rows(pointmap.points[mask], image[mask])
    np.testing.assert_allclose(_sorted_rows(np.asarray(loaded.vertices), np.asarray(loaded.colors)), expected,
                               atol=1e-5)


def test_glb_round_trip_in_gltf_frame(tmp_path, pointmap, image, mask):
    scene = trimesh.load(export.write_glb(pointmap, image, tmp_path, max_points=500))
    (cloud,) = scene.geometry.values()
    assert len(cloud.vertices) == 500
    kept = np.flatnonzero(mask.ravel())[even_subsample(int(mask.sum()), 500)]
    flipped = pointmap.points.reshape(-1, 3)[kept] * [1, -1, -1]
    expected = _sorted_rows(flipped, image.reshape(-1, 3)[kept])
    np.testing.assert_allclose(_sorted_rows(np.asarray(cloud.vertices), np.asarray(cloud.colors)), expected,
                               atol=1e-5)


def test_point_cap_is_deterministic_and_even():
    idx = even_subsample(1000, 300)
    assert len(idx) == 300 and len(np.unique(idx)) == 300 and idx[0] == 0 and idx[-1] < 1000
    np.testing.assert_array_equal(idx, even_subsample(1000, 300))
    assert (np.diff(idx) <= 4).all()  # spread over the whole range
    np.testing.assert_array_equal(even_subsample(10, 300), np.arange(10))


def test_point_cloud_drops_invalid_and_background(pointmap, image, mask):
    pointmap.points[20, 30] = [0, 0, -1]  # behind the camera
    pointmap.points[21, 30, 0] = np.inf
    cloud = person_points(pointmap, image, max_points=10**6)
    assert len(cloud) == mask.sum() - 2
    everything = person_points(PointmapResult(pointmap.points, 1.0, 1.0), image, max_points=10**6)
    assert len(everything) == H * W - 2


def test_matting_rgba_alpha_equals_matte(tmp_path, image):
    rng = np.random.default_rng(4)
    alpha = rng.uniform(0, 1, (H, W)).astype(np.float32)
    alpha[:5] = 0.0
    colour = rng.uniform(0, 1, (H, W, 3)).astype(np.float32)
    result = MattingResult(alpha=alpha, foreground=colour * alpha[..., None])
    with Image.open(export.write_matting_rgba(result, None, tmp_path)) as png:
        assert png.mode == "RGBA"
        rgba = np.asarray(png)
    assert np.abs(rgba[..., 3] / 255.0 - alpha).max() <= 0.5 / 255 + 1e-6
    solid = alpha > 0.2  # un-premultiplied colour comes back where there is enough alpha to carry it
    assert np.abs(rgba[..., :3][solid] / 255.0 - colour[solid]).max() <= 0.5 / 255 + 1e-5
    assert (rgba[:5, :, :3] == 0).all()
    with Image.open(export.write_matting_rgba(result, image, tmp_path, rgb="image", name="b.png")) as png:
        np.testing.assert_array_equal(np.asarray(png)[..., :3], image)
    with Image.open(export.write_alpha_png(result, tmp_path)) as png:
        assert png.mode == "L"
        assert np.abs(np.asarray(png) / 255.0 - alpha).max() <= 0.5 / 255 + 1e-6


def test_writers_create_the_folder(tmp_path):
    path = export.write_alpha_png(MattingResult(np.zeros((2, 2), np.float32), np.zeros((2, 2, 3), np.float32)),
                                 tmp_path / "a" / "b")
    assert path.is_file() and path.parent == tmp_path / "a" / "b"


def test_empty_point_cloud_is_a_clear_error(tmp_path, pointmap, image):
    with pytest.raises(export.NothingToExport):
        export.write_ply(pointmap, image, tmp_path, mask=np.zeros((H, W), bool))
    with pytest.raises(ValueError, match="no point cloud"):
        export.write_glb(pointmap, image, tmp_path, mask=np.zeros((H, W), bool))

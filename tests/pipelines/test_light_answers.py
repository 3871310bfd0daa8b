"""A light image answer (no raw data) takes its maps from the device at their files' bits (results.CodedMap): the
new road against the old one (the float32 maps copied back), on the CPU with the CUDA branches forced. The files
and renders agree to the bit or within the tolerance the codes' arithmetic allows; the numpy road is untouched."""

import pickle

import numpy as np
import pytest

from sapiens2_demo.export import image as files
from sapiens2_demo.export.mesh import grid_stride, pointmap_mesh, result_mesh
from sapiens2_demo.export.pointcloud import person_points
from sapiens2_demo.pipelines import dense, device_post
from sapiens2_demo.render.depth import colour_index, depth_bounds, valid_depth
from sapiens2_demo.render.matting import MattingAnnotator, alpha_image, rgba_cutout
from sapiens2_demo.render.normals import NormalsAnnotator
from sapiens2_demo.results import NORMAL_CODE, UNIT_CODE, CodedMap, MattingResult, NormalsResult, codes_of, compact_maps
from sapiens2_demo.tasks.summary import summarize

F32 = 2.0 ** -24  # float32's relative rounding


@pytest.fixture()
def image(person_image):
    return np.ascontiguousarray(person_image[60:300, 40:360])  # 240 x 320


@pytest.fixture()
def mask(image, standin_manager):
    return dense.segment_batch([image], standin_manager)[0].foreground


def _most(a, b) -> int:
    return int(np.abs(a.astype(np.int32) - b.astype(np.int32)).max())


def test_normals_cross_as_the_16_bit_pngs_codes(image, mask, standin_manager, device_road, tmp_path):
    old = dense.normals_batch([image], standin_manager, masks=[mask])[0]
    new = dense.normals_batch([image], standin_manager, masks=[mask], coded=True)[0]
    coded = codes_of(new, "normals")
    assert coded is not None and coded.codes.dtype == np.uint16 and codes_of(old, "normals") is None
    # the codes round n * 32767.5 + 32767.5 (float32: within 0.006 of a code), decoded in float32
    step = NORMAL_CODE[0]
    assert np.abs(new.normals - old.normals).max() <= (0.5 + 0.006) * step + 4 * F32
    # the 16-bit PNG: the codes as they are, against OpenCV's rounding of the float map (a tie apart at most)
    old16 = files.write_normals_png(old, tmp_path / "old", bits=16)
    new16 = files.write_normals_png(new, tmp_path / "new", bits=16)
    import cv2

    assert _most(cv2.imread(str(old16), cv2.IMREAD_UNCHANGED), cv2.imread(str(new16), cv2.IMREAD_UNCHANGED)) <= 1
    # 8 bits (the PNG and the render): 127.5 x 1.6e-5 = 0.002 of a level apart before rounding
    old8, new8 = (files.write_normals_png(r, tmp_path / name, bits=8) for r, name in ((old, "o8"), (new, "n8")))
    assert _most(cv2.imread(str(old8)), cv2.imread(str(new8))) <= 1
    for background in ("black", "image"):
        annotator = NormalsAnnotator(background=background)
        assert _most(annotator.annotate(image, old), annotator.annotate(image, new)) <= 1


def test_depth_crosses_as_the_pngs_millimetres_and_the_mesh_grid(image, mask, standin_manager, device_road,
                                                                  tmp_path):
    max_faces = 20_000
    stride = grid_stride(*image.shape[:2], max_faces)
    assert stride > 1
    old = dense.pointmap_batch([image], standin_manager, masks=[mask])[0]
    new = dense.pointmap_batch([image], standin_manager, masks=[mask], mesh_strides=[stride])[0]
    assert new.points is None and new.depth_mm.dtype == np.uint16 and new.grid.dtype == np.float32
    assert (new.scale, new.focal_length) == (old.scale, old.focal_length)
    # the depth PNG: the same float32 arithmetic on either side
    np.testing.assert_array_equal(files.depth_millimetres(new), files.depth_millimetres(old))
    # the mesh: the grid is the points themselves, every `stride` pixels
    np.testing.assert_array_equal(new.grid, old.points[::stride, ::stride])
    a, b = pointmap_mesh(old.points, image, mask, max_faces), result_mesh(new, image, mask, max_faces)
    np.testing.assert_array_equal(a.vertices, b.vertices)
    np.testing.assert_array_equal(a.faces, b.faces)
    with pytest.raises(ValueError, match="every"):
        result_mesh(new, image, mask, max_faces * 4)  # another grid was not taken
    cloud = person_points(new, image)  # the fallback cloud of a light answer: its grid's points
    assert len(cloud) == int(valid_depth(old.depth, mask)[::stride, ::stride].sum())
    # the depth others read: whole millimetres, the same pixels valid (the stand-in's depth is well inside 65 m)
    old_depth, valid = old.depth, valid_depth(old.depth, mask)
    np.testing.assert_array_equal(valid_depth(new.depth, mask), valid)
    assert np.abs(new.depth[valid] - old_depth[valid]).max() <= 0.0005 * (1 + 8 * F32) + 65.535 * 2 * F32
    # the render's colour index: percentiles move no more than the values (0.5 mm); the index by at most what
    # its formula moves for z, near and far each 0.5 mm off (monotone in each: the worst corner), plus rounding
    e = 0.0005 + 1e-6
    b_old, b_new = depth_bounds(old, mask), depth_bounds(new, mask)
    assert abs(b_new.near - b_old.near) <= e and abs(b_new.far - b_old.far) <= e
    z = old_depth[valid].astype(np.float64)

    def position(z, near, far):
        return 255 * (1 / z - 1 / far) / (1 / near - 1 / far)

    exact = position(z, b_old.near, b_old.far)
    moved = max(np.abs(position(z + dz, b_old.near + dn, b_old.far + df) - exact).max()
                for dz in (-e, e) for dn in (-e, e) for df in (-e, e))
    index_old, index_new = colour_index(old_depth, b_old)[valid], colour_index(new.depth, b_new)[valid]
    assert _most(index_old, index_new) <= int(np.floor(moved)) + 1
    # the summary's depth figures: rounded to the millimetre, from values 0.5 mm apart
    s_old, s_new = summarize(old, image.shape[:2]), summarize(new, image.shape[:2])
    for key in ("p1", "median", "p99"):
        assert abs(s_old["depth_m"][key] - s_new["depth_m"][key]) <= 0.0015 + 1e-9


def test_matting_crosses_as_its_pngs_bytes(image, standin_manager, device_road):
    old = dense.matting_batch([image], standin_manager)[0]
    new = dense.matting_batch([image], standin_manager, coded=True)[0]
    assert codes_of(new, "alpha").codes.dtype == np.uint8 and new.colour.dtype == np.uint8
    np.testing.assert_array_equal(alpha_image(new), alpha_image(old))  # the same rounding of the same float32
    old_rgba, new_rgba = rgba_cutout(image, old), rgba_cutout(image, new)
    np.testing.assert_array_equal(old_rgba[..., 3], new_rgba[..., 3])
    assert _most(old_rgba[..., :3], new_rgba[..., :3]) <= 1  # fg * 255 / alpha: OpenCV's rounding and torch's
    # half a level in the foreground and half in alpha (times a background <= 1): one level at most
    assert np.abs(new.foreground - old.foreground).max() <= 0.5 / 255 + 4 * F32
    backdrop = np.linspace(0, 255, 50 * 80 * 3).reshape(50, 80, 3).astype(np.uint8)
    for annotator in (MattingAnnotator(), MattingAnnotator(background="image", image=backdrop)):
        assert _most(annotator.annotate(image, old), annotator.annotate(image, new)) <= 1
    assert summarize(new, image.shape[:2]) == summarize(old, image.shape[:2])


def test_the_numpy_road_keeps_float_maps(image, standin_manager):
    """Off the device road nothing crosses: a light answer's options change nothing there."""
    [normals] = dense.normals_batch([image], standin_manager, coded=True)
    [points] = dense.pointmap_batch([image], standin_manager, mesh_strides=[3])
    [matte] = dense.matting_batch([image], standin_manager, coded=True)
    assert codes_of(normals, "normals") is None and normals.normals.dtype == np.float32
    assert points.points is not None and points.depth_mm is None
    assert codes_of(matte, "alpha") is None and matte.colour is None


def test_coded_maps_keep_their_codes_across_a_process_boundary():
    codes = np.arange(24, dtype=np.uint16).reshape(2, 4, 3) * 2000
    result = NormalsResult(normals=CodedMap(codes, *NORMAL_CODE))
    assert result.normals.dtype == np.float32  # read: decoded
    assert compact_maps(result, (2, 4)) is result  # already at its file's bits: not made float16
    sent = pickle.loads(pickle.dumps(result))
    assert "_normals_decoded" not in vars(sent)  # the codes cross, not the decoded map
    np.testing.assert_array_equal(codes_of(sent, "normals").codes, codes)
    np.testing.assert_array_equal(sent.normals, result.normals)
    matte = MattingResult(alpha=np.full((2, 4), 0.5, np.float32),
                          foreground=CodedMap(np.full((2, 4, 3), 7, np.uint8), *UNIT_CODE))
    compact = compact_maps(matte, (2, 4))
    assert compact.alpha.dtype == np.float16 and codes_of(compact, "foreground") is not None


def test_16_bit_codes_cross_as_int16_and_come_back_whole():
    import torch

    codes = torch.tensor([0.0, 1.0, 32767.0, 32768.0, 65534.0, 65535.0])
    sent = device_post._offset16(codes)
    assert sent.dtype == torch.int16
    [back] = device_post.uint16_to_host([sent])
    assert back.dtype == np.uint16
    np.testing.assert_array_equal(back, codes.numpy().astype(np.uint16))


def test_all_tasks_answers_light_with_the_same_downloads(image, standin_manager, monkeypatch, tmp_path):
    """All tasks takes each task's light answer (no raw data there): its maps cross coded, and its zip holds the
    files the float32 road writes, by name; but the pointmap, shared with the pose lift, stays float32 (one forward
    for both, not two)."""
    import zipfile

    from sapiens2_demo.jobs import image as image_jobs
    from sapiens2_demo.jobs.outputs import OutputStore
    from sapiens2_demo.media.image import LoadedImage

    answers = []
    real_infer = image_jobs.infer
    monkeypatch.setattr(image_jobs, "infer", lambda *a, **k: answers.append(real_infer(*a, **k)) or answers[-1])
    loaded = LoadedImage(image, image.shape[:2], [])

    def zipped(name):
        ctx = image_jobs.AppContext(manager=standin_manager, outputs=OutputStore(tmp_path / name))
        out = image_jobs.all_tasks(ctx, loaded, run_dir=ctx.outputs.new_run_dir(None))
        with zipfile.ZipFile(out.files[0]) as zf:
            return sorted(zf.namelist())

    float_road = zipped("float32")
    monkeypatch.setattr(dense, "use_device_post", lambda device: True)
    monkeypatch.setattr(device_post, "use_device_post", lambda device: True)
    light_calls = len(answers)
    light_road = zipped("light")
    assert light_road == float_road and len(light_road) > 5
    by_task = {type(a[0]).__name__: a[0] for call in answers[light_calls:] for a in call if not isinstance(a, Exception)}
    assert codes_of(by_task["NormalsResult"], "normals") is not None
    assert codes_of(by_task["MattingResult"], "alpha") is not None
    assert by_task["PointmapResult"].points is not None and by_task["PointmapResult"].points.dtype == np.float32

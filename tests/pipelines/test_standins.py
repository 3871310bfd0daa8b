"""Stand-in checkpoints (standins/train.py: tiny configs trained on synthetic targets; stand-ins, not models): they
load through the normal path, in the same layout and configs as the random-weight ones, and their outputs have the
loose structure of real ones where random weights give noise (`python -m benchmarks standins` prints the figures)."""

import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from sapiens2_demo.models.registry import TASKS, checkpoint

ASTRONAUT_BOX = [[30, 10, 370, 512]]


@pytest.fixture(scope="module")
def astronaut():
    from sapiens2_demo.standins.targets import build_scene

    return build_scene("astronaut")


def test_standins_load_through_the_normal_path_with_the_tiny_configs(standin_dir, tiny_dir, standin_manager, manager):
    from sapiens2_demo.models.inference import input_size
    from sapiens2_demo.standins.tiny import TINY_INPUT

    assert "not models" in (standin_dir / "STANDINS.txt").read_text().lower()
    for task in TASKS.values():
        ckpt = checkpoint(task.name, task.sizes[0])
        ours, tiny = (json.loads((root / ckpt.dirname / "config.json").read_text()) for root in (standin_dir, tiny_dir))
        assert ours == tiny, task.name  # same configs: only the weights differ
        assert (standin_dir / ckpt.dirname / "model.safetensors").exists()
        loaded = standin_manager.get(ckpt)
        assert type(loaded.model) is type(manager.get(ckpt).model) and input_size(loaded.processor) == TINY_INPUT
    assert (standin_dir / "yolov8n-random.pt").exists()


def test_body_parts_are_a_few_large_regions(standin_manager, manager, astronaut):
    from sapiens2_demo.pipelines.dense import segment

    labels = segment(astronaut.image, standin_manager).labels
    same = (labels[:, 1:] == labels[:, :-1]).mean()
    random_same = (lambda other: (other[:, 1:] == other[:, :-1]).mean())(segment(astronaut.image, manager).labels)
    assert same >= 0.9 and same > random_same
    person = astronaut.parts > 0
    assert (labels[person] > 0).mean() > 0.6  # the person is mostly labelled as a body part


def test_normals_are_smooth_enough_to_compress(standin_manager, manager, astronaut, tmp_path):
    from sapiens2_demo.export.image import write_normals_png
    from sapiens2_demo.pipelines.dense import estimate_normals, segment

    sizes = []
    for which in (standin_manager, manager):  # as the normals task writes it: background removed
        mask = segment(astronaut.image, which).labels > 0
        result = estimate_normals(astronaut.image, which, mask=mask)
        sizes.append(write_normals_png(result, tmp_path / str(len(sizes)), bits=16).stat().st_size)
    assert sizes[0] < 0.75 * sizes[1]


def test_pose_maps_take_the_fast_decode_path(standin_manager, astronaut, monkeypatch):
    from sapiens2_demo.pipelines import pose as pipeline
    from sapiens2_demo.pose.decode import slow_path_maps

    captured = []
    real = pipeline.decode_heatmaps
    monkeypatch.setattr(pipeline, "decode_heatmaps", lambda heatmaps, *a, **k: captured.append(heatmaps.clone())
                        or real(heatmaps, *a, **k))
    result = pipeline.estimate_pose(astronaut.image, standin_manager, boxes=ASTRONAUT_BOX)
    assert 1 - slow_path_maps(captured[0]).mean() >= 0.9
    # One clear peak near a plausible place: the nose in the upper half of the box, the face's points together.
    nose = result.keypoints[0, 0]
    assert 30 <= nose[0] <= 370 and 10 <= nose[1] <= 260
    assert result.keypoint_scores[0].min() > 0


def test_matte_follows_the_person(standin_manager, manager, astronaut):
    from sapiens2_demo.pipelines.dense import estimate_matting

    person = astronaut.parts > 0

    def iou(which):
        alpha = estimate_matting(astronaut.image, which).alpha > 0.5
        return (alpha & person).sum() / (alpha | person).sum()

    assert iou(standin_manager) > 0.5 and iou(standin_manager) > iou(manager)


def test_features_vary_smoothly(standin_manager, manager, astronaut):
    from sapiens2_demo.pipelines.features import extract_features

    def roughness(which):
        patches = extract_features([astronaut.image], which)[0].patches
        steps = np.square(np.diff(patches, axis=0)).mean() + np.square(np.diff(patches, axis=1)).mean()
        return steps / patches.var(axis=(0, 1)).mean()

    assert roughness(standin_manager) < roughness(manager)


def mesh_shape(manager, scene, folder) -> dict[str, float]:
    """person_mesh.glb as the depth task writes it (background removed by the body parts), read back, in the glTF
    frame (x right, y up, z towards the viewer): its extents (2nd to 98th percentile, metres), how far its vertex
    cloud is from a line (2nd over 1st singular value), how well the masked pointmap's x and y follow the pixel's
    column and row (seen from the front it is the silhouette), and the silhouette's own height over width (pixels)."""
    import trimesh

    from sapiens2_demo.export.mesh import result_mesh, write_mesh_glb
    from sapiens2_demo.pipelines.dense import estimate_pointmap, segment

    mask = segment(scene.image, manager).labels > 0
    result = estimate_pointmap(scene.image, manager, mask=mask)
    path = write_mesh_glb(result_mesh(result, scene.image, mask), folder)
    vertices = np.asarray(trimesh.load(path, force="mesh").vertices, dtype=np.float64)
    width, height, depth = np.subtract(*np.percentile(vertices, [98, 2], axis=0))
    spread = np.linalg.svd(vertices - vertices.mean(axis=0), compute_uv=False)
    rows, cols = np.nonzero(mask)
    points = result.points[rows, cols]
    return {"width": width, "height": height, "depth": depth, "line": spread[1] / spread[0],
            "x_follows_column": np.corrcoef(points[:, 0], cols)[0, 1],
            "y_follows_row": np.corrcoef(points[:, 1], rows)[0, 1],
            "silhouette_aspect": np.subtract(*np.percentile(rows, [98, 2])) / np.subtract(*np.percentile(cols, [98, 2]))}


@pytest.mark.parametrize("photo", ["astronaut", "camera"])
def test_the_mesh_is_person_shaped_not_a_line(standin_manager, photo, tmp_path):
    """The old stand-ins' mesh was a streak: astronaut line 0.11, x against the column -0.19 (camera 0.12, -0.62)."""
    from sapiens2_demo.standins.targets import build_scene

    shape = mesh_shape(standin_manager, build_scene(photo), tmp_path)
    assert shape["x_follows_column"] > 0.9 and shape["y_follows_row"] > 0.9, shape  # from the front: the silhouette
    assert shape["line"] > 0.4, shape
    # as tall for its width as the silhouette, give or take a quarter (the sides recede, and x grows with depth)
    assert shape["height"] / shape["width"] > 0.75 * shape["silhouette_aspect"], shape
    assert 0.05 < shape["depth"] < shape["height"], shape  # a body's relief, neither a flat card nor a streak


def test_one_builder_at_a_time_and_a_set_appears_whole(tmp_path, monkeypatch):

    from sapiens2_demo.standins import train

    built, messages = [], []

    def write_slowly(root, progress=True):  # a build, without its minutes
        built.append(root)
        time.sleep(0.5)
        assert not any(path.name.startswith("standins-") and path.is_dir() and "building" not in path.name
                       for path in tmp_path.iterdir())  # nothing half-built under the final name
        (root / train.MARKER).write_text("stand-ins")
        return root

    monkeypatch.setattr(train, "write_standins", write_slowly)
    barrier = threading.Barrier(2)

    def build(_):
        barrier.wait()
        return train.cached_standins(tmp_path, detector=False, log=messages.append)

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(build, range(2))
    assert first == second == tmp_path / f"standins-{train.standin_key()}" and len(built) == 1
    assert (first / train.MARKER).exists() and not [path for path in tmp_path.iterdir() if "building" in path.name]
    assert any("Training them now, once" in message and str(first) in message for message in messages)
    assert any("waiting" in message for message in messages) and any("reusing" in message for message in messages)
    assert train.cached_standins(tmp_path, detector=False, log=messages.append) == first and len(built) == 1


def test_the_key_is_worked_out_once_even_from_many_threads_at_once(monkeypatch):
    # CPython 3.11's ast.parse raises SystemError when two threads parse at once (two first requests, each
    # building stand-ins): the key is parsed once per process, under a lock
    from sapiens2_demo.standins import train

    parsed, real = [], train._code_only
    monkeypatch.setattr(train, "_code_only", lambda path: parsed.append(path) or real(path))
    train._standin_key.cache_clear()
    barrier = threading.Barrier(8)

    def key(_):
        barrier.wait()
        return train.standin_key()

    with ThreadPoolExecutor(8) as pool:
        keys = set(pool.map(key, range(8)))
    assert len(keys) == 1 and len(parsed) == 3  # train.py, targets.py, tiny.py: once each

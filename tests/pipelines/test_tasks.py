"""Tab-level orchestration: the shared segmentation cache, masking, All-tasks archive."""

import dataclasses
import time
import zipfile

import numpy as np
import pytest

from sapiens2_demo import util
from sapiens2_demo.jobs import image as image_jobs
from sapiens2_demo.jobs.outputs import OutputStore
from sapiens2_demo.media.image import load_image
from sapiens2_demo.models.registry import checkpoint
from sapiens2_demo.pipelines import dense
from sapiens2_demo.pipelines.dense import SegmentationCache
from tests.conftest import ASSETS, checkpoints_without


@pytest.fixture()
def ctx(manager, tmp_path):
    return image_jobs.AppContext(manager=manager, outputs=OutputStore(tmp_path / "out"))


def _count_forwards(manager, task, monkeypatch):
    model = manager.get(checkpoint(task, "0.4b")).model
    calls = []
    real = model.forward

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(model, "forward", counting)
    return calls


def test_one_segmentation_forward_serves_normals_depth_and_all_tasks(ctx, monkeypatch):
    seg_calls = _count_forwards(ctx.manager, "seg", monkeypatch)
    image = load_image(ASSETS / "grace_hopper.jpg")
    image_jobs.run_task(ctx, image, task="normals", run_dir=ctx.outputs.new_run_dir("s"))
    image_jobs.run_task(ctx, image, task="pointmap", run_dir=ctx.outputs.new_run_dir("s"))
    image_jobs.all_tasks(ctx, image, run_dir=ctx.outputs.new_run_dir("s"))
    assert len(seg_calls) == 1
    other = load_image(ASSETS / "astronaut.jpg")  # another image is another forward
    image_jobs.run_task(ctx, other, task="normals", run_dir=ctx.outputs.new_run_dir("s"))
    assert len(seg_calls) == 2


def test_a_result_from_the_cache_says_it_was_reused(ctx, monkeypatch):
    """Body parts of an image segmented before: no forward, and the notes say the result was reused (it said
    "Body parts took 0.00 s"); the cache's own copy stays unmarked."""
    seg_calls = _count_forwards(ctx.manager, "seg", monkeypatch)
    image = load_image(ASSETS / "grace_hopper.jpg")
    first = image_jobs.run_task(ctx, image, task="segment", run_dir=ctx.outputs.new_run_dir("s"))
    again = image_jobs.run_task(ctx, image, task="segment", run_dir=ctx.outputs.new_run_dir("s"))
    assert len(seg_calls) == 1
    assert any(note.startswith("Body parts took ") for note in first.notes), first.notes
    assert not any("took" in note for note in again.notes), again.notes
    assert any(note.startswith("Body parts: reused the result of an earlier request on this image (")
               for note in again.notes), again.notes
    assert not any(item.reused for item in ctx.seg_cache._items.values())


def test_all_tasks_runs_one_pointmap_forward_for_depth_and_the_pose_lift(ctx, monkeypatch):
    pointmap_calls = _count_forwards(ctx.manager, "pointmap", monkeypatch)
    out = image_jobs.all_tasks(ctx, load_image(ASSETS / "camera.jpg"), run_dir=ctx.outputs.new_run_dir("s"))
    assert any(note.startswith("Pose: Lifted to 3D") for note in out.notes)  # the lift ran
    assert len(pointmap_calls) == 1


def test_cache_is_bounded_and_keyed_by_content_and_checkpoint():
    cache = SegmentationCache(max_items=2)
    a, b = np.zeros((8, 8, 3), np.uint8), np.ones((8, 8, 3), np.uint8)
    assert cache.key(a, "r", "main") == cache.key(a.copy(), "r", "main")
    assert cache.key(a, "r", "main") != cache.key(b, "r", "main")
    assert cache.key(a, "r", "main") != cache.key(a, "r", "refs/pr/1")
    assert cache.key(a, "r", "main") != cache.key(a.reshape(4, 16, 3), "r", "main")
    computed = []
    for key in ("k1", "k2", "k3", "k1"):
        cache.get_or_compute(key, lambda key=key: computed.append(key) or key)
    assert computed == ["k1", "k2", "k3", "k1"]  # k1 was evicted when k3 came in


def _count_digests(monkeypatch):
    """Counts the pixel hashes the cache's keys compute."""
    made = []
    real = util._pixel_hash

    def counting(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(util, "_pixel_hash", counting)
    return made


def test_an_image_is_hashed_once_however_many_keys_it_makes(monkeypatch):
    """One image object keys the cache several times in a request (All tasks: six); its pixels are hashed once,
    and again only once they change in place."""
    made = _count_digests(monkeypatch)
    image = np.arange(8 * 8 * 3, dtype=np.uint8).reshape(8, 8, 3)
    first = SegmentationCache.key(image, "r", "main")
    assert SegmentationCache.key(image, "other", "main")[0] == first[0]
    assert len(made) == 1
    image[0, 0, 0] += 1  # changed in place: a new digest, the one a fresh copy gets
    changed = SegmentationCache.key(image, "r", "main")
    assert changed != first and changed == SegmentationCache.key(image.copy(), "r", "main")


def test_all_tasks_hashes_its_image_once(ctx, monkeypatch):
    image = load_image(ASSETS / "camera.jpg")
    made = _count_digests(monkeypatch)
    image_jobs.all_tasks(ctx, image, run_dir=ctx.outputs.new_run_dir("s"))
    assert len(made) == 1


def test_background_removal_blackens_the_background(ctx):
    image = load_image(ASSETS / "grace_hopper.jpg")
    out = image_jobs.run_task(ctx, image, task="normals", run_dir=ctx.outputs.new_run_dir("s"), background="black")
    labels = dense.segment(image.rgb, ctx.manager, cache=ctx.seg_cache).labels
    rendered = out.main
    assert (rendered[labels == 0] == 0).all()
    assert (rendered[labels > 0].sum(axis=-1) > 0).all()


def test_all_tasks_zip_holds_every_default_download(ctx):
    """The tasks' default (light) downloads: the raw arrays and point clouds come from the task endpoints with
    raw_data, or the batch CLI."""
    out = image_jobs.all_tasks(ctx, load_image(ASSETS / "astronaut.jpg"), run_dir=ctx.outputs.new_run_dir("s"))
    assert [caption for _, caption in out.gallery] == ["Input", "Pose", "Body parts", "Normals", "Depth", "Matting"]
    from sapiens2_demo.render.depth import TILE_BAR_WIDTH, tile_fontsize

    (picture, _), (depth, _) = out.gallery[0], out.gallery[4]  # the depth tile's colour bar is drawn for a cell
    height, width = picture.shape[:2]
    assert depth.shape[0] == height and depth.shape[1] - width == round(TILE_BAR_WIDTH * tile_fontsize(height, width))
    with zipfile.ZipFile(out.files[0]) as zf:
        names = zf.namelist()
    for expected in ("pose/pose_sapiens2.json", "pose/pose_coco17.json", "body_parts/body_parts_labels.png",
                     "normals/normals16.png", "depth/depth_mm.png", "matting/matting_alpha.png",
                     "depth/person_mesh.glb", "pose/pose_coco_wholebody.json", "pose/pose_3d.json"):
        assert expected in names, (expected, names)
    assert not [name for name in names if name.endswith((".npy", ".ply"))], names


def test_all_tasks_reports_a_failing_task_and_keeps_the_rest(manager, tmp_path, tiny_dir):
    from sapiens2_demo.models.manager import ModelManager

    partial = checkpoints_without(tiny_dir, tmp_path / "ckpts", "pose", "pointmap", "matting", "pretrain")
    ctx = image_jobs.AppContext(manager=ModelManager(checkpoint_dir=partial, device="cpu", dtype="float32",
                                                detector="/nonexistent.pt"), outputs=OutputStore(tmp_path / "out"))
    out = image_jobs.all_tasks(ctx, load_image(ASSETS / "camera.jpg"), run_dir=ctx.outputs.new_run_dir("s"))
    assert [caption for _, caption in out.gallery] == ["Input", "Body parts", "Normals"]
    assert any("facebook/sapiens2-pose-0.4b" in note for note in out.notes)
    assert any("facebook/sapiens2-matting-1b" in note for note in out.notes)


def test_downloads_are_written_while_the_render_is_drawn(ctx, monkeypatch):
    """The writers start right after the model: a render that takes long (here 2 s more) finds its downloads
    written when it is shown (the answer first, the files after: the complete answer comes next)."""
    from sapiens2_demo import tasks

    spec = tasks.get("segment")
    present = spec.present

    def slow_present(*args, **kwargs):
        time.sleep(2.0)
        return present(*args, **kwargs)

    run_dir = ctx.outputs.new_run_dir("s")
    tasks.register(dataclasses.replace(spec, present=slow_present))
    try:
        steps = image_jobs.stream_task(ctx, load_image(ASSETS / "astronaut.jpg"), task="segment", run_dir=run_dir)
        shown = next(steps)
        written = sorted(path.name for path in run_dir.glob("*.png"))
        complete = next(steps)
    finally:
        tasks.register(spec)
    assert shown.main is not None and shown.files == [] and len(complete.files) == 2
    assert written == ["body_parts_colors.png", "body_parts_labels.png"]



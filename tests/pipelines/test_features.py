"""Features (pretrained backbone): loading, parity with transformers, the patch-grid mapping, PCA colouring,
the mask, joint PCA, exports, the task function and the /features endpoint."""

import contextlib
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PIL import Image

from sapiens2_demo.models.registry import checkpoint
from sapiens2_demo.pipelines.features import FeaturesResult, extract_features, patch_mask, pixel_cells
from sapiens2_demo.render.features import cosine_similarity, fit_pca, joint_pca_rgb, pca_rgb, upsample_to_image
from tests.conftest import ASSETS, free_port

TOLERANCE = dict(rtol=1e-5, atol=1e-5)  # same checkpoint, same fp32 CPU forward: only summation order differs


# -- loading and parity -----------------------------------------------------------------------------

def test_tiny_pretrain_loads_through_the_manager(manager, tiny_dir):
    loaded = manager.get(checkpoint("pretrain", "0.4b"))
    assert type(loaded.model).__name__ == "Sapiens2Model"
    assert loaded.source == str(tiny_dir / "sapiens2-pretrain-0.4b")
    assert (tiny_dir / "sapiens2-pretrain-0.4b" / "model.safetensors").is_file()
    assert loaded.processor.do_pad is False


def test_a_task_checkpoint_is_refused_as_the_pretrained_backbone(tiny_dir, tmp_path):
    from sapiens2_demo.models.manager import CheckpointUnavailable, ModelManager

    shutil.copytree(tiny_dir / "sapiens2-seg-0.4b", tmp_path / "sapiens2-pretrain-0.4b")
    manager = ModelManager(checkpoint_dir=tmp_path, device="cpu", dtype="float32")
    with pytest.raises(CheckpointUnavailable, match="task checkpoint"):
        manager.get(checkpoint("pretrain", "0.4b"))


def test_parity_with_transformers_model_and_backbone(manager, tiny_dir, person_image):
    import torch
    from transformers import AutoModel, Sapiens2Backbone, Sapiens2ImageProcessor

    ours = extract_features([person_image], manager)[0]
    assert ours.embedding.shape == (32,) and ours.embedding.dtype == np.float32
    assert ours.patches.shape == (16, 12, 32) and ours.patches.dtype == np.float32
    assert ours.input_hw == (256, 192) and ours.image_hw == person_image.shape[:2]

    path = tiny_dir / "sapiens2-pretrain-0.4b"
    processor = Sapiens2ImageProcessor.from_pretrained(path)  # its defaults, as the docs' example
    model = AutoModel.from_pretrained(path, local_files_only=True).eval()
    backbone = Sapiens2Backbone.from_pretrained(path, local_files_only=True).eval()
    backbone.config.return_class_token = True  # 5.23 ignores the forward kwarg the docs show
    inputs = processor(images=person_image, return_tensors="pt")
    with torch.inference_mode():
        outputs = model(**inputs)
        features = backbone(**inputs)
    registers = model.config.num_register_tokens
    reference = outputs.last_hidden_state[0, 1 + registers:].unflatten(0, (16, 12)).numpy()
    np.testing.assert_allclose(ours.embedding, outputs.pooler_output[0].numpy(), **TOLERANCE)
    np.testing.assert_allclose(ours.patches, reference, **TOLERANCE)
    np.testing.assert_allclose(ours.patches, features.feature_maps[-1][0].permute(1, 2, 0).numpy(), **TOLERANCE)
    np.testing.assert_allclose(ours.embedding, features.cls_tokens[-1][0].numpy(), **TOLERANCE)


def test_a_batch_equals_single_calls(manager, person_image):
    other = np.asarray(Image.open(ASSETS / "grace_hopper.jpg").convert("RGB"))
    batch = extract_features([person_image, other], manager)
    singles = [extract_features([frame], manager)[0] for frame in (person_image, other)]
    assert not np.allclose(batch[0].embedding, batch[1].embedding)  # two different images really
    for got, expected in zip(batch, singles):
        np.testing.assert_allclose(got.embedding, expected.embedding, **TOLERANCE)
        np.testing.assert_allclose(got.patches, expected.patches, **TOLERANCE)
        assert got.image_hw == expected.image_hw
    assert batch[1].image_hw == (600, 512)
    assert extract_features([], manager) == []


# -- the patch grid ---------------------------------------------------------------------------------

def test_the_processor_stretches_so_each_patch_covers_its_documented_box(manager):
    """A white block exactly on patch (3, 5)'s box in a 320x180 image lands on input patch (3, 5)."""
    from sapiens2_demo.models.inference import preprocess

    image = np.zeros((320, 180, 3), np.uint8)  # grid 16x12: one patch = 20x15 image pixels
    result = FeaturesResult(np.zeros(1), np.zeros((16, 12, 1)), (256, 192), (320, 180))
    x1, y1, x2, y2 = result.patch_box(3, 5)
    assert (x1, y1, x2, y2) == (75.0, 60.0, 90.0, 80.0)
    image[int(y1):int(y2), int(x1):int(x2)] = 255
    loaded = manager.get(checkpoint("pretrain", "0.4b"))
    pixels = preprocess(loaded, image, "pretrain")[0].mean(0).numpy()  # (256, 192), normalised
    assert pixels.shape == (256, 192)
    bright = pixels > pixels.min() + 0.5 * (pixels.max() - pixels.min())
    ys, xs = np.nonzero(bright)
    assert (ys.min(), ys.max() + 1, xs.min(), xs.max() + 1) == (3 * 16, 4 * 16, 5 * 16, 6 * 16)


def test_pixel_cells_and_patch_mask_known_answers():
    rows, cols = pixel_cells((10, 7), (4, 3))  # pixel centre (y + 0.5) * h / H
    assert rows.tolist() == [0, 0, 1, 1, 1, 2, 2, 3, 3, 3]
    assert cols.tolist() == [0, 0, 1, 1, 1, 2, 2]
    mask = np.zeros((10, 7), bool)
    mask[:4] = True  # patch row 1 holds pixel rows 2, 3, 4: two of three in
    assert patch_mask(mask, (4, 3)).tolist() == [[True] * 3, [True] * 3, [False] * 3, [False] * 3]
    mask[:] = False
    mask[:3] = True  # one of three: out
    assert patch_mask(mask, (4, 3))[:, 0].tolist() == [True, False, False, False]


def test_upsampling_is_nearest_patch():
    grid = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    image = upsample_to_image(grid, (5, 7))
    assert image.shape == (5, 7, 3)
    rows, cols = pixel_cells((5, 7), (2, 3))
    for y in range(5):
        for x in range(7):
            assert (image[y, x] == grid[rows[y], cols[x]]).all()
    assert (image[2, 3] == grid[1, 1]).all()  # centre (2.5, 3.5) -> patch (1, 1)


# -- PCA colouring ----------------------------------------------------------------------------------

def _synthetic(h=8, w=6, channels=10, signs=(1, 1, 1), seed=0):
    """Patches whose principal directions are exactly the first three axes, with spreads 10 : 3 : 1."""
    rng = np.random.default_rng(seed)
    raw = rng.standard_normal((h * w, 3))
    factors, _ = np.linalg.qr(raw - raw.mean(axis=0))  # zero-mean, orthogonal: uncorrelated factors
    factors = factors.T * np.sqrt(h * w)
    patches = np.full((h * w, channels), 5.0)  # an offset: the PCA must centre
    for axis, (spread, sign) in enumerate(zip((10.0, 3.0, 1.0), signs)):
        patches[:, axis] += sign * spread * factors[axis]
    return patches.reshape(h, w, channels), factors.reshape(3, h, w)


def test_pca_known_principal_directions_give_known_colour_order():
    patches, factors = _synthetic()
    rgb = pca_rgb(patches)
    assert rgb.shape == (8, 6, 3) and rgb.dtype == np.uint8
    for channel in range(3):  # R follows the strongest direction, G the second, B the third
        values, factor = rgb[..., channel].ravel().astype(float), factors[channel].ravel()
        inside = (values > 0) & (values < 255)  # beyond the 1st-99th percentiles they clip
        assert inside.sum() > 40
        assert (np.diff(values[inside][np.argsort(factor[inside])]) >= 0).all()  # same order
        assert np.corrcoef(values, factor)[0, 1] > 0.99
        assert values[np.argmin(factor)] == 0 and values[np.argmax(factor)] == 255


def test_pca_signs_are_deterministic():
    patches, factors = _synthetic(channels=40, signs=(-1, 1, -1))  # 40 > 3 + 8: the iterative path
    pca = fit_pca(patches.reshape(-1, 40))
    np.testing.assert_allclose(np.abs(pca.components[:, :3]), np.eye(3), atol=1e-9)
    assert (pca.components[np.arange(3), np.argmax(np.abs(pca.components), axis=1)] > 0).all()
    rgb = pca_rgb(patches)
    assert np.corrcoef(rgb[..., 0].ravel(), factors[0].ravel())[0, 1] < -0.99  # the data's sign, not the SVD's
    shuffled = np.random.default_rng(1).permutation(patches.reshape(-1, 40))
    np.testing.assert_allclose(fit_pca(shuffled).components, pca.components, atol=1e-9)


def test_top_eigenvectors_match_a_full_eigendecomposition():
    from sapiens2_demo.render.features import _top_eigenvectors

    rng = np.random.default_rng(4)
    data = rng.standard_normal((500, 64)) * np.linspace(3, 0.1, 64)  # decaying spectrum, random axes
    data = data @ np.linalg.qr(rng.standard_normal((64, 64)))[0]
    scatter = data.T @ data
    values, vectors = _top_eigenvectors(scatter, 3)
    exact_values, exact_vectors = np.linalg.eigh(scatter)
    np.testing.assert_allclose(values, exact_values[::-1][:3], rtol=1e-9)
    np.testing.assert_allclose(np.abs(np.sum(vectors * exact_vectors[:, ::-1][:, :3].T, axis=1)), 1, atol=1e-9)


def test_pca_is_fitted_on_the_mask_only_and_masked_patches_are_black():
    patches, _ = _synthetic()
    mask = np.zeros((8, 6), bool)
    mask[:, :4] = True
    reference = pca_rgb(patches, mask)
    assert (reference[~mask] == 0).all() and reference[mask].any()
    spoiled = patches.copy()
    spoiled[0, 5] = 1e6  # a huge outlier outside the mask
    np.testing.assert_array_equal(pca_rgb(spoiled, mask), reference)
    assert not np.array_equal(pca_rgb(spoiled)[mask], pca_rgb(patches)[mask])  # without the mask it would
    with pytest.raises(ValueError, match="two patches"):
        pca_rgb(patches, np.zeros((8, 6), bool))
    with pytest.raises(ValueError, match="does not match"):
        pca_rgb(patches, np.ones((4, 4), bool))


def test_joint_pca_of_an_image_with_itself_gives_the_same_colours():
    patches, _ = _synthetic()
    a, b = joint_pca_rgb(patches, patches.copy())
    np.testing.assert_array_equal(a, b)
    assert a.std() > 30  # real colours, not a flat picture
    other, _ = _synthetic(seed=3)
    a2, b2 = joint_pca_rgb(patches, other * 2)
    assert not np.array_equal(a2, b2)


def test_joint_pca_puts_matching_parts_in_matching_colours():
    """Image b holds image a's patches shuffled: a patch has the same colour wherever it went."""
    patches, _ = _synthetic()
    order = np.random.default_rng(2).permutation(48)
    shuffled = patches.reshape(48, -1)[order].reshape(8, 6, -1)
    a, b = joint_pca_rgb(patches, shuffled)
    np.testing.assert_array_equal(a.reshape(48, 3)[order], b.reshape(48, 3))


def test_cosine_similarity_known_answers():
    assert cosine_similarity([1, 0], [0, 2]) == 0.0
    assert cosine_similarity([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert cosine_similarity([1, 2], [-1, -2]) == pytest.approx(-1.0)
    assert cosine_similarity([1, 1], [1, 0]) == pytest.approx(2 ** -0.5)
    with pytest.raises(ValueError):
        cosine_similarity([0, 0], [1, 0])
    with pytest.raises(ValueError):
        cosine_similarity([1, 0, 0], [1, 0])


# -- exports and the task function ----------------------------------------------------------------

def test_exports(tmp_path):
    from sapiens2_demo.export.features import write_features

    rng = np.random.default_rng(0)
    result = FeaturesResult(rng.standard_normal(32).astype(np.float32),
                            rng.standard_normal((16, 12, 32)).astype(np.float32), (256, 192), (60, 40))
    picture = rng.integers(0, 255, (60, 40, 3), dtype=np.uint8)
    files = write_features(result, picture, tmp_path, prefix="features2")
    assert [f.name for f in files] == ["features2_cls_embedding.npy", "features2_patch_features.npy",
                                       "features2_pca.png"]
    embedding, patches = np.load(files[0]), np.load(files[1])
    assert embedding.dtype == np.float32 and embedding.shape == (32,)
    np.testing.assert_array_equal(embedding, result.embedding)
    assert patches.dtype == np.float16 and patches.shape == (16, 12, 32)
    np.testing.assert_allclose(patches, result.patches, rtol=1e-3, atol=1e-3)
    np.testing.assert_array_equal(np.asarray(Image.open(files[2])), picture)


@pytest.fixture()
def ctx(manager, tmp_path):
    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.jobs.outputs import OutputStore

    return AppContext(manager=manager, outputs=OutputStore(tmp_path / "outputs"))


def _loaded(rgb):
    from sapiens2_demo.media.image import LoadedImage

    return LoadedImage(rgb, rgb.shape[:2], [])


def _segmentation_stub(monkeypatch, person_columns):
    """The body-part segmentation replaced by a known answer: 'person' in the given image columns."""
    from sapiens2_demo.pipelines import dense
    from sapiens2_demo.results import SegmentationResult

    def segment_batch(frames, manager, size="0.4b", cache=None):
        results = []
        for frame in frames:
            labels = np.zeros(frame.shape[:2], np.uint8)
            labels[:, person_columns] = 5
            results.append(SegmentationResult(labels))
        return results

    monkeypatch.setattr(dense, "segment_batch", segment_batch)


def test_run_features_one_image_with_the_person_mask(ctx, person_image, tmp_path, monkeypatch):
    from sapiens2_demo.jobs.features import run_features

    # 512 px wide, 12 patches of 42.7 px: patch columns 0-3 are in, column 4 (pixels 171-212) has 9 of 42 in
    _segmentation_stub(monkeypatch, slice(0, 180))
    out = run_features(ctx, _loaded(person_image), run_dir=tmp_path)
    assert sorted(f.name for f in out.files) == ["features_cls_embedding.npy", "features_patch_features.npy",
                                                 "features_pca.png"]
    before, after = out.before_after
    assert before.shape == after.shape == person_image.shape
    assert out.similarity is None and out.gallery is None
    rows, cols = pixel_cells(person_image.shape[:2], (16, 12))
    person = np.broadcast_to(cols < 4, person_image.shape[:2])  # patch columns 0-3 are the person's
    assert (after[~person] == 0).all() and after[person].any(axis=-1).mean() > 0.9
    assert "Patch grid 12 wide x 16 tall (one patch = 42.7 px wide x 32.0 px tall)" in " ".join(out.notes)


def test_the_0_1b_backbone_is_offered_and_runs_with_the_0_4b_body_parts(ctx, person_image, tiny_dir, tmp_path):
    """Meta's 0.1b is a backbone only (sapiens2_0.1b_pretrain): listed with the other sizes, the default stays 0.4b,
    and its person mask comes from the 0.4b body-part model (there is no 0.1b one)."""
    from sapiens2_demo import tasks
    from sapiens2_demo.jobs.features import run_features
    from sapiens2_demo.standins.tiny import write_tiny_checkpoint

    spec = tasks.get("features")
    assert "0.1b" in spec.sizes and spec.default_size() == "0.4b"
    write_tiny_checkpoint("pretrain", "0.1b", tiny_dir, seed=1)
    out = run_features(ctx, _loaded(person_image), run_dir=tmp_path, size="0.1b")
    assert ctx.manager.is_loaded(checkpoint("pretrain", "0.1b")) and ctx.manager.is_loaded(checkpoint("seg", "0.4b"))
    assert len(out.files) == 3 and out.before_after[1].shape == person_image.shape


def test_run_features_without_a_person_fits_every_patch(ctx, person_image, tmp_path, monkeypatch):
    from sapiens2_demo.jobs.features import run_features

    _segmentation_stub(monkeypatch, slice(0, 0))
    out = run_features(ctx, _loaded(person_image), run_dir=tmp_path)
    np.testing.assert_array_equal(out.main, run_features(ctx, _loaded(person_image), run_dir=tmp_path / "b",
                                                         use_mask=False).main)
    assert "found no person" in " ".join(out.notes)


def test_run_features_without_a_segmentation_model_says_so(person_image, tiny_dir, tmp_path):
    from sapiens2_demo.jobs.features import run_features
    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.jobs.outputs import OutputStore
    from sapiens2_demo.models.manager import ModelManager

    shutil.copytree(tiny_dir / "sapiens2-pretrain-0.4b", tmp_path / "ckpt" / "sapiens2-pretrain-0.4b")
    manager = ModelManager(checkpoint_dir=tmp_path / "ckpt", device="cpu", dtype="float32")
    ctx = AppContext(manager=manager, outputs=OutputStore(tmp_path / "outputs"))
    out = run_features(ctx, _loaded(person_image), run_dir=tmp_path / "run")
    assert "segmentation model is unavailable" in " ".join(out.notes)
    assert len(out.files) == 3 and out.main.any(axis=-1).all()  # every patch coloured, none masked out


def test_run_features_image_with_itself_and_with_another(ctx, person_image, tmp_path):
    from sapiens2_demo.jobs.features import run_features

    same = run_features(ctx, _loaded(person_image), _loaded(person_image.copy()), run_dir=tmp_path / "same",
                        use_mask=False)
    assert same.similarity == pytest.approx(1.0, abs=1e-6)
    np.testing.assert_array_equal(same.before_after[1], same.gallery[1][0])  # same colours
    assert len(same.files) == 6 and {f.name for f in same.files} >= {"features2_patch_features.npy"}
    other = np.asarray(Image.open(ASSETS / "grace_hopper.jpg").convert("RGB"))
    pair = run_features(ctx, _loaded(person_image), _loaded(other), run_dir=tmp_path / "pair")
    assert -1 <= pair.similarity < 1 - 1e-4
    assert pair.gallery[1][0].shape == other.shape
    assert f"{pair.similarity:.4f}" in " ".join(pair.notes)


# -- the /features endpoint -------------------------------------------------------------------------

def _blocks_with_the_features_tab(ctx):
    """A gr.Blocks holding only the Features tab, wired as build_app wires its tabs."""
    import gradio as gr

    from sapiens2_demo.media.image import ImageError, load_image
    from sapiens2_demo.ui.common import ImageUpload, user_errors
    from sapiens2_demo.ui.common import as_display_files as _as_display_files
    from sapiens2_demo.ui.features_tab import build_features_tab

    def run(task_title, fn, image, request, progress, **kwargs):
        with user_errors(task_title):
            if image is None:
                raise ImageError("Please upload an image first.")
            run_dir = ctx.outputs.new_run_dir(getattr(request, "session_hash", None))
            loaded = load_image(image)
            out = fn(ctx, loaded, run_dir=run_dir, progress=progress, **kwargs)
            return _as_display_files(out, run_dir, loaded, None)

    @contextlib.contextmanager
    def task_tab(title, tab_id):
        with gr.Tab(title, id=tab_id):
            with gr.Row():
                with gr.Column() as inputs:
                    img = ImageUpload(type="filepath", label="Image")
                with gr.Column():
                    results = gr.Column()
                    info = gr.Markdown()
            yield SimpleNamespace(img=img, inputs=inputs, results=results, info=info)

    with gr.Blocks() as demo:
        build_features_tab(ctx, task_tab, run)
    return demo


def test_features_endpoint_through_gradio_client(ctx, tmp_path):
    from gradio_client import Client, handle_file

    demo = _blocks_with_the_features_tab(ctx)
    port = free_port()
    demo.queue().launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        client = Client(f"http://127.0.0.1:{port}/", verbose=False)
        api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]["/features"]
        assert [p["parameter_name"] for p in api["parameters"]] == ["image", "image2", "size", "use_mask"]
        assert all(p["parameter_has_default"] for p in api["parameters"][1:])

        astronaut = handle_file(str(ASSETS / "astronaut.jpg"))
        slider, slider2, similarity, files, notes = client.predict(astronaut, api_name="/features")
        before, after = (np.asarray(Image.open(path)) for path in slider)
        assert before.shape == after.shape == (512, 512, 3)
        assert slider2 is None and similarity is None
        assert sorted(Path(f).name for f in files) == ["features_cls_embedding.npy",
                                                       "features_patch_features.npy", "features_pca.png"]
        assert np.load(next(f for f in files if "patch" in f)).shape == (16, 12, 32)

        hopper = handle_file(str(ASSETS / "grace_hopper.jpg"))
        slider, slider2, similarity, files, notes = client.predict(astronaut, image2=hopper, use_mask=False,
                                                                   api_name="/features")
        assert np.asarray(Image.open(slider2[1])).shape == (600, 512, 3)
        assert -1 <= similarity < 1 and len(files) == 6 and "Cosine similarity" in notes

        bogus = tmp_path / "second.jpg"
        bogus.write_text("this is not an image")
        with pytest.raises(Exception) as info:
            client.predict(astronaut, image2=handle_file(str(bogus)), api_name="/features")
        assert "Second image:" in str(info.value) and "Traceback" not in str(info.value)
        assert client.predict(astronaut, use_mask=False, api_name="/features")[3]  # still answering
    finally:
        demo.close()


def test_features_endpoint_in_the_full_app(client):
    """The tab as wired into build_app: /features answers through the app's GPU boundary."""
    from gradio_client import handle_file

    from tests.conftest import ASSETS

    outputs = client.predict(handle_file(str(ASSETS / "astronaut.jpg")), api_name="/features")
    files = outputs[-2]
    names = {Path(p).name for p in (files if isinstance(files, list) else [files])}
    assert {"features_cls_embedding.npy", "features_patch_features.npy"} <= names, names

"""--compile auto|on|off and the regional compiler's safety, on the tiny seg model with dynamo's `eager`
backend (the graph machinery without inductor's C++ compile, so these run in seconds). The inductor path, its
cache and the batch CLI are in tests/system/test_compile_cli.py."""

import numpy as np
import pytest
import torch

from sapiens2_demo.models import compile as regional

SIZE = (256, 192)  # the tiny checkpoints' input (standins/tiny.py)


@pytest.fixture()
def seg_model(tiny_dir):
    from transformers import AutoModelForSemanticSegmentation

    return AutoModelForSemanticSegmentation.from_pretrained(tiny_dir / "sapiens2-seg-0.4b",
                                                            attn_implementation="sdpa").eval()


@pytest.fixture(autouse=True)
def fresh_dynamo(tmp_path, monkeypatch):
    monkeypatch.setenv(regional.CACHE_ENV, str(tmp_path / "compile-cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "compile-cache" / "inductor"))
    limit = torch._dynamo.config.recompile_limit
    torch._dynamo.reset()
    yield
    torch._dynamo.config.recompile_limit = limit
    torch._dynamo.reset()


def logits(model, batch: int, seed: int = 0, grad: bool = False) -> torch.Tensor:
    x = torch.randn(batch, 3, *SIZE, generator=torch.Generator().manual_seed(seed))
    if grad:
        with torch.enable_grad():
            return model(pixel_values=x).logits.detach()
    with torch.inference_mode():
        return model(pixel_values=x).logits


def graphs() -> int:
    return torch._dynamo.utils.counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("given, env, device, expected", [
    (None, None, "cuda", True), (None, None, "cpu", False), (None, None, "mps", False), ("auto", None, "cuda:1", True),
    ("on", None, "cpu", True), ("off", None, "cuda", False), (None, "1", "cpu", True), (None, "off", "cuda", False),
    (True, None, "cpu", True), (False, None, "cuda", False),
])
def test_mode(monkeypatch, given, env, device, expected):
    if env is None:
        monkeypatch.delenv("SAPIENS2_COMPILE", raising=False)
    else:
        monkeypatch.setenv("SAPIENS2_COMPILE", env)
    assert regional.wanted(given, device) is expected


def test_bad_mode_is_a_clear_error():
    with pytest.raises(ValueError, match="auto, on or off"):
        regional.parse_mode("fast")


def test_flags(monkeypatch):
    import app
    from sapiens2_demo import cli

    monkeypatch.delenv("SAPIENS2_COMPILE", raising=False)
    assert app.parse_args([]).compile == "auto"
    assert app.parse_args(["--compile"]).compile == "on"  # the old bare flag keeps working
    assert app.parse_args(["--compile", "off"]).compile == "off"
    monkeypatch.setenv("SAPIENS2_COMPILE", "on")
    assert app.parse_args([]).compile == "on"
    args = cli.parse_args(["--input", "x", "--output", "y", "--compile", "off"])
    assert cli.options_from(args).compile == "off"
    with pytest.raises(SystemExit):
        cli.parse_args(["--input", "x", "--output", "y", "--compile", "fast"])


def test_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv(regional.CACHE_ENV, str(tmp_path / "mine"))
    assert regional.use_cache_dir() == tmp_path / "mine" / "inductor"
    monkeypatch.delenv(regional.CACHE_ENV)
    monkeypatch.setattr(regional, "PERSISTENT", tmp_path / "no-persistent-storage")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    import importlib

    from huggingface_hub import constants

    importlib.reload(constants)
    try:
        assert regional.cache_dir() == tmp_path / "sapiens2-compile"  # beside the Hugging Face cache
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir

        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # what torch writes when it first looks
        assert regional.use_cache_dir() == tmp_path / "sapiens2-compile" / "inductor"
        monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "users-own"))  # the user's choice is kept
        assert regional.use_cache_dir() == tmp_path / "users-own"
    finally:
        monkeypatch.undo()
        importlib.reload(constants)


def test_a_spaces_persistent_storage_keeps_the_cache(monkeypatch, tmp_path):
    """A Space with persistent storage mounts it at /data: the cache goes there and survives a restart; a read-only
    or missing /data leaves it beside the Hugging Face cache; SAPIENS2_COMPILE_CACHE still wins."""
    monkeypatch.delenv(regional.CACHE_ENV, raising=False)
    monkeypatch.setattr(regional, "PERSISTENT", tmp_path / "data")
    assert regional.cache_dir() != tmp_path / "data" / "sapiens2-compile"  # no storage: not there
    (tmp_path / "data").mkdir()
    assert regional.cache_dir() == tmp_path / "data" / "sapiens2-compile"
    monkeypatch.setattr(regional.os, "access", lambda path, mode: False)  # mounted read-only
    assert regional.cache_dir() != tmp_path / "data" / "sapiens2-compile"
    monkeypatch.undo()
    monkeypatch.setattr(regional, "PERSISTENT", tmp_path / "data")
    monkeypatch.setenv(regional.CACHE_ENV, str(tmp_path / "mine"))
    assert regional.cache_dir() == tmp_path / "mine"


def test_one_graph_for_every_batch_size(seg_model):
    expected = {batch: logits(seg_model, batch) for batch in (1, 3)}
    state = regional.compile_model(seg_model, SIZE, "cpu", torch.float32, backend="eager")
    assert state.status == "compiled", state.note
    assert len(regional.blocks(seg_model)) == 2  # the tiny backbone's two Sapiens2Layers
    after_warm_up = graphs()
    for batch in (1, 3, 5, 20, 2):
        logits(seg_model, batch)
    assert graphs() == after_warm_up  # no recompile after the warm-up
    for batch, reference in expected.items():
        torch.testing.assert_close(logits(seg_model, batch), reference, rtol=1e-5, atol=1e-5)


def test_failed_compile_at_load_leaves_the_model_eager(seg_model):
    reference = logits(seg_model, 2)

    def broken(gm, example_inputs):
        raise RuntimeError("no compiler here")

    state = regional.compile_model(seg_model, SIZE, "cpu", torch.float32, backend=broken)
    assert state.status == "eager"
    assert "at load" in state.note and "no compiler here" in state.note
    assert all(block._compiled_call_impl is None for block in regional.blocks(seg_model))
    torch.testing.assert_close(logits(seg_model, 2), reference)


def test_compile_error_at_run_time_falls_back_to_eager(seg_model):
    calls = []

    def first_graph_only(gm, example_inputs):  # compiles the warm-up's graph, fails on any later one
        calls.append(gm)
        if len(calls) > 1:
            raise RuntimeError("the compiler broke")
        return gm.forward

    state = regional.compile_model(seg_model, SIZE, "cpu", torch.float32, backend=first_graph_only)
    assert state.status == "compiled"
    reference = logits(seg_model, 2)
    out = logits(seg_model, 2, grad=True)  # grad mode: a new graph, which fails
    assert state.status == "eager" and "at run time" in state.note and "the compiler broke" in state.note
    torch.testing.assert_close(out, reference)  # the failing call itself ran eager
    torch.testing.assert_close(logits(seg_model, 2), reference)


def test_recompile_limit_falls_back_to_eager(seg_model):
    state = regional.compile_model(seg_model, SIZE, "cpu", torch.float32, backend="eager")
    torch._dynamo.config.recompile_limit = 1  # reached by the next new graph
    reference = logits(seg_model, 3)
    out = logits(seg_model, 3, grad=True)
    assert state.status == "eager" and "FailOnRecompileLimitHit" in state.note
    torch.testing.assert_close(out, reference)


def test_unusable_cache_folder_leaves_the_model_eager(seg_model, tmp_path, monkeypatch):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv(regional.CACHE_ENV, str(blocker))
    state = regional.compile_model(seg_model, SIZE, "cpu", torch.float32, backend="eager")
    assert state.status == "eager" and "at load" in state.note
    assert np.isfinite(logits(seg_model, 1).numpy()).all()


def test_load_hint_reports_the_last_time(tmp_path):
    assert "first time" in regional.load_hint("seg@cpu/float32")
    regional.record_load_seconds("seg@cpu/float32", 31.0)
    regional.record_load_seconds("seg@cpu/float32", 4.2)
    hint = regional.load_hint("seg@cpu/float32")
    assert "4.2 s last time" in hint and "at most 31 s" in hint


def test_manager_off_by_default_on_cpu(tiny_dir, monkeypatch):
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.models.registry import checkpoint

    monkeypatch.delenv("SAPIENS2_COMPILE", raising=False)
    manager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32")
    assert manager.compile is False and manager.load_hint(checkpoint("seg", "0.4b")) == ""
    loaded = manager.get(checkpoint("seg", "0.4b"))
    assert loaded.compiled is None and manager.take_compile_notes() == []
    assert all(block._compiled_call_impl is None for block in regional.blocks(loaded.model))


def test_an_image_request_says_it_compiles(tiny_dir, tmp_path, monkeypatch):
    """The UI's words: the loading message names the compile, the notes say how long it took (eager backend)."""
    from sapiens2_demo.jobs.image import AppContext, run_task
    from sapiens2_demo.media.image import load_image
    from sapiens2_demo.models.manager import ModelManager
    from tests.conftest import ASSETS

    compile_blocks = regional.compile_blocks
    monkeypatch.setattr(regional, "compile_blocks", lambda model, state, backend: compile_blocks(model, state, "eager"))
    ctx = AppContext(manager=ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", compile="on"))
    said = []
    out = run_task(ctx, load_image(ASSETS / "astronaut.jpg"), task="segment", run_dir=tmp_path,
                   progress=lambda fraction, desc="": said.append(desc))
    assert any("compiling: up to a minute or two the first time" in desc for desc in said), said
    assert any(note.startswith("sapiens2-seg-0.4b: compiled at load in") for note in out.notes), out.notes
    again = run_task(ctx, load_image(ASSETS / "astronaut.jpg"), task="segment", run_dir=tmp_path / "2")
    assert not any("compiled at load" in note for note in again.notes)  # said once


def test_no_cpp_compiler_leaves_the_model_eager(seg_model):
    """The real inductor backend on a machine without a working C++ compiler: eager, with the reason."""
    import torch._inductor.config as inductor_config

    reference = logits(seg_model, 2)
    with inductor_config.patch({"cpp.cxx": ("/nonexistent/g++",)}):
        state = regional.compile_model(seg_model, SIZE, "cpu", torch.float32)
    assert state.status == "eager" and "InvalidCxxCompiler: No working C++ compiler" in state.note
    torch.testing.assert_close(logits(seg_model, 2), reference)


def test_a_video_request_says_it_compiles(tiny_dir, tmp_path, monkeypatch):
    """The Video tab's words as the image tabs': the progress bar names the compile while the model loads, the
    notes say once how long it took (eager backend)."""
    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.ui.video_tab import run_video
    from tests.videos import make_video

    compile_blocks = regional.compile_blocks
    monkeypatch.setattr(regional, "compile_blocks", lambda model, state, backend: compile_blocks(model, state, "eager"))
    ctx = AppContext(manager=ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", compile="on"))
    clip = make_video(tmp_path / "clip.mp4", frames=3, size=(64, 48), audio=False)
    said = []
    [(_, files, notes)] = list(run_video(ctx, str(clip), task="segment", progress=lambda *a, desc="", **k: said.append(desc)))
    assert files and any("sapiens2-seg-0.4b" in desc and "compiling: up to a minute or two the first time" in desc
                         for desc in said), said
    assert "sapiens2-seg-0.4b: compiled at load in" in notes, notes
    [(_, _, again)] = list(run_video(ctx, str(clip), task="segment", progress=lambda *a, desc="", **k: said.append(desc)))
    assert "compiled at load" not in again  # said once


def test_a_features_request_says_its_own_compile(tiny_dir, monkeypatch):
    """The Features tab's answer carries its model's compile note (it was left for the next request of any tab,
    which then named a model it never ran)."""
    import gradio as gr

    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.ui.common import task_tab
    from sapiens2_demo.ui.features_tab import build_features_tab
    from sapiens2_demo.ui.image_tabs import run_request
    from tests.conftest import ASSETS

    compile_blocks = regional.compile_blocks
    monkeypatch.setattr(regional, "compile_blocks", lambda model, state, backend: compile_blocks(model, state, "eager"))
    ctx = AppContext(manager=ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", compile="on"))
    with gr.Blocks():
        features = build_features_tab(ctx, task_tab, lambda *args, **kwargs: run_request(ctx, *args, **kwargs))
    *_, notes = features(str(ASSETS / "astronaut.jpg"), use_mask=False, progress=None)
    assert "sapiens2-pretrain-0.4b: compiled at load in" in notes, notes
    *_, again = features(str(ASSETS / "astronaut.jpg"), use_mask=False, progress=None)
    assert "compiled at load" not in again  # nothing left over for the next request


def test_a_reload_from_the_compile_cache_says_so(seg_model, tiny_dir):
    """A second model of the same width compiles nothing (its blocks' code is compiled already): "loaded from the
    compile cache in N s", not "compiled at load in 0.0 s"."""
    from transformers import AutoModelForSemanticSegmentation

    first = regional.compile_model(seg_model, SIZE, "cpu", torch.float32, backend="eager")
    assert first.status == "compiled" and first.note.startswith("compiled at load in"), first.note
    again = AutoModelForSemanticSegmentation.from_pretrained(tiny_dir / "sapiens2-seg-0.4b",
                                                             attn_implementation="sdpa").eval()
    second = regional.compile_model(again, SIZE, "cpu", torch.float32, backend="eager")
    assert second.status == "compiled" and second.note.startswith("loaded from the compile cache in "), second.note
    assert second.note.endswith(f"{regional.seconds(second.seconds)} s")


def test_compile_notes_reach_the_requests_of_that_load_only(tiny_dir, monkeypatch):
    """A shared server: the load's note goes to the request that loaded the model and to one that waited for that
    load; not to a request of another model running meanwhile, nor to a later request of the same model (a
    visitor, or the next image after the Live tab loaded it)."""
    import threading

    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.models.registry import checkpoint

    compile_blocks = regional.compile_blocks
    monkeypatch.setattr(regional, "compile_blocks", lambda model, state, backend: compile_blocks(model, state, "eager"))
    manager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", compile="on")
    seg, pose = checkpoint("seg", "0.4b"), checkpoint("pose", "0.4b")
    loading, release = threading.Event(), threading.Event()
    load = manager._load_sapiens2

    def slow_load(ckpt):
        loading.set()
        release.wait(30)
        return load(ckpt)

    monkeypatch.setattr(manager, "_load_sapiens2", slow_load)
    loader_since = manager.notes_mark()
    loader = threading.Thread(target=manager.get, args=(seg,))
    loader.start()
    assert loading.wait(30)
    waiter_since, other_since = manager.notes_mark(), manager.notes_mark()  # both began during the load
    waiter = threading.Thread(target=manager.get, args=(seg,))
    waiter.start()
    release.set()
    loader.join(60)
    waiter.join(60)
    assert manager.load_counts == {("sapiens2", seg.repo_id, seg.revision): 1}
    [note] = manager.compile_notes(loader_since, [seg])
    assert note.startswith("sapiens2-seg-0.4b: compiled at load in"), note
    assert manager.compile_notes(waiter_since, [seg]) == [note]
    assert manager.compile_notes(other_since, [pose]) == []  # another model's request, meanwhile
    assert manager.compile_notes(manager.notes_mark(), [seg]) == []  # a later request of the same model
    assert manager.take_compile_notes() == [note] and manager.take_compile_notes() == []  # the CLI's: once


def test_a_request_hears_of_every_model_its_options_load():
    """The 3D lift loads the pointmap and body-part models beside pose: their compile notes are the request's too
    (the Video tab's 3D motion said nothing of the pointmap model's load)."""
    from sapiens2_demo import tasks
    from sapiens2_demo.jobs.image import job_checkpoints

    lifted = tasks.get("pose").job("0.4b", {"lift_3d": True})
    masked = tasks.get("normals").job("0.4b", {"remove_background": True})
    names = [ckpt.repo_id.split("/")[-1] for ckpt in job_checkpoints([lifted, masked])]
    assert names == ["sapiens2-pose-0.4b", "sapiens2-pointmap-0.4b", "sapiens2-seg-0.4b", "sapiens2-normal-0.4b",
                     "sapiens2-seg-0.4b"]
    assert job_checkpoints([tasks.get("pose").job("0.4b", {})])[0].repo_id.endswith("sapiens2-pose-0.4b")

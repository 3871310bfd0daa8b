"""The compiled form built beside a serving model (the app): no request waits for a compile, the swap keeps the
answers, a forward during the swap runs on one road; and the CLI's 'auto' compiles only when it pays. Dynamo's
`eager` backend (the graph machinery without inductor's C++ compile) unless a test says otherwise."""

import threading
import time

import pytest
import torch

from sapiens2_demo.models import compile as regional
from sapiens2_demo.models.inference import forward
from sapiens2_demo.models.manager import ModelManager
from sapiens2_demo.models.registry import checkpoint

SIZE = (256, 192)  # the tiny checkpoints' input (standins/tiny.py)
SEG = checkpoint("seg", "0.4b")


@pytest.fixture(autouse=True)
def fresh_dynamo(tmp_path, monkeypatch):
    monkeypatch.setenv(regional.CACHE_ENV, str(tmp_path / "compile-cache"))
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "compile-cache" / "inductor"))
    monkeypatch.setattr(regional, "BACKEND", "eager")
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def pixels(batch: int = 1, seed: int = 0) -> torch.Tensor:
    return torch.randn(batch, 3, *SIZE, generator=torch.Generator().manual_seed(seed))


def wait_for(state, status: str, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while state.status == "compiling" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert state.status == status, state.note


def background_manager(tiny_dir) -> ModelManager:
    return ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", compile="on",
                        compile_in_background=True)


def test_a_request_never_waits_for_a_compile(tiny_dir, monkeypatch):
    """A compile held back on purpose: the model is handed out at once and serves eager (the footer says so);
    when the compile is let go it is swapped in and later forwards run compiled, with the same answers."""
    release, began, calls = threading.Event(), [], []
    real_warm_up = regional.warm_up

    def slow_warm_up(*args, **kwargs):
        began.append(time.perf_counter())
        assert release.wait(120)  # the compile takes as long as the test wants
        return real_warm_up(*args, **kwargs)

    monkeypatch.setattr(regional, "warm_up", slow_warm_up)
    manager = background_manager(tiny_dir)
    started = time.perf_counter()
    loaded = manager.get(SEG)
    eager = forward(loaded, pixels())["logits"]
    answered = time.perf_counter()
    assert loaded.compiled.status == "compiling" and answered - started < 10, (loaded.compiled, answered - started)
    wait_until = time.monotonic() + 60
    while not began and time.monotonic() < wait_until:
        time.sleep(0.05)
    assert began and began[0] > answered  # the compile starts once the first forward is over, beside the model
    assert "compiling in the background: eager until then" in manager.road
    assert manager.take_compile_notes() == ["sapiens2-seg-0.4b: compiling in the background: eager until then."]
    release.set()
    wait_for(loaded.compiled, "compiled")
    counted = regional.blocks(loaded.model)[0]._compiled_call_impl
    regional.blocks(loaded.model)[0]._compiled_call_impl = lambda *a, **k: (calls.append(1), counted(*a, **k))[1]
    compiled = forward(loaded, pixels())["logits"]
    assert calls, "the forward after the swap did not take the compiled road"
    torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-5)
    notes = manager.take_compile_notes()
    assert len(notes) == 1 and "compiled in the background in" in notes[0], notes
    assert "eager until then" not in manager.road


def test_the_compile_waits_for_a_quiet_moment_after_the_answers(tiny_dir, monkeypatch):
    """Forwards coming one after another hold the background compile back (inductor's import and tracing would
    share the interpreter with their answers' drawing); it starts once none has run for QUIET_S."""
    began = []
    real_compile_model = regional.compile_model
    monkeypatch.setattr(regional, "QUIET_S", 1.0)
    monkeypatch.setattr(regional, "compile_model", lambda *a, **k: (began.append(time.monotonic()),
                                                                    real_compile_model(*a, **k))[1])
    loaded = background_manager(tiny_dir).get(SEG)
    for _ in range(8):  # a visitor's answers 0.3 s apart: never a quiet second
        forward(loaded, pixels())
        time.sleep(0.3)
    last = time.monotonic() - 0.3
    assert not began, "the compile started between the answers"
    wait_for(loaded.compiled, "compiled")
    assert began and began[0] >= last + 0.9, (began, last)


def test_a_forward_during_the_swap_runs_on_one_road(tiny_dir):
    """The compiled form swapped in while a forward is half-way: that forward finishes eager, the next one runs
    compiled in every block; never a mix."""
    manager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", compile="off")
    loaded = manager.get(SEG)
    reference = forward(loaded, pixels(2))["logits"]
    roads = []

    def counting(graph, example_inputs):
        def run(*args):
            roads[-1].append("compiled")
            return graph.forward(*args)
        return run

    state = regional.CompileState(status="compiling")
    regional.compile_blocks(loaded.model, state, backend=counting)
    loaded.compiled = state
    first, second = regional.blocks(loaded.model)[:2]
    first.register_forward_pre_hook(lambda module, args: setattr(state, "status", "compiled"))  # the swap
    for block in (first, second):
        block.register_forward_pre_hook(lambda module, args: roads[-1].append("block"))
    for _ in range(2):
        roads.append([])
        torch.testing.assert_close(forward(loaded, pixels(2))["logits"], reference, rtol=1e-5, atol=1e-5)
    assert roads[0] == ["block", "block"], roads  # swapped during it: eager to the end
    assert roads[1].count("compiled") == 2, roads  # the next: both blocks compiled


@pytest.mark.slow
def test_the_inductor_swap_keeps_the_answers_and_needs_no_recompile_per_batch(tiny_dir, monkeypatch):
    """The real road (inductor): answers within float32 tolerance of eager before and after the swap, and batch 1,
    3 and 8 after the swap make no new graph."""
    monkeypatch.setattr(regional, "BACKEND", "inductor")
    manager = background_manager(tiny_dir)
    loaded = manager.get(SEG)
    eager = {batch: forward(loaded, pixels(batch, seed=batch))["logits"] for batch in (1, 3, 8)}
    wait_for(loaded.compiled, "compiled")
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for batch, reference in eager.items():
        torch.testing.assert_close(forward(loaded, pixels(batch, seed=batch))["logits"], reference,
                                   rtol=1e-4, atol=1e-4)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs


def test_compiling_pays_from_the_measured_cost_and_gain(tmp_path):
    key = "facebook/sapiens2-seg-0.4b@cpu/bfloat16"
    assert regional.pays(key, 1)[0] is False and regional.pays(key, regional.PAYS_FROM)[0] is True  # unmeasured
    regional.record_load_seconds(key, 10.0)
    regional.record_timing(key, "eager", 1.0)
    regional.record_timing(key, "compiled", 0.5)
    worth, why = regional.pays(key, 21)
    assert worth and "as measured here" in why, why
    assert regional.pays(key, 19)[0] is False  # 19 x 0.5 s saved < 10 s of compiling


def test_the_cli_road_stays_eager_for_a_few_images_and_measures_it(tiny_dir):
    """'auto' where it would compile, for a 1-image run: eager, said so, and its forwards' times kept (the eager
    side of the next run's decision)."""
    manager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", compile="auto", work_size=1)
    manager.compile = True  # as on a CPU with native bf16, where 'auto' compiles
    loaded = manager.get(SEG)
    assert loaded.compiled.status == "off" and "does not pay" in loaded.compiled.note
    assert regional.blocks(loaded.model)[0]._compiled_call_impl is None
    for seed in range(3):
        forward(loaded, pixels(seed=seed))
    seen = regional._timings()[manager.compile_key(SEG)]
    assert seen["eager"] > 0 and "compiled" not in seen
    assert "does not pay" in manager.road


def test_a_batch_run_counts_its_images_and_frames(tmp_path):
    """What 'auto' weighs a compile against: each image once, each video's frames (an unreadable one counts one)."""
    from sapiens2_demo.batch.inputs import InputItem
    from sapiens2_demo.batch.runner import work_size
    from tests.videos import make_video

    clip = make_video(tmp_path / "clip.mp4", frames=30, size=(64, 48), fps=10, audio=False)
    (tmp_path / "broken.mp4").write_bytes(b"not a video")
    items = [InputItem(tmp_path / "a.jpg", "image", "a"), InputItem(tmp_path / "b.jpg", "image", "b"),
             InputItem(clip, "video", "clip"), InputItem(tmp_path / "broken.mp4", "video", "broken")]
    assert work_size(items) == 2 + 30 + 1


def test_a_compile_that_fails_in_the_background_leaves_the_model_serving_eager(tiny_dir, monkeypatch):
    def broken(graph, example_inputs):
        raise RuntimeError("no C++ compiler here")

    monkeypatch.setattr(regional, "BACKEND", broken)
    manager = background_manager(tiny_dir)
    loaded = manager.get(SEG)
    eager = forward(loaded, pixels())["logits"]
    wait_for(loaded.compiled, "eager")
    assert "compiling failed in the background" in loaded.compiled.note, loaded.compiled.note
    assert "compiling failed" in manager.road
    torch.testing.assert_close(forward(loaded, pixels())["logits"], eager)

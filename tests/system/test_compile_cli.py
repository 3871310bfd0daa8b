"""--compile on with inductor on the CPU (tiny checkpoints), as a user runs it.

1. The batch CLI over three images of different sizes and a 20-frame video, tasks seg and pose, with
   `--compile off`, then `--compile on` twice on one compile cache (a cold launch and a warm one), under
   TORCH_LOGS=recompiles: no recompile after each model's warm-up at load in either launch (at most two per
   model in all), the warm launch finds its artefacts in the cache (it writes no new compiled code), and the
   outputs equal --compile off's: body-part labels on >= 99.9 % of pixels; keypoints within 0.05 px wherever
   they are well-defined (the same crop, a unique peak, a well-conditioned sub-pixel step:
   tests/compile_parity.pose_parity, from the pose maps recorded in this process), heatmaps of the same
   crops within 1e-4 of their range.
   The wall-time target (warm <= 0.5x cold) is a figure: `python -m benchmarks compile` prints it.
2. The compiled models against the eager ones in this process: within 1e-4 relative at batch 1, 3 and 20,
   one graph for all of them.

Slow: the cold launch compiles for 30-60 s on a 2-core CPU; the module takes 2-4 minutes.
"""

import pytest
import torch

from tests.compile_parity import compare, make_inputs, pose_parity, record_pose, run_cli

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def runs(tiny_dir, tmp_path_factory):
    work = tmp_path_factory.mktemp("compile_cli")
    inputs = make_inputs(work / "inputs", video_frames=20)
    cache = work / "cache"
    results = {"off": run_cli(inputs, work / "off", tiny_dir, "off", cache)}
    assert not cache.exists()  # --compile off touches no cache
    results["cold"] = run_cli(inputs, work / "cold", tiny_dir, "on", cache)
    results["cold_files"] = set(cache.rglob("*.so"))
    results["warm"] = run_cli(inputs, work / "warm", tiny_dir, "on", cache)
    results["warm_files"] = set(cache.rglob("*.so"))
    results["pose"] = {mode: record_pose(inputs, work / f"pose_{mode}", tiny_dir, mode, cache) for mode in ("off", "on")}
    results["cache"] = cache
    return results


def test_no_recompile_after_the_warm_up(runs):
    for name in ("cold", "warm"):
        assert "running eager" not in runs[name].log
        assert runs[name].after_warm_up == 0, runs[name].log[-3000:]
    assert runs["cold"].recompiles + runs["warm"].recompiles <= 2 * 2  # two models


def test_the_log_says_compiled_or_loaded_from_the_cache(runs):
    """The cold launch compiles; the warm one loads every model's code from the cache and says so (not
    "compiled at load in 0.4 s")."""
    assert "compiled: compiled at load" in runs["cold"].log, runs["cold"].log[-3000:]
    assert "compiled: loaded from the compile cache in" in runs["warm"].log, runs["warm"].log[-3000:]
    assert "compiled at load" not in runs["warm"].log, runs["warm"].log[-3000:]


def test_warm_launch_reuses_the_cache(runs):
    assert runs["cold_files"], "the cold launch left no compiled code in the cache"
    assert runs["warm_files"] == runs["cold_files"]


@pytest.mark.parametrize("launch", ["cold", "warm"])
def test_outputs_equal_compile_off(runs, launch):
    found = compare(runs["off"].output, runs[launch].output)
    assert found["label_maps"] == 3 + 20 and found["keypoints"] > 0
    assert found["labels_equal"] >= 0.999, found


def test_well_defined_keypoints_equal_compile_off(runs):
    """Random weights: about half the maps are well-defined (the rest flat around the peak, where the reference's
    sub-pixel step amplifies float32 rounding); each of them within 0.05 px of --compile off."""
    found = pose_parity(runs["pose"]["off"], runs["pose"]["on"])
    well = found["well-defined"]
    assert well["count"] >= 0.3 * found["keypoints"], found
    assert well["within_0.05px"] == well["count"], found
    assert found["same_crop_maps_max_difference"] <= 1e-4, found


@pytest.fixture(scope="module")
def managers(tiny_dir, runs):
    """A compiled and an eager manager in this process, on the launches' compile cache (the tiny widths' code
    compiled there already: a second cold compile would check nothing the cold launch did not)."""
    import os

    from sapiens2_demo.models.manager import ModelManager

    cache = runs["cache"]
    saved = {name: os.environ.get(name) for name in ("SAPIENS2_COMPILE_CACHE", "TORCHINDUCTOR_CACHE_DIR")}
    os.environ["SAPIENS2_COMPILE_CACHE"] = str(cache)
    os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
    try:
        compiled = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", compile="on")
        eager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", compile="off")
        yield compiled, eager
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None) if value is None else os.environ.__setitem__(name, value)


@pytest.mark.parametrize("task, output", [("seg", "logits"), ("pose", "heatmaps")])
def test_compiled_model_matches_eager(managers, task, output):
    from sapiens2_demo.models.registry import checkpoint

    same_width_loaded = managers[0].loaded_keys  # seg's blocks compiled already: pose's are that code
    compiled, eager = (manager.get(checkpoint(task, "0.4b")) for manager in managers)
    assert compiled.compiled.status == "compiled", compiled.compiled.note
    notes = " ".join(managers[0].take_compile_notes())
    if same_width_loaded:  # pose after seg: that code is compiled already
        assert "loaded from the compile cache in" in notes
    else:  # the first model here: compiled now, or loaded where an earlier test of this process compiled that width
        assert "compiled at load in" in notes or "loaded from the compile cache in" in notes
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    for batch in (1, 3, 20):
        x = torch.randn(batch, 3, 256, 192, generator=torch.Generator().manual_seed(batch))
        with torch.inference_mode():
            ours, reference = compiled.model(pixel_values=x)[output], eager.model(pixel_values=x)[output]
        assert (ours - reference).abs().max() <= 1e-4 * reference.abs().max()
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] == graphs  # the warm-up's graph served all

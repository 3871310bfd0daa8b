"""The CPU's road: bfloat16 + regional compile where the CPU runs bf16 natively (AMX, AVX512-BF16), float32 eager
where bf16 would be emulated; decided from what torch reports (mocked here both ways), overridable. The bf16 + compiled road
itself runs in tests/system/test_cpu_bf16_road.py (inductor's C++ compile takes tens of seconds)."""

import os
import subprocess
import sys
from pathlib import Path
from unittest.mock import patch

import pytest
import torch

from sapiens2_demo.models import compile as regional
from sapiens2_demo.models import device as choice
from sapiens2_demo.models.manager import ModelManager, resolve_device

# what torch.cpu.get_capabilities() reports (the keys that matter) on three kinds of machine
XEON_AMX = {"cpu_name": "Intel(R) Xeon(R) Platinum 8581C", "amx_bf16": True, "amx_tile": True, "avx512_bf16": True}
EPYC_ZEN4 = {"cpu_name": "AMD EPYC", "amx_bf16": False, "amx_tile": False, "avx512_bf16": True}
OLD_XEON = {"cpu_name": "Intel(R) Xeon(R) CPU E5-2686 v4", "amx_bf16": False, "amx_tile": False,
            "avx512_bf16": False, "avx2": True}


@pytest.fixture(autouse=True)
def auto_everything(monkeypatch, tmp_path):
    for name in ("SAPIENS2_DTYPE", "SAPIENS2_COMPILE", "SAPIENS2_DEVICE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv(regional.CACHE_ENV, str(tmp_path / "compile-cache"))


def on_cpu(capabilities: dict):
    return patch.object(choice, "cpu_capabilities", return_value=dict(capabilities))


@pytest.mark.parametrize("caps, native, dtype", [(XEON_AMX, "AMX", "bfloat16"), (EPYC_ZEN4, "AVX512-BF16", "bfloat16"),
                                                 (OLD_XEON, "", "float32"), ({}, "", "float32")])
def test_bf16_only_where_the_cpu_runs_it_natively(caps, native, dtype):
    with on_cpu(caps):
        assert choice.native_bf16() == native
        assert choice.default_dtype("cpu") == dtype
        assert resolve_device("cpu") == ("cpu", getattr(torch, dtype))
        assert regional.wanted("auto", "cpu", getattr(torch, dtype)) is (dtype == "bfloat16")
        assert choice.default_dtype("mps") == "float32" and choice.default_dtype("cuda:1") == "bfloat16"


def test_amx_without_its_tile_unit_reported_is_not_amx():
    assert choice.native_bf16({"amx_bf16": True, "amx_tile": False, "avx512_bf16": False}) == ""


@pytest.mark.parametrize("caps", [XEON_AMX, EPYC_ZEN4])
def test_auto_road_on_a_bf16_cpu_and_its_overrides(tiny_dir, caps):
    with on_cpu(caps):
        auto = ModelManager(checkpoint_dir=tiny_dir, device="cpu")
        assert (auto.dtype, auto.compile) == (torch.bfloat16, True)
        assert auto.road == f"CPU ({caps['cpu_name']}, {choice.native_bf16(caps)}), bfloat16, compiled"
        held = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32")
        assert (held.dtype, held.compile) == (torch.float32, False)  # compiling float32 gains ~5 %: not worth it
        eager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", compile="off")
        assert (eager.dtype, eager.compile) == (torch.bfloat16, False)
        assert eager.road.endswith("bfloat16, eager")


def test_auto_road_on_a_cpu_without_native_bf16(tiny_dir, caplog):
    with on_cpu(OLD_XEON), caplog.at_level("INFO", logger="sapiens2_demo.models.manager"):
        auto = ModelManager(checkpoint_dir=tiny_dir, device="cpu")
        assert (auto.dtype, auto.compile) == (torch.float32, False)
        assert auto.road == "CPU (Intel(R) Xeon(R) CPU E5-2686 v4, no native bf16), float32, eager"
        forced = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="bfloat16", compile="on")
        assert (forced.dtype, forced.compile) == (torch.bfloat16, True)  # the user's choice, even emulated
    assert "models run on CPU (Intel(R) Xeon(R) CPU E5-2686 v4, no native bf16), float32, eager" in caplog.text


@pytest.mark.parametrize("cores, writers, model_mb, threads", [
    (2, 2, 5, 1), (16, 2, 5, 14),  # tiny models: writing costs more than inferring, the writers keep their cores
    (2, 2, 800, 2), (16, 2, 1600, 16), (2, 1, 228, 2),  # full size: the forward needs every core
])
def test_the_batch_clis_torch_threads_follow_the_work(cores, writers, model_mb, threads):
    from sapiens2_demo.batch.local import torch_threads

    assert torch_threads(cores, writers, model_mb * 2**20) == threads


def test_the_flip_test_is_a_visible_option_off_by_default_on_a_cpu():
    from sapiens2_demo import tasks
    from sapiens2_demo.ui.image_tabs import endpoint_doc

    spec = tasks.get("pose")
    [flip] = [option for option in spec.options if option.name == "flip_test"]
    assert not flip.advanced and "twice" in flip.info and "CPU" in flip.info
    assert spec.defaults("cpu")["flip_test"] is False
    assert spec.defaults("cuda")["flip_test"] is True and spec.defaults("mps")["flip_test"] is True
    assert spec.job("0.4b", {}, device="cpu").options["flip_test"] is False
    assert spec.job("0.4b", {"flip_test": True}, device="cpu").options["flip_test"] is True
    line = next(line for line in endpoint_doc(spec, ["flip_test"]).splitlines() if "flip_test:" in line)
    assert "default True, False on a CPU" in line and "twice" in line


def test_the_footer_names_the_road(tiny_dir):
    from types import SimpleNamespace

    from sapiens2_demo.ui.app import footer_text

    with on_cpu(EPYC_ZEN4):
        manager = ModelManager(checkpoint_dir=tiny_dir, device="cpu")
        text = footer_text(SimpleNamespace(manager=manager))
    assert "CPU (AMD EPYC, AVX512-BF16), bfloat16, compiled" in text and "--dtype" in text


@pytest.mark.parametrize("given", [None, "ACTIVE"])
def test_torch_s_openmp_threads_sleep_when_idle_unless_the_user_says_otherwise(given):
    """A spinning OpenMP pool holds the core a video's decoder and encoder need (docs/host.md): the package asks
    libgomp for sleeping threads before torch loads, and a user's own setting is kept."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    code = ("import sys, os, sapiens2_demo; assert 'torch' not in sys.modules; import torch; "
            "print(os.environ['OMP_WAIT_POLICY'])")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == (given or "PASSIVE")


HEAP_PROBE = """
import resource, sys, threading
import numpy as np
if sys.argv[1] == "import":
    import sapiens2_demo
def frames():  # a video's per-frame maps, made and dropped in a worker thread (its own glibc arena)
    for size in (3_000_000, 2_000_000) * 10:
        a = np.ones(size, np.float32); b = a * 2; del a, b
for _ in range(2):  # the second round counts: the first finds the heap empty either way
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t = threading.Thread(target=frames); t.start(); t.join()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _page_faults(mode: str, **env) -> int:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", HEAP_PROBE, mode], env={**clean, **env}, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return int(out.stdout)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's heap")
def test_large_arrays_reuse_the_heap_instead_of_fresh_pages_unless_the_user_set_malloc():
    """glibc maps each large array afresh and every frame's maps page-fault on their first write (docs/host.md):
    the package keeps freed memory in the heap. 40 arrays of 8-12 MB are ~24,000 pages' first writes; kept, the
    second round reuses the first's pages. A user's MALLOC_* setting leaves glibc as the user set it."""
    huge = Path("/sys/kernel/mm/transparent_hugepage/enabled")
    if huge.exists() and "[always]" in huge.read_text():
        pytest.skip("transparent huge pages always on: a fresh array faults once per 2 MB, too few to count")
    plain, kept = _page_faults("plain"), _page_faults("import")
    assert kept * 4 < plain, (kept, plain)
    assert _page_faults("import", MALLOC_ARENA_MAX="8") * 4 > plain  # the user's: nothing changed

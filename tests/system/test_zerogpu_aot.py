"""ZeroGPU ahead-of-time compilation with the stand-in `spaces` (tests/zerogpu): `gpu.compile_ahead` exports
one block of the tiny seg model inside a GPU call, `spaces.aoti_compile_and_save` saves one package in the compile
cache, the main process installs it on every block with `spaces.aoti_load_from_package_dir` (a restart loads the
saved package without compiling), and forwards in GPU calls (forked children, where the
package loads) match the eager model. A failing compile, and a package that cannot load in a worker, leave
the model eager with a log line, never a failed call. Runs tests/zerogpu/aot_check.py in a fresh process (the
stand-in must be importable before `gpu` is imported).

Slow: the AOTInductor compile of one tiny block takes 40-90 s on a 2-core CPU.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STAND_IN = ROOT / "tests" / "zerogpu"


def run_check(tiny_dir, mode: str, tmp_path) -> tuple[dict, str]:
    env = {**os.environ, "PYTHONPATH": f"{STAND_IN}{os.pathsep}{ROOT}", "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "SAPIENS2_COMPILE_CACHE": str(tmp_path / "cache"),
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "ZEROGPU_STANDIN_TIMEOUT_S": "600"}
    env.pop("SAPIENS2_NO_SPACES", None)
    done = subprocess.run([sys.executable, str(STAND_IN / "aot_check.py"), str(tiny_dir), mode], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    [line] = [line for line in done.stdout.splitlines() if line.startswith("REPORT ")]
    return json.loads(line.removeprefix("REPORT ")), log


@pytest.mark.slow
def test_blocks_compiled_ahead_of_time_share_one_package_kept_across_restarts(tiny_dir, tmp_path):
    report, log = run_check(tiny_dir, "good", tmp_path)
    assert report["crosses"] and report["aot"]
    assert report["statuses"] == {"facebook/sapiens2-seg-0.4b": "compiled"}
    assert report["blocks"] == report["aot_blocks"] == 2 and report["packages"] == 1
    assert report["notes"] == ["sapiens2-seg-0.4b: compiled ahead of time (ZeroGPU)."]
    assert "[zerogpu] call _compile_packages duration=1500s" in log  # one start-up GPU call
    assert log.count("aoti package loaded") == 2  # once in each worker that ran a forward with it
    assert report["relative"]["1"] <= 1e-4 and report["relative"]["3"] <= 1e-4
    assert report["saved_before"] == report["saved_after"] == [True]  # in the compile cache
    [saved] = list((tmp_path / "cache" / "aot").iterdir())
    assert (saved / "root" / "package.pt2").is_file() and (saved / "compiled_on.json").is_file()

    # a restart: the saved package is loaded, nothing compiles, the answers are the same
    report, log = run_check(tiny_dir, "again", tmp_path)
    assert report["statuses"] == {"facebook/sapiens2-seg-0.4b": "compiled"} and report["aot_blocks"] == 2
    assert "_compile_packages" not in log and "aoti_compile" not in log
    assert report["notes"] == ["sapiens2-seg-0.4b: compiled ahead of time (ZeroGPU, loaded from an earlier start)."]
    assert report["relative"]["1"] <= 1e-4 and report["relative"]["3"] <= 1e-4
    # the worker whose package would not load ran the blocks eager: same answer, a log line, and the saved
    # package is deleted so that the next start compiles it again
    assert report["relative"]["broken_package"] <= 1e-6
    assert "ahead-of-time block failed (RuntimeError" in log and "running it eager" in log
    assert report["saved_before"] == [True] and report["saved_after"] == [False]


def test_failed_compile_leaves_the_model_eager(tiny_dir, tmp_path):
    report, log = run_check(tiny_dir, "broken", tmp_path)
    assert report["statuses"] == {"facebook/sapiens2-seg-0.4b": "eager"} and report["aot_blocks"] == 0
    assert "ahead-of-time compilation failed (RuntimeError: no compiler on this worker); running eager" in log
    assert report["notes"] == ["sapiens2-seg-0.4b: ahead-of-time compilation failed (RuntimeError: no compiler on this worker); "
                               "running eager."]
    assert report["relative"] == {"1": 0.0, "3": 0.0}

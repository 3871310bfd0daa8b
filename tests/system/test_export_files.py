"""`python -m sapiens2_demo.cli export` on the tiny seg and pose checkpoints: the ONNX file runs in onnxruntime
and the AOTInductor package in `torch._inductor.aoti_load_package`, at batch 1 and 3 (the batch dimension is
dynamic), with outputs within 1e-3 (relative to the output's range) of the eager fp32 model; and the model-file
block of docs/compile.md runs as written beside those files.

Slow: an AOTInductor package of a tiny model compiles its C++ for 40-120 s on a 2-core CPU (ONNX: ~10 s).
"""

import contextlib
import io
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from sapiens2_demo import cli

pytestmark = pytest.mark.slow
TASKS = {"seg": "logits", "pose": "heatmaps"}
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def eager(tiny_dir):
    from sapiens2_demo.models.manager import ModelManager

    return ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", compile="off")


def reference(eager, task: str, batch: int):
    from sapiens2_demo.models.registry import checkpoint

    loaded = eager.get(checkpoint(task, "0.4b"))
    x = torch.randn(batch, 3, 256, 192, generator=torch.Generator().manual_seed(batch))
    with torch.inference_mode():
        return x, loaded.model(pixel_values=x)[TASKS[task]].numpy()


def assert_close(ours, expected) -> None:
    assert ours.shape == expected.shape
    assert np.abs(ours - expected).max() <= 1e-3 * np.abs(expected).max()


@pytest.fixture(scope="module")
def exported(tiny_dir, tmp_path_factory):
    """export(task, fmt) -> (file, what the command printed): each file written once per module (an AOTInductor
    package compiles for minutes), in one folder, under the names docs/compile.md's block uses (seg.onnx, pose.pt2)."""
    folder = tmp_path_factory.mktemp("exported")
    made = {}

    def export(task: str, fmt: str):
        if (task, fmt) not in made:
            output = folder / f"{task}.{'onnx' if fmt == 'onnx' else 'pt2'}"
            with pytest.MonkeyPatch.context() as patch, contextlib.redirect_stdout(io.StringIO()) as printed:
                patch.setenv("TORCHINDUCTOR_CACHE_DIR", str(folder / "inductor"))
                code = cli.main(["export", "--task", task, "--size", "0.4b", "--format", fmt, "--output", str(output),
                                 "--checkpoint-dir", str(tiny_dir), "--no-check"])
            assert code == 0 and output.is_file()
            made[task, fmt] = output, printed.getvalue()
        return made[task, fmt]

    return export


@pytest.mark.parametrize("task", TASKS)
def test_onnx_runs_in_onnxruntime(exported, eager, task):
    import onnxruntime

    path, printed = exported(task, "onnx")
    assert f"output {TASKS[task]}" in printed and "(batch, 3, 256, 192) float32" in printed
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["pixel_values"]
    assert [o.name for o in session.get_outputs()] == [TASKS[task]]
    for batch in (1, 3):
        x, expected = reference(eager, task, batch)
        [ours] = session.run(None, {"pixel_values": x.numpy()})
        assert_close(ours, expected)


@pytest.mark.parametrize("task", TASKS)
def test_aoti_package_loads_and_runs(exported, eager, task):
    path, _ = exported(task, "aoti")
    package = torch._inductor.aoti_load_package(str(path))
    for batch in (1, 3):
        x, expected = reference(eager, task, batch)
        with torch.inference_mode():
            [ours] = package(x)
        assert_close(ours.numpy(), expected)


def readme_block() -> str:
    readme = (ROOT / "docs" / "compile.md").read_text()
    section = readme[readme.index("## Model files (ONNX, AOTInductor)"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readmes_block_runs_as_written_and_matches_eager(exported, tiny_dir):
    """docs/compile.md's model-file block, as written, in a process of its own (as a deployer runs it: the package
    reads AOTI_RUNTIME_CHECK_INPUTS at its first call) beside seg.onnx and pose.pt2: both answers within 1e-3 of
    the eager model on the block's own input; and the package refuses the transposed view the block used to pass
    (it read that as contiguous and answered wrongly, silently)."""
    folder = exported("seg", "onnx")[0].parent
    exported("pose", "aoti")
    if not (folder / "assets").exists():
        (folder / "assets").symlink_to(ROOT / "assets")
    script = readme_block() + textwrap.dedent(f"""
        from sapiens2_demo.models.manager import ModelManager
        from sapiens2_demo.models.registry import checkpoint

        eager = ModelManager(checkpoint_dir={str(tiny_dir)!r}, device="cpu", dtype="float32", compile="off")
        x = torch.from_numpy(pixel_values)
        with torch.inference_mode():
            for task, key, ours in (("seg", "logits", logits), ("pose", "heatmaps", heatmaps.numpy())):
                expected = eager.get(checkpoint(task, "0.4b")).model(pixel_values=x)[key].numpy()
                assert ours.shape == expected.shape, (task, ours.shape, expected.shape)
                print(task, float(np.abs(ours - expected).max() / np.abs(expected).max()))
        view = torch.from_numpy(pixel_values[0].transpose(1, 2, 0).copy()).permute(2, 0, 1)[None]  # the old input
        try:
            package(view)
            print("transposed answered")
        except RuntimeError as error:
            print("transposed refused:", error)
    """)
    run = subprocess.run([sys.executable, "-c", script], cwd=folder, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in run.stdout.strip().splitlines())
    assert float(lines["seg"]) <= 1e-3 and float(lines["pose"]) <= 1e-3, lines
    assert lines["transposed"].startswith("refused: ") and "stride" in lines["transposed"], lines


def test_export_checks_itself(tiny_dir, tmp_path, capsys):
    code = cli.main(["export", "--task", "seg", "--format", "onnx", "--output", str(tmp_path / "seg.onnx"),
                     "--checkpoint-dir", str(tiny_dir)])
    printed = capsys.readouterr().out
    assert code == 0
    differences = [float(line.split("PyTorch ")[1].split()[0]) for line in printed.splitlines() if "checked at" in line]
    assert len(differences) == 2 and max(differences) <= 1e-3
    assert "checked a non-contiguous input (channels last in memory): matches" in printed  # onnxruntime copies


@pytest.mark.parametrize("args, message", [
    (["--task", "dance"], "Unknown task"),
    (["--task", "seg", "--checkpoint-dir", "/nonexistent"], "Could not load facebook/sapiens2-seg-0.4b"),
    (["--task", "seg", "--dtype", "int8"], "Unknown dtype"),
])
def test_export_errors_are_messages(args, message, tmp_path, capsys):
    code = cli.main(["export", *args, "--output", str(tmp_path / "x.onnx")])
    err = capsys.readouterr().err
    assert code == 2 and message in err and "Traceback" not in err

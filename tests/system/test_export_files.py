"""`python -m sapiens2_demo.cli export` on the tiny seg and pose checkpoints: the ONNX file runs in onnxruntime
and the AOTInductor package in `torch._inductor.aoti_load_package`, at batch 1 and 3 (the batch dimension is
dynamic), with outputs within 1e-3 (relative to the output's range) of the eager fp32 model.

Slow: an AOTInductor package of a tiny model compiles its C++ for 40-120 s on a 2-core CPU (ONNX: ~10 s).
"""

import numpy as np
import pytest
import torch

from sapiens2_demo import cli

pytestmark = pytest.mark.slow
TASKS = {"seg": "logits", "pose": "heatmaps"}


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


def export(tiny_dir, task: str, fmt: str, output, capsys) -> str:
    code = cli.main(["export", "--task", task, "--size", "0.4b", "--format", fmt, "--output", str(output),
                     "--checkpoint-dir", str(tiny_dir), "--no-check"])
    out = capsys.readouterr()
    assert code == 0, out.err
    assert output.is_file()
    return out.out


@pytest.mark.parametrize("task", TASKS)
def test_onnx_runs_in_onnxruntime(tiny_dir, eager, task, tmp_path, capsys):
    import onnxruntime

    printed = export(tiny_dir, task, "onnx", tmp_path / f"{task}.onnx", capsys)
    assert f"output {TASKS[task]}" in printed and "(batch, 3, 256, 192) float32" in printed
    session = onnxruntime.InferenceSession(str(tmp_path / f"{task}.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["pixel_values"]
    assert [o.name for o in session.get_outputs()] == [TASKS[task]]
    for batch in (1, 3):
        x, expected = reference(eager, task, batch)
        [ours] = session.run(None, {"pixel_values": x.numpy()})
        assert_close(ours, expected)


@pytest.mark.parametrize("task", TASKS)
def test_aoti_package_loads_and_runs(tiny_dir, eager, task, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    export(tiny_dir, task, "aoti", tmp_path / f"{task}.pt2", capsys)
    package = torch._inductor.aoti_load_package(str(tmp_path / f"{task}.pt2"))
    for batch in (1, 3):
        x, expected = reference(eager, task, batch)
        with torch.inference_mode():
            [ours] = package(x)
        assert_close(ours.numpy(), expected)


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

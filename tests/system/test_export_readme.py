"""The README's model-file block ("Model files (ONNX, AOTInductor)"), run as written on files `cli export` made
from the tiny checkpoints (seg as ONNX, pose as an AOTInductor package): both answers within 1e-3 (of the output's
range) of the eager model on the block's own input. And the package, as the block sets it up, refuses the
transposed view the block used to pass (it read it as contiguous and answered wrongly, silently).

Slow: the AOTInductor package compiles its C++ (40-120 s on a 2-core CPU).
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from sapiens2_demo import cli

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]


def readme_block() -> str:
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## Model files (ONNX, AOTInductor)"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_model_file_block_runs_and_matches_eager(tiny_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    for task, fmt, name in (("seg", "onnx", "seg.onnx"), ("pose", "aoti", "pose.pt2")):
        assert cli.main(["export", "--task", task, "--format", fmt, "--output", str(tmp_path / name),
                         "--checkpoint-dir", str(tiny_dir), "--no-check"]) == 0
    (tmp_path / "assets").symlink_to(ROOT / "assets")
    # a process of its own, as a deployer runs it: the package reads AOTI_RUNTIME_CHECK_INPUTS at its first call
    script = readme_block() + textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
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
    run = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in run.stdout.strip().splitlines())
    assert float(lines["seg"]) <= 1e-3 and float(lines["pose"]) <= 1e-3, lines
    assert lines["transposed"].startswith("refused: ") and "stride" in lines["transposed"], lines

"""A Space installs requirements.txt: the app's runtime only. `make test` also installs requirements-dev.txt
(tests, checks, the Ray batch engine), and `--engine ray` without Ray says how to install it."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEV_ONLY = ("ray", "ruff", "import-linter", "pytest", "pytest-timeout", "playwright")


def names(path: Path) -> set[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {re.split(r"[\[<>=!~; ]", line, maxsplit=1)[0].lower() for line in lines if line and not line.startswith("-")}


def test_the_runtime_holds_no_test_lint_or_batch_engine_tools():
    runtime = names(ROOT / "requirements.txt")
    assert {"torch", "gradio", "transformers", "mcp"} <= runtime
    assert not runtime & set(DEV_ONLY), runtime & set(DEV_ONLY)


def test_make_test_installs_the_runtime_and_the_extras():
    dev = ROOT / "requirements-dev.txt"
    assert "-r requirements.txt" in dev.read_text().splitlines()
    assert set(DEV_ONLY) <= names(dev)
    makefile = (ROOT / "Makefile").read_text()
    assert "-r requirements-dev.txt" in makefile and re.search(r"^test: setup-dev", makefile, re.MULTILINE)


def test_the_ray_engine_without_ray_says_how_to_install_it(tmp_path, monkeypatch):
    import importlib.util

    from sapiens2_demo.batch import run
    from sapiens2_demo.batch.options import BatchOptions

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ValueError, match=r"pip install 'ray\[data\]==2.60.0'"):
        run([str(tmp_path)], tmp_path / "out", BatchOptions(tasks=("segment",)), engine="ray", quiet=True)

"""The structure holds: layers import one way (import-linter's contract in pyproject.toml), and each task's name
is knowledge of a few modules only (the catalogue, the checkpoint registry, the model code that needs it)."""

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "sapiens2_demo"
# public names and the checkpoint families / old spellings
NAMES = ("pose", "segment", "normals", "pointmap", "matting", "features", "seg", "normal", "pretrain")
MAX_MODULES = 5


def _docstrings(tree) -> set[int]:
    owners = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return {id(node.body[0].value) for node in ast.walk(tree) if isinstance(node, owners) and node.body
            and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)}


def literal_modules() -> dict[str, set[str]]:
    found = defaultdict(set)
    for path in PACKAGE.rglob("*.py"):
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and node.value in NAMES and id(node) not in skip:
                found[node.value].add(str(path.relative_to(ROOT)))
    return found


def test_each_task_name_is_written_in_at_most_five_modules():
    found = literal_modules()
    assert found["pose"] and found["segment"]  # the scan sees the catalogue
    too_many = {name: sorted(modules) for name, modules in found.items() if len(modules) > MAX_MODULES}
    assert not too_many, too_many


def test_layers_import_one_way():
    linter = Path(sys.executable).with_name("lint-imports")
    done = subprocess.run([str(linter)], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 kept, 0 broken" in done.stdout  # the layers, and the stand-ins one way

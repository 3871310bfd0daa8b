"""A ZeroGPU Space runs Python 3.10.13 (README's front matter names it), while the suite runs on 3.11: the code a
Space runs must parse as 3.10 and use none of 3.11's new standard library, and requirements.txt must resolve there
(transformers 5.21+ need 3.11, so 3.10 takes 5.20.2, whose Sapiens2 modules are 5.23's but for type hints)."""

import ast
from pathlib import Path

from tests.locks import pins, wanted

ROOT = Path(__file__).resolve().parents[2]
# what the Space imports: the app and the package (benchmarks and tests run on the developer's 3.11)
SOURCES = [ROOT / "app.py", *sorted((ROOT / "sapiens2_demo").rglob("*.py"))]
# names new in Python 3.11's standard library (What's New in 3.11), as module or module.attribute
NEW_IN_311 = {"tomllib", "wsgiref.types", "typing.Self", "typing.LiteralString", "typing.Never", "typing.assert_never",
              "typing.assert_type", "typing.reveal_type", "typing.Required", "typing.NotRequired",
              "typing.dataclass_transform", "datetime.UTC", "enum.StrEnum", "enum.ReprEnum", "enum.verify",
              "asyncio.TaskGroup", "asyncio.timeout", "asyncio.Runner", "hashlib.file_digest", "contextlib.chdir",
              "operator.call", "inspect.getmembers_static", "math.exp2", "math.cbrt"}
NEW_BUILTINS = {"ExceptionGroup", "BaseExceptionGroup"}


def _uses(tree: ast.AST) -> set[str]:
    """Every stdlib name a module reaches: `import x`, `from x import y` (as x.y) and `x.y` on an imported x."""
    used, modules = set(), {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                used.add(alias.name)
                modules[(alias.asname or alias.name).split(".")[0]] = alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            used |= {node.module, *(f"{node.module}.{alias.name}" for alias in node.names)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            used.add(f"{modules[node.value.id]}.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in NEW_BUILTINS:
            used.add(node.id)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_note":
            used.add("BaseException.add_note")
    return used


def test_the_app_parses_as_python_310_and_uses_nothing_new_in_311():
    assert len(SOURCES) > 50  # the scan sees the package
    found = {}
    for path in SOURCES:
        text = path.read_text()
        ast.parse(text, filename=str(path), feature_version=(3, 10))  # raises on 3.11+ syntax (except*, ...)
        bad = _uses(ast.parse(text)) & (NEW_IN_311 | NEW_BUILTINS | {"BaseException.add_note"})
        if bad:
            found[str(path.relative_to(ROOT))] = sorted(bad)
    assert not found, found


def test_the_scan_sees_311_only_names():
    code = "import tomllib\nfrom typing import Self\nimport datetime as dt\nx = dt.UTC\nraise ExceptionGroup('', [])\n"
    assert {"tomllib", "typing.Self", "datetime.UTC", "ExceptionGroup"} <= _uses(ast.parse(code))


def test_requirements_name_one_transformers_for_each_python():
    # 5.21.0 and newer declare Requires-Python >=3.11 on PyPI; 5.20.2 is the last for 3.10
    lock = ROOT / "requirements.txt"
    assert pins(lock, "3.10.13")["transformers"] == "5.20.2"
    assert pins(lock, "3.11.7")["transformers"] == "5.23.0"
    # what the app imports is there on both (3.10 adds backports such as exceptiongroup and tomli)
    assert {req.name.lower() for req in wanted(ROOT / "requirements.in")} <= pins(lock, "3.10.13").keys()


def test_the_space_and_ruff_name_python_310():
    front_matter = (ROOT / "README.md").read_text().split("---")[1]
    assert "python_version: 3.10.13" in front_matter.splitlines()
    assert 'target-version = "py310"' in (ROOT / "pyproject.toml").read_text()

"""What a user and a Space install is pinned: requirements.txt (the app's runtime) and requirements-dev.txt (plus
tests, checks, the Ray batch engine) are `make lock`'s output from requirements.in and requirements-dev.in, every
package `name==version` with hashes, and they hold what the `.in` files ask. `--engine ray` without Ray says how to
install it."""

import re

import pytest

from tests.locks import ROOT, entries, pins, wanted

DEV_ONLY = ("ray", "ruff", "import-linter", "pytest", "pytest-timeout", "playwright")
LOCKS = {"requirements.txt": "requirements.in", "requirements-dev.txt": "requirements-dev.in"}


@pytest.mark.parametrize("lock", LOCKS)
def test_every_package_is_pinned_to_one_version_with_hashes(lock):
    found = entries(ROOT / lock)
    assert len(found) > 50, f"{lock} looks unlocked: {len(found)} entries"
    for req, hashes in found:
        assert [s.operator for s in req.specifier] == ["=="], f"{lock}: {req} is not name==version"
        assert hashes and all(h.startswith("sha256:") for h in hashes), f"{lock}: {req.name} has no hashes"
    assert "make lock" in (ROOT / lock).read_text().splitlines()[1]  # generated, not typed


@pytest.mark.parametrize("lock", LOCKS)
@pytest.mark.parametrize("python", ["3.10.13", "3.11.7", "3.12.8"])
def test_each_lock_holds_what_its_in_file_asks(lock, python):
    """A `.in` edited without `make lock` afterwards fails here: every requirement that applies on that Python is
    in the lock at a version its specifier allows."""
    locked = pins(ROOT / lock, python)
    env = {"python_version": python[:4], "python_full_version": python}
    for req in wanted(ROOT / LOCKS[lock]):
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        name = req.name.lower()
        assert name in locked, f"{lock} lacks {name} on Python {python}: run `make lock`"
        assert req.specifier.contains(locked[name], prereleases=True), f"{lock}: {name}=={locked[name]} vs {req}"


def test_the_dev_lock_keeps_the_apps_versions():
    for python in ("3.10.13", "3.11.7"):
        app, dev = pins(ROOT / "requirements.txt", python), pins(ROOT / "requirements-dev.txt", python)
        assert {name: dev.get(name) for name in app} == app


def test_the_runtime_holds_no_test_lint_or_batch_engine_tools():
    runtime = {req.name.lower() for req in wanted(ROOT / "requirements.in")}
    assert {"torch", "gradio", "transformers", "mcp"} <= runtime
    assert not runtime & set(DEV_ONLY), runtime & set(DEV_ONLY)
    assert not set(pins(ROOT / "requirements.txt", "3.11.7")) & set(DEV_ONLY)


def test_make_installs_the_locks_and_regenerates_them():
    assert "-r requirements.in" in (ROOT / "requirements-dev.in").read_text().splitlines()
    assert set(DEV_ONLY) <= {req.name.lower() for req in wanted(ROOT / "requirements-dev.in")}
    makefile = (ROOT / "Makefile").read_text()
    assert "-r requirements.txt" in makefile and "-r requirements-dev.txt" in makefile
    assert re.search(r"^test: setup-dev", makefile, re.MULTILINE)
    assert re.search(r"^lock:", makefile, re.MULTILINE) and "requirements-dev.in -o requirements-dev.txt" in makefile


def test_the_ray_engine_without_ray_says_how_to_install_it(tmp_path, monkeypatch):
    import importlib.util

    from sapiens2_demo.batch import run
    from sapiens2_demo.batch.options import BatchOptions

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(ValueError, match=r"pip install 'ray\[data\]==2.60.0'"):
        run([str(tmp_path)], tmp_path / "out", BatchOptions(tasks=("segment",)), engine="ray", quiet=True)

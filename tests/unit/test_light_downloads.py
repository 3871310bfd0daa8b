"""Issue 20, light image answers: an image request gives the light downloads by default, `raw_data` (one option
in the task descriptions, read by the tabs, the API and MCP) adds the heavy raw arrays and point clouds, and the
batch CLI still writes every file."""

from types import SimpleNamespace

import numpy as np
import pytest

from sapiens2_demo import tasks
from sapiens2_demo.batch import BatchOptions
from sapiens2_demo.results import NormalsResult
from tests.unit.test_task_exports import plane_pointmap, rgb, shown_then_written


def unit_normals(height=40, width=60) -> NormalsResult:
    normals = np.random.default_rng(3).normal(size=(height, width, 3)).astype(np.float32)
    return NormalsResult(normals=normals / np.linalg.norm(normals, axis=-1, keepdims=True))


RESULTS = {"normals": unit_normals, "pointmap": plane_pointmap}
LIGHT = {"normals": {"normals16.png"}, "pointmap": {"depth_mm.png", "person_mesh.glb"}}
RAW = {"normals": {"normals.npy"}, "pointmap": {"depth_m.npy", "person.ply", "person.glb"}}


@pytest.mark.parametrize("task", sorted(RESULTS))
def test_an_image_request_is_light_by_default_and_raw_data_adds_the_arrays(task, tmp_path):
    image = SimpleNamespace(rgb=rgb(), notes=[])
    light = shown_then_written(task, image, RESULTS[task](), tmp_path / "light")
    assert {path.name for path in light.files} == LIGHT[task]
    assert sorted(path.name for path in (tmp_path / "light").iterdir()) == sorted(LIGHT[task])  # nothing unlisted
    full = shown_then_written(task, image, RESULTS[task](), tmp_path / "full", raw_data=True)
    assert {path.name for path in full.files} == LIGHT[task] | RAW[task]


def test_raw_normals_keep_the_data_the_png_rounds(tmp_path):
    result = unit_normals()
    out = shown_then_written("normals", SimpleNamespace(rgb=rgb(), notes=[]), result, tmp_path, raw_data=True)
    np.testing.assert_array_equal(np.load(next(path for path in out.files if path.suffix == ".npy")), result.normals)


@pytest.mark.parametrize("task", sorted(RESULTS))
def test_the_batch_cli_still_writes_every_file(task, tmp_path):
    options = BatchOptions(tasks=(task,))
    spec = tasks.get(task)
    written = {path.name for path in spec.write_files(rgb(), RESULTS[task](), tmp_path, **options.task_options())}
    assert set(options.required_files(task)) <= written
    assert written == LIGHT[task] | RAW[task]


@pytest.mark.parametrize("task", sorted(RESULTS))
def test_raw_data_is_declared_once_and_documented_for_the_api_and_mcp(task):
    from sapiens2_demo.ui.image_tabs import endpoint_doc

    spec = tasks.get(task)
    [option] = [option for option in spec.options if option.name == "raw_data"]
    assert option.default is False and option.model is None  # only the files change, never the model work
    doc = endpoint_doc(spec, [o.name for o in spec.options])
    line = next(line for line in doc.splitlines() if line.strip().startswith("raw_data:"))
    for name in RAW[task] - {"person.glb", "person.ply"} | ({".ply"} if task == "pointmap" else set()):
        assert name in line, (name, line)
    assert "raw_data" in spec.description

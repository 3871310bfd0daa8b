"""The app launched on 127.0.0.1 and every named endpoint called through gradio_client."""

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import ASSETS

ENDPOINTS = ["/pose", "/segment", "/normals", "/pointmap", "/matting", "/all"]


def test_starting_the_app_loads_no_model(tiny_dir):
    import app

    args = app.parse_args(["--checkpoint-dir", str(tiny_dir), "--device", "cpu"])
    demo = app.create_app(args)
    assert demo.sapiens2_context.manager.loaded_keys == []


def test_named_endpoints_first_parameter_is_image(client):
    api = client.view_api(return_format="dict", print_info=False)["named_endpoints"]
    for name in ENDPOINTS:
        assert name in api, f"{name} missing from {sorted(api)}"
        params = api[name]["parameters"]
        assert params[0]["parameter_name"] == "image"
        assert all(p["parameter_has_default"] for p in params[1:]), name


def _image(path):
    return np.asarray(Image.open(path).convert("RGB"))


def test_pose_endpoint(client):
    from gradio_client import handle_file

    drawing, files, notes = client.predict(handle_file(str(ASSETS / "astronaut.jpg")), api_name="/pose")
    assert _image(drawing).shape == (512, 512, 3)
    names = sorted(Path(f).name for f in files)
    assert names == ["pose_coco17.json", "pose_openpose_keypoints.json", "pose_sapiens2.json"]
    official = json.loads(Path(next(f for f in files if f.endswith("_sapiens2.json"))).read_text())
    assert official["num_keypoints"] == 308
    assert len(official["instances"]) >= 1
    assert "person(s) posed" in notes


def test_pose_endpoint_with_user_boxes(client):
    from gradio_client import handle_file

    _, files, notes = client.predict(handle_file(str(ASSETS / "astronaut.jpg")), boxes="[[10,10,200,400],[250,20,500,500]]",
                                     flip_test=False, api_name="/pose")
    assert "2 person(s) posed" in notes


def test_segment_endpoint(client):
    from gradio_client import handle_file

    slider, legend, files, notes = client.predict(handle_file(str(ASSETS / "grace_hopper.jpg")), api_name="/segment")
    before, after = slider
    assert _image(before).shape == _image(after).shape == (600, 512, 3)
    labels = np.asarray(Image.open(next(f for f in files if "label" in Path(f).name)))
    assert labels.shape == (600, 512) and labels.max() < 29
    assert legend["data"]


def test_normals_endpoint(client):
    from gradio_client import handle_file

    slider, files, notes = client.predict(handle_file(str(ASSETS / "grace_hopper.jpg")), api_name="/normals")
    normals = np.load(next(f for f in files if f.endswith(".npy")))
    assert normals.shape == (600, 512, 3)
    assert np.allclose(np.linalg.norm(normals, axis=-1), 1, atol=1e-4)


def test_pointmap_endpoint(client):
    from gradio_client import handle_file

    slider, model3d, files, notes = client.predict(handle_file(str(ASSETS / "grace_hopper.jpg")),
                                                   remove_background=False, api_name="/pointmap")
    before, after = (_image(path) for path in slider)
    assert before.shape == after.shape and before.shape[0] == 600 and before.shape[1] > 512  # + colour bar
    assert model3d.endswith(".glb")
    metres = np.load(next(f for f in files if f.endswith(".npy")))
    assert metres.shape == (600, 512) and metres.dtype == np.float32
    assert "fx =" in notes


def test_matting_endpoint(client):
    from gradio_client import handle_file

    slider, files, notes = client.predict(handle_file(str(ASSETS / "grace_hopper.jpg")), api_name="/matting")
    rgba = Image.open(next(f for f in files if "rgba" in Path(f).name))
    assert rgba.mode == "RGBA" and rgba.size == (512, 600)


def test_all_endpoint(client):
    from gradio_client import handle_file

    gallery, archive, notes = client.predict(handle_file(str(ASSETS / "astronaut.jpg")), api_name="/all")
    assert len(gallery) == 6  # input + five tasks
    with zipfile.ZipFile(archive) as zf:
        names = zf.namelist()
    assert any(n.endswith(".json") for n in names) and any(n.endswith(".glb") for n in names)


def test_bad_upload_is_a_clear_error_and_app_survives(client, tmp_path):
    from gradio_client import handle_file

    bogus = tmp_path / "photo.jpg"
    bogus.write_text("this is not an image")
    with pytest.raises(Exception) as info:
        client.predict(handle_file(str(bogus)), api_name="/segment")
    assert "Traceback" not in str(info.value)
    assert "image" in str(info.value).lower()
    slider, *_ = client.predict(handle_file(str(ASSETS / "camera.jpg")), api_name="/segment")
    assert slider

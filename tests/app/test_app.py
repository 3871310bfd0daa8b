"""The app launched on 127.0.0.1 and every named endpoint called through gradio_client."""

import json
import time
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
    # one tab bar holds every tab: a component made between two tabs splits it, and the tabs before the split
    # are each drawn on the page at once, one under the other
    import gradio as gr

    bars = [[tab.label for tab in block.children] for block in demo.blocks.values() if isinstance(block, gr.Tabs)]
    assert bars == [["Pose", "Body parts", "Normals", "Depth & 3D", "Matting", "All tasks", "Video", "Live",
                     "Features"]]


def test_every_tab_answers_plain_notes_and_the_page_escapes_them(tiny_dir):
    """Each tab's endpoint answers its notes into a hidden text box (plain text for API callers); the page's
    Markdown is filled from that box by a browser-only step that escapes it (ui.common.ESCAPE_NOTES_JS)."""
    import gradio as gr

    import app
    from sapiens2_demo.ui.common import ESCAPE_NOTES_JS

    demo = app.create_app(app.parse_args(["--checkpoint-dir", str(tiny_dir), "--device", "cpu"]))
    escapes = {fn.inputs[0]._id: fn.outputs[0] for fn in demo.fns.values() if fn.js == ESCAPE_NOTES_JS}
    for name in [*ENDPOINTS, "/video", "/features"]:
        [fn] = [fn for fn in demo.fns.values() if fn.api_name == name.strip("/")]
        notes = fn.outputs[-1]
        assert isinstance(notes, gr.Textbox) and notes.visible == "hidden", name
        shown = escapes[notes._id]
        assert isinstance(shown, gr.Markdown) and "notes" in shown.elem_classes, name
    assert all(fn.fn is None and fn.api_visibility == "private" for fn in demo.fns.values() if fn.js == ESCAPE_NOTES_JS)


def test_the_start_up_lines_name_our_share_flag(tiny_dir, capfd):
    """gradio's own line says "set `share=True` in `launch()`"; a user of app.py has --share."""
    import app
    from tests.conftest import free_port

    port = free_port()
    args = app.parse_args(["--checkpoint-dir", str(tiny_dir), "--device", "cpu", "--host", "127.0.0.1",
                           "--port", str(port)])
    demo = app.create_app(args)
    try:
        app.launch(demo, args, prevent_thread_lock=True)
    finally:
        demo.close()
    printed = capfd.readouterr().out
    assert f"* Running on local URL:  http://127.0.0.1:{port}/" in printed, printed
    assert "start the app with --share" in printed and "share=True" not in printed, printed


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
    assert names == ["pose_coco17.json", "pose_coco_wholebody.json", "pose_openpose_keypoints.json",
                     "pose_sapiens2.json"]  # not lifted: no pose_3d.json / .glb
    official = json.loads(Path(next(f for f in files if f.endswith("_sapiens2.json"))).read_text())
    assert official["num_keypoints"] == 308
    assert len(official["instances"]) >= 1
    people = len(official["instances"])
    assert (f"{people} people posed" if people > 1 else "1 person posed") in notes
    whole = json.loads(Path(next(f for f in files if f.endswith("_wholebody.json"))).read_text())
    assert len(whole["annotations"]) == len(official["instances"])
    for person in whole["annotations"]:  # 133 (x, y, v) triples: body 17, feet 6, face 68, hands 21 + 21
        parts = ("keypoints", "foot_kpts", "face_kpts", "lefthand_kpts", "righthand_kpts")
        assert sum(len(person[part]) for part in parts) == 133 * 3
        assert person["face_kpts"] == [0] * 68 * 3  # no published 238 -> 68 face mapping: not labelled


@pytest.fixture()
def lenient_lift(monkeypatch):
    """The tiny random models' keypoint scores and depths fail the lift's reliability tests: relax them (the app
    runs in this process) so the 3D skeleton has joints."""
    import functools

    from sapiens2_demo.pose import lift

    monkeypatch.setattr(lift, "lift_keypoints", functools.partial(lift.lift_keypoints, min_score=-np.inf,
                                                                   max_spread=np.inf))


def test_pose_endpoint_lifts_to_3d(client, lenient_lift):
    import trimesh
    from gradio_client import handle_file

    drawing, files, notes = client.predict(handle_file(str(ASSETS / "astronaut.jpg")), boxes="[[40,20,480,500]]",
                                           flip_test=False, lift_3d=True, api_name="/pose")
    names = {Path(f).name for f in files}
    assert {"pose_3d.json", "pose_3d.glb", "pose_coco_wholebody.json"} <= names
    document = json.loads(Path(next(f for f in files if f.endswith("pose_3d.json"))).read_text())
    assert document["units"] == "metres" and len(document["keypoint_names"]) == 308
    [person] = document["people"]
    assert np.asarray(person["keypoints"], dtype=float).shape == (308, 4)
    skeleton = trimesh.load(next(f for f in files if f.endswith("pose_3d.glb")))
    assert sum(len(g.faces) for g in skeleton.geometry.values()) > 0
    assert "Lifted to 3D" in notes


def test_pose_endpoint_with_user_boxes(client):
    from gradio_client import handle_file

    _, files, notes = client.predict(handle_file(str(ASSETS / "astronaut.jpg")), boxes="[[10,10,200,400],[250,20,500,500]]",
                                     flip_test=False, api_name="/pose")
    assert "2 people posed" in notes


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

    slider, files, notes = client.predict(handle_file(str(ASSETS / "grace_hopper.jpg")), raw_data=True,
                                          api_name="/normals")
    assert {Path(f).name for f in files} == {"normals.npy", "normals16.png"}  # raw data on request
    normals = np.load(next(f for f in files if f.endswith(".npy")))
    assert normals.shape == (600, 512, 3)
    assert np.allclose(np.linalg.norm(normals, axis=-1), 1, atol=1e-4)


def test_pointmap_endpoint(client):
    from gradio_client import handle_file

    slider, model3d, files, notes = client.predict(handle_file(str(ASSETS / "grace_hopper.jpg")),
                                                   remove_background=False, raw_data=True, api_name="/pointmap")
    before, after = (_image(path) for path in slider)
    assert before.shape == after.shape and before.shape[0] == 600 and before.shape[1] > 512  # + colour bar
    assert Path(model3d).name == "person_mesh.glb"  # the viewer shows the surface mesh
    metres = np.load(next(f for f in files if f.endswith(".npy")))
    assert metres.shape == (600, 512) and metres.dtype == np.float32
    assert "fx =" in notes
    assert {"person.ply", "person.glb", "person_mesh.glb"} <= {Path(f).name for f in files}


def test_dense_endpoints_answer_light_by_default(client):
    """The default answer holds the light files only (the raw arrays and point clouds come with raw_data)."""
    from gradio_client import handle_file

    image = handle_file(str(ASSETS / "grace_hopper.jpg"))
    _, files, _ = client.predict(image, api_name="/normals")
    assert {Path(f).name for f in files} == {"normals16.png"}
    _, model3d, files, _ = client.predict(image, remove_background=False, api_name="/pointmap")
    assert {Path(f).name for f in files} == {"depth_mm.png", "person_mesh.glb"}
    assert Path(model3d).name == "person_mesh.glb"


def test_pointmap_endpoint_mesh_opens_with_faces_and_keeps_the_budget(client):
    import trimesh
    from gradio_client import handle_file

    _, model3d, files, _ = client.predict(handle_file(str(ASSETS / "grace_hopper.jpg")), remove_background=False,
                                          max_faces=20_000, api_name="/pointmap")
    mesh = trimesh.load(next(f for f in files if Path(f).name == "person_mesh.glb"))
    [geometry] = mesh.geometry.values()
    assert 0 < len(geometry.faces) <= 20_000
    assert geometry.visual.vertex_colors.shape == (len(geometry.vertices), 4)


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
    # the surface mesh, COCO-WholeBody, and the 3D keypoints (the All-tasks tab always lifts)
    for expected in ("depth/person_mesh.glb", "pose/pose_coco_wholebody.json", "pose/pose_3d.json"):
        assert expected in names, (expected, names)


def test_pose_skeleton_viewer_is_not_an_api_endpoint(client):
    """The Pose tab's 3D skeleton viewer is filled by a follow-up event hidden from the API: /pose still
    returns (drawing, files, notes) and no other endpoint appears."""
    api = client.view_api(return_format="dict", print_info=False)
    assert len(api["named_endpoints"]["/pose"]["returns"]) == 3
    assert not [name for name in api["named_endpoints"] if "lambda" in name or "viewer" in name]
    assert not api["unnamed_endpoints"]


def test_viewer_step_gives_the_sessions_last_model_or_the_card():
    from types import SimpleNamespace

    from sapiens2_demo.ui.viewers import SHOWN_MODELS, fill_step

    fill = fill_step("pose", "/cache/sapiens2-viewer-card-pose.glb")
    request = SimpleNamespace(session_hash="viewer-test")
    SHOWN_MODELS.put("viewer-test", "pose", "/x/pose_3d.glb")
    SHOWN_MODELS.put("someone-else", "pose", "/y/pose_3d.glb")
    SHOWN_MODELS.put("viewer-test", "pointmap", "/x/person_mesh.glb")
    assert fill(request)["value"] == "/x/pose_3d.glb"
    SHOWN_MODELS.put("viewer-test", "pose", None)  # a run with no 3D model puts the card back
    assert fill(request)["value"] == "/cache/sapiens2-viewer-card-pose.glb"
    SHOWN_MODELS.put("viewer-test", "pose", "/x/pose_3d.glb")
    SHOWN_MODELS.forget("viewer-test")
    assert SHOWN_MODELS.get("viewer-test", "pose") is None and fill(request)["value"].endswith("card-pose.glb")
    assert SHOWN_MODELS.get("someone-else", "pose") == "/y/pose_3d.glb"


@pytest.mark.parametrize("extents", [(0.5, 1.8, 0.3), (2.0, 0.4, 0.2), (0.6, 0.6, 3.0)],
                         ids=["standing", "lying", "deep"])
def test_a_model_is_framed_whole(tmp_path, extents):
    """The viewer's camera (its field of view, the canvas at its narrowest) sees the model's bounds whole: from in
    front, the near side's half height and half width (over the aspect) within the half-angle of the view."""
    import math

    import trimesh

    from sapiens2_demo.ui.viewers import FIELD_OF_VIEW, NARROWEST, framing

    box = trimesh.creation.box(extents=extents)
    box.apply_translation((0.3, -0.2, -2.5))  # a person in the camera frame: in front of it
    path = tmp_path / "box.glb"
    path.write_bytes(trimesh.Scene(box).export(file_type="glb"))
    alpha, beta, radius = framing(path)
    width, height, depth = extents
    near = radius - depth / 2
    assert (alpha, beta) == (90.0, 90.0)
    assert max(height / 2, width / 2 / NARROWEST) / near <= math.tan(FIELD_OF_VIEW / 2) / 1.1  # with room to spare
    assert max(height / 2, width / 2 / NARROWEST) / near >= math.tan(FIELD_OF_VIEW / 2) / 1.3  # and not lost in it
    assert framing(tmp_path / "missing.glb") is None


def test_every_viewer_starts_with_its_card(app_server):
    """The 3D viewers are shown from the start and hold a model (the card that says what a run shows there), a
    fixed height, and no hidden state; the card is a real .glb with one textured quad."""
    import gradio as gr
    import trimesh

    demo, _ = app_server
    viewers = {block.elem_id: block for block in demo.blocks.values()
               if isinstance(block, gr.Model3D) and block.elem_id in ("pose-viewer", "pointmap-viewer", "video-motion")}
    assert set(viewers) == {"pose-viewer", "pointmap-viewer", "video-motion"}
    for viewer in viewers.values():
        assert viewer.visible is True and viewer.height and viewer.value["path"].endswith(".glb")
        assert "sapiens2-viewer-card-" in viewer.value["path"]
        mesh = trimesh.load(viewer.value["path"], force="mesh")
        assert len(mesh.faces) == 2 and mesh.visual.material.emissiveTexture is not None


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


@pytest.mark.parametrize("endpoint", ["/normals", "/all"])
def test_the_api_answers_once_complete_and_the_tab_shows_the_render_first(client, app_server, endpoint, monkeypatch):
    """Slow downloads: the named endpoint (what gradio_client and MCP call) still answers in one update with the
    render and every download (a second update would make the client fetch every file twice); the tab's own
    event streams, the render first (nothing the user looks at waits for the files)."""
    from gradio_client import handle_file

    from sapiens2_demo.tasks.spec import TaskSpec

    write_files = TaskSpec.write_files

    def slow(self, *args, **kwargs):  # the downloads are written beside the render: make them finish after it
        time.sleep(0.5)
        return write_files(self, *args, **kwargs)

    monkeypatch.setattr(TaskSpec, "write_files", slow)
    job = client.submit(handle_file(str(ASSETS / "astronaut.jpg")), api_name=endpoint)
    final = job.result()
    assert len(job.outputs()) == 1
    if endpoint == "/all":
        assert len(final[0]) >= 6 and zipfile.is_zipfile(final[1])
    else:
        assert {Path(f).name for f in final[1]} == {"normals16.png"} and Path(final[0][1]).exists()

    steps = tab_steps(app_server, endpoint)
    if endpoint == "/all":  # a local launch: the gallery grows a tile at a time, then the zip alone
        *shown, last = steps
        assert [len(gallery) for gallery, *_ in shown] == [2, 3, 4, 5, 6]
        assert all(files is None for _, files, *_ in shown) and zipfile.is_zipfile(last[1])
    else:
        assert len(steps) == 2
        first, last = steps
        assert first[1] in ([], None) and {Path(f).name for f in last[1]} == {"normals16.png"}


def tab_steps(app_server, endpoint: str) -> list:
    """The updates the tab's own (streamed, private) event gives for the astronaut, its options at their defaults."""
    import inspect

    import gradio as gr

    [tab_event] = [fn for fn in app_server[0].fns.values() if fn.api_name == f"{endpoint[1:]}_tab"]
    assert inspect.isgeneratorfunction(tab_event.fn)
    call = inspect.signature(tab_event.fn).bind(str(ASSETS / "astronaut.jpg"))
    call.apply_defaults()
    call.arguments["progress"] = gr.Progress(track_tqdm=False)
    return list(tab_event.fn(*call.args))


def test_the_tab_shows_the_render_once_then_only_the_files(app_server):
    """The render's update comes first; the second carries the downloads and skips the render and the legend (the
    page draws them once)."""
    import gradio as gr

    (slider, legend, files, _), (slider_again, legend_again, files_after, _) = tab_steps(app_server, "/segment")
    assert slider is not None and legend and files == []
    assert slider_again == gr.skip() and legend_again == gr.skip()
    assert {Path(f).name for f in files_after} == {"body_parts_labels.png", "body_parts_colors.png"}


def test_downloads_are_served_from_the_output_folder_not_copied(app_server):
    """The output folder is a static path: gradio answers with the files where they were written (no hash,
    no copy into its cache per answer), and serves them to whoever has the answer."""
    import urllib.request

    from gradio_client import Client, handle_file

    demo, url = app_server
    root = demo.sapiens2_context.outputs.root
    client = Client(url, verbose=False, download_files=False)
    _, files, _ = client.predict(handle_file(str(ASSETS / "astronaut.jpg")), api_name="/normals")
    paths = [Path(f["path"]) for f in files]
    assert {p.name for p in paths} == {"normals16.png"}  # light by default: raw_data adds normals.npy
    assert all(p.is_relative_to(root) and p.is_file() for p in paths)  # the written files themselves
    with urllib.request.urlopen(files[0]["url"]) as response:
        assert response.read() == paths[0].read_bytes()

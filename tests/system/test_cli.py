"""The batch command (`python -m sapiens2_demo.cli`, local engine) on the tiny checkpoints.

A folder of 12 small images in sub-folders (two named `astronaut.jpg` in different folders), one corrupt file
and one short video: outputs, manifest, exit status; a second run skips everything (no model call); a run
killed with SIGKILL midway and resumed gives the exports of one uninterrupted run.

Exports of two runs are compared with `assert_same_exports`: the same files; where bytes differ (a batch of
other images, or another thread count, may round the last float bit differently): .npy arrays within 1e-3 of
their largest magnitude; PNG pixels within 2 levels + 0.01 % of the value (16-bit depth is in mm) on at least
99.9 % of pixels; JSON numbers within 0.05 + 1e-3 relative (keypoints are in pixels); point clouds with the
same points within 1 mm + 1e-4 relative (the tiny models' random depths reach kilometres).
"""

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from sapiens2_demo import cli
from sapiens2_demo import tasks as task_specs
from sapiens2_demo.batch import discover, read_manifest

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "assets"
IMAGE_TASKS = ("pose", "seg", "normal", "pointmap", "matting")

# (file, asset, crop box, size): small images keep the run short; two share the name astronaut.jpg
IMAGES = [
    ("people/astronaut.jpg", "astronaut", (0, 0, 512, 512), (96, 96)),
    ("people/hopper.png", "grace_hopper", (0, 0, 512, 600), (80, 96)),
    ("people/crowd/camera.jpg", "camera", (0, 0, 512, 512), (72, 72)),
    ("people/crowd/hopper_face.webp", "grace_hopper", (150, 50, 400, 330), (64, 72)),
    ("more/astronaut.jpg", "astronaut", (120, 40, 420, 460), (72, 100)),
    ("more/wide.jpg", "astronaut", (0, 100, 512, 356), (128, 64)),
    ("more/tall.png", "grace_hopper", (100, 0, 356, 600), (48, 112)),
    ("more/deep/camera_crop.jpg", "camera", (100, 100, 400, 400), (80, 80)),
    ("more/deep/small.jpg", "astronaut", (200, 0, 312, 200), (40, 72)),
    ("extra/a.png", "astronaut", (0, 256, 256, 512), (64, 64)),
    ("extra/b.jpg", "grace_hopper", (0, 300, 512, 600), (96, 56)),
    ("extra/c.bmp", "camera", (256, 0, 512, 256), (56, 56)),
]
CORRUPT = "more/broken.jpg"
VIDEO = "clips/walk.mp4"


def make_dataset(root: Path, images=IMAGES, corrupt: bool = True, video: bool = True) -> Path:
    for name, asset, box, size in images:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.open(ASSETS / f"{asset}.jpg").convert("RGB").crop(box).resize(size).save(path)
    if corrupt:
        (root / CORRUPT).write_bytes(b"\xff\xd8\xff\xe0 this is not really a JPEG")
    if video:
        from videos import make_video

        (root / VIDEO).parent.mkdir(parents=True, exist_ok=True)
        make_video(root / VIDEO, frames=4, size=(64, 48), fps=8, audio=False)
    return root


def cli_args(tiny_dir, inputs, output, *extra) -> list[str]:
    return ["--input", *map(str, inputs), "--output", str(output), "--checkpoint-dir", str(tiny_dir),
            "--detector", str(tiny_dir / "yolov8n-random.pt"), "--device", "cpu", *map(str, extra)]


def run_cli(args) -> tuple[int, str, str]:
    """cli.main in this process; (exit status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(args)
    return code, out.getvalue(), err.getvalue()


def this_run(manifest: Path, start: int = 0, stop: int | None = None) -> dict:
    """Manifest lines [start:stop] (one run's), by input path."""
    return {r.input: r for r in read_manifest(manifest)[start:stop]}


def by_name(records: dict, data: Path) -> dict:
    return {Path(key).relative_to(data).as_posix(): record for key, record in records.items()}


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("batch_in") / "data")


@pytest.fixture(scope="module")
def reference(tiny_dir, data, tmp_path_factory):
    """One uninterrupted run of every image task over the dataset (progress bar on, batches of 4)."""
    import torch

    out = tmp_path_factory.mktemp("batch_out") / "reference"
    threads = torch.get_num_threads()
    code, stdout, stderr = run_cli(cli_args(tiny_dir, [data], out, "--tasks", "all", "--batch-size", 4))
    assert torch.get_num_threads() == threads  # the engine's thread setting does not leak into the caller
    return code, stdout, stderr, out


# -- comparing exports -------------------------------------------------------------------------------------
def export_files(folder: Path, tasks=IMAGE_TASKS) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and p.name != "manifest.jsonl" and p.parent.name in tasks)


def _numbers(value):
    if isinstance(value, dict):
        return [n for key in sorted(value) for n in _numbers(value[key])]
    if isinstance(value, list):
        return [n for item in value for n in _numbers(item)]
    return [float(value)] if isinstance(value, (int, float)) and not isinstance(value, bool) else [str(value)]


def assert_same_file(a: Path, b: Path) -> None:
    if a.read_bytes() == b.read_bytes():
        return
    if a.suffix == ".npy":
        x, y = np.load(a), np.load(b)
        assert x.shape == y.shape and x.dtype == y.dtype, a
        np.testing.assert_allclose(x, y, rtol=0, atol=1e-3 * max(1.0, float(np.abs(x).max())), err_msg=str(a))
    elif a.suffix == ".png":
        x, y = np.asarray(Image.open(a)), np.asarray(Image.open(b))
        assert x.shape == y.shape and x.dtype == y.dtype, a
        x, y = x.astype(np.float64), y.astype(np.float64)
        close = np.abs(x - y) <= 2 + 1e-4 * np.abs(x)  # 16-bit depth in mm: random tiny depths reach km
        assert close.mean() >= 0.999, (a, close.mean())
    elif a.suffix in (".json", ".jsonl"):
        x = [_numbers(json.loads(line)) for line in a.read_text().splitlines()]
        y = [_numbers(json.loads(line)) for line in b.read_text().splitlines()]
        assert len(x) == len(y), a
        for u, v in zip(x, y):
            assert [n for n in u if isinstance(n, str)] == [n for n in v if isinstance(n, str)], a
            numbers = [[n for n in line if not isinstance(n, str)] for line in (u, v)]
            np.testing.assert_allclose(*numbers, rtol=1e-3, atol=0.05, err_msg=str(a))
    elif a.suffix in (".ply", ".glb"):
        import trimesh

        x, y = (trimesh.load(p, force="mesh" if p.suffix == ".ply" else None) for p in (a, b))
        if hasattr(x, "geometry"):  # a glb is a scene of one point cloud
            x, y = (next(iter(s.geometry.values())) for s in (x, y))
        assert x.vertices.shape == y.vertices.shape, a
        np.testing.assert_allclose(x.vertices, y.vertices, rtol=1e-4, atol=1e-3, err_msg=str(a))
    else:
        raise AssertionError(f"{a} differs")


def assert_same_exports(a: Path, b: Path, tasks=IMAGE_TASKS) -> None:
    files = export_files(a, tasks)
    assert files and files == export_files(b, tasks)
    for rel in files:
        assert_same_file(a / rel, b / rel)


# -- discovery (no model) ----------------------------------------------------------------------------------
def test_inputs_mirror_folders_and_never_collide(tmp_path):
    for name in ("a/x.jpg", "b/x.jpg", "b/x.png", "b/deep/y.jpeg", "b/notes.txt", "out/old.png"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(b"")
    items = discover([str(tmp_path)], output_dir=tmp_path / "out")
    assert {item.name: item.kind for item in items} == {"a/x": "image", "b/x_jpg": "image", "b/x_png": "image",
                                                       "b/deep/y": "image"}  # no .txt, nothing from out/
    globbed = discover([str(tmp_path / "b" / "**" / "*.jp*g"), str(tmp_path / "a" / "x.jpg")])
    assert [item.name for item in globbed] == ["b/deep/y", "b/x", "a/x"]  # root: the common folder of both
    single = discover([str(tmp_path / "b" / "deep" / "y.jpeg")])
    assert [(item.name, item.path) for item in single] == [("y", tmp_path / "b" / "deep" / "y.jpeg")]


def test_missing_input_is_a_usage_error(tmp_path, capsys):
    assert cli.main(["--input", str(tmp_path / "nowhere"), "--output", str(tmp_path / "out")]) == 2
    assert "No such file or folder" in capsys.readouterr().err
    assert cli.main(["--input", str(tmp_path), "--output", str(tmp_path / "out"), "--tasks", "pose,dance"]) == 2
    assert "Unknown task 'dance'" in capsys.readouterr().err


def test_missing_checkpoint_stops_the_run_with_its_name(data, tmp_path, capsys):
    out = tmp_path / "out"
    code = cli.main(["--input", str(data / "people" / "hopper.png"), "--output", str(out), "--tasks", "seg",
                     "--checkpoint-dir", str(tmp_path / "empty"), "--device", "cpu", "-q"])
    assert code == 2
    err = capsys.readouterr().err
    assert "Could not load facebook/sapiens2-seg-0.4b" in err
    assert "1 input (1 image, 0 videos), 0 already complete" in err  # plurals as written ("1 inputs" was)
    assert read_manifest(out / "manifest.jsonl") == []  # not a failure of the input: nothing recorded


# -- the command -------------------------------------------------------------------------------------------
def test_outputs_manifest_and_exit_status(reference, data):
    code, stdout, stderr, out = reference
    assert code == 1  # the corrupt file failed
    records = by_name(this_run(out / "manifest.jsonl"), data)
    assert set(records) == {name for name, *_ in IMAGES} | {CORRUPT, VIDEO}
    assert records[CORRUPT].status == "failed" and "not a supported image" in records[CORRUPT].error
    assert records[CORRUPT].outputs == []
    assert records[VIDEO].status == "ok", records[VIDEO].error
    assert {p.split("/")[2] for p in records[VIDEO].outputs} == set(IMAGE_TASKS)
    assert any(p.endswith("pose_frames.jsonl") for p in records[VIDEO].outputs)
    for name, asset, box, (width, height) in IMAGES:
        record = records[name]
        assert record.status == "ok" and record.error is None and record.seconds > 0
        stem = name.rsplit(".", 1)[0]
        for task in IMAGE_TASKS:
            for file in task_specs.get(task).files:
                assert f"{stem}/{task}/{file}" in record.outputs
        assert all((out / p).is_file() for p in record.outputs)
        labels = np.asarray(Image.open(out / stem / "seg" / "body_parts_labels.png"))
        assert labels.shape == (height, width) and labels.max() <= 28
        pose = json.loads((out / stem / "pose" / "pose_sapiens2.json").read_text())
        assert pose["image_size"] == [height, width] and len(pose["instances"][0]["keypoints"]) == 308
        assert np.load(out / stem / "normal" / "normals.npy").shape == (height, width, 3)
    # the two astronaut.jpg have their own folders, with their own results
    first, second = (np.load(out / d / "astronaut" / "pointmap" / "depth_m.npy") for d in ("people", "more"))
    assert first.shape == (96, 96) and second.shape == (100, 72)
    assert not list(out.rglob(".tmp-*"))  # no temporary folder left behind
    assert "13 ok, 1 failed, 0 skipped" in stdout  # 12 images and the video
    assert "items/s" in stdout and "failed: " in stderr and "item/s" in stderr  # summary, failure, the bar


def test_second_run_skips_everything_complete(reference, data, tiny_dir, monkeypatch):
    from sapiens2_demo import gpu
    from sapiens2_demo.models.manager import ModelManager

    _, _, _, out = reference
    calls = []
    real_infer, real_get = gpu.infer, ModelManager.get
    monkeypatch.setattr(gpu, "infer", lambda *a, **k: calls.extend(j.task for j in a[2]) or real_infer(*a, **k))
    monkeypatch.setattr(ModelManager, "get", lambda self, ckpt: calls.append(ckpt) or real_get(self, ckpt))
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != "manifest.jsonl"}
    before = len(read_manifest(out / "manifest.jsonl"))

    code, stdout, _ = run_cli(cli_args(tiny_dir, [data], out, "--tasks", "all", "--quiet"))
    assert code == 1 and calls == []  # the corrupt file is tried again (and fails before any model)
    records = by_name(this_run(out / "manifest.jsonl", before), data)
    assert len(records) == 14
    assert {name for name, r in records.items() if r.status == "skipped"} == {n for n, *_ in IMAGES} | {VIDEO}
    first = by_name(this_run(out / "manifest.jsonl", 0, before), data)
    assert all(records[name].outputs == first[name].outputs for name in records if name != CORRUPT)
    assert "0 ok, 1 failed, 13 skipped" in stdout
    assert mtimes == {p: p.stat().st_mtime_ns for p in mtimes}  # nothing rewritten

    # two files named on their own (common folder: data, as before); a subset of the done tasks is complete
    two = [data / "people" / "hopper.png", data / "more" / "astronaut.jpg"]
    code, stdout, _ = run_cli(cli_args(tiny_dir, two, out, "--tasks", "pose,seg", "-q"))
    assert code == 0 and calls == [] and "0 ok, 0 failed, 2 skipped" in stdout
    # --overwrite redoes complete inputs
    code, stdout, _ = run_cli(cli_args(tiny_dir, two, out, "--tasks", "seg", "--overwrite", "-q"))
    assert code == 0 and "2 ok, 0 failed, 0 skipped" in stdout and "segment" in calls
    assert (out / "people" / "hopper" / "seg" / "body_parts_labels.png").stat().st_mtime_ns > mtimes[
        out / "people" / "hopper" / "seg" / "body_parts_labels.png"]


def _complete_files(out: Path) -> int:
    """Every export outside the temporary folders opens whole; returns how many there are."""
    import trimesh

    count = 0
    for path in out.rglob("*"):
        if not path.is_file() or path.name == "manifest.jsonl" or any(p.startswith(".tmp-") for p in path.parts):
            continue
        if path.suffix == ".png":
            Image.open(path).load()
        elif path.suffix == ".npy":
            np.load(path)
        elif path.suffix == ".json":
            json.loads(path.read_text())
        elif path.suffix in (".ply", ".glb"):
            trimesh.load(path)
        count += 1
    return count


def _processes_mentioning(text: str) -> list[int]:
    """Processes whose command line contains `text` (Linux /proc)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:  # gone meanwhile
            continue
    return found


def test_killed_run_resumes_to_the_same_outputs(reference, data, tiny_dir, tmp_path):
    _, _, _, ref = reference
    out = tmp_path / "killed"
    dense = ("seg", "normal", "pointmap", "matting")  # pose's random-weight detector is slow: left out here
    args = cli_args(tiny_dir, [data / "people", data / "more", data / "extra"], out, "--tasks", ",".join(dense),
                    "--batch-size", 2, "--quiet")
    env = dict(os.environ, HF_HUB_OFFLINE="1", YOLO_OFFLINE="1")
    process = subprocess.Popen([sys.executable, "-m", "sapiens2_demo.cli", *args], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    manifest = out / "manifest.jsonl"
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and process.poll() is None:
            if sum(r.status == "ok" for r in read_manifest(manifest)) >= 3:
                break
            time.sleep(0.02)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait()
    done_before = {r.input for r in read_manifest(manifest) if r.status == "ok"}
    for _ in range(50):  # its writer processes die with it: none is left to race the resumed run
        if not _processes_mentioning(str(out)):
            break
        time.sleep(0.1)
    else:
        raise AssertionError("writer processes outlived the killed run")
    assert 3 <= len(done_before) < len(IMAGES), "the run was not killed midway"
    assert _complete_files(out) > 0

    before = len(read_manifest(manifest))
    code, stdout, _ = run_cli(args)
    assert code == 1  # the corrupt file
    records = this_run(manifest, before)
    assert done_before <= {key for key, r in records.items() if r.status == "skipped"}
    assert sum(r.status in ("ok", "skipped") for r in records.values()) == len(IMAGES)
    assert not list(out.rglob(".tmp-*"))
    # the same exports as the uninterrupted run (which also saw the video: compare the images' folders)
    for top in ("people", "more", "extra"):
        assert_same_exports(ref / top, out / top, dense)


def test_features_task_writes_the_features_tabs_files(data, tiny_dir, tmp_path):
    out = tmp_path / "features"
    two = [data / "people" / "hopper.png", data / "extra" / "b.jpg"]
    code, stdout, _ = run_cli(cli_args(tiny_dir, [*two, data / VIDEO], out, "--tasks", "features", "-q"))
    assert code == 1 and "2 ok, 1 failed" in stdout  # a video has no features
    records = by_name(this_run(out / "manifest.jsonl"), data)
    assert "images only" in records[VIDEO].error
    for name, (height, width) in (("people/hopper", (96, 80)), ("extra/b", (56, 96))):
        folder = out / name / "features"
        assert sorted(p.name for p in folder.iterdir()) == ["features_cls_embedding.npy",
                                                            "features_patch_features.npy", "features_pca.png"]
        patches = np.load(folder / "features_patch_features.npy")
        assert patches.dtype == np.float16 and patches.shape == (16, 12, 32)  # tiny: 256x192 input, 16 px patches
        assert np.load(folder / "features_cls_embedding.npy").shape == (32,)
        assert np.asarray(Image.open(folder / "features_pca.png")).shape == (height, width, 3)


def test_surface_mesh_and_lift_3d(data, tiny_dir, tmp_path):
    """`--tasks pointmap` writes the surface mesh beside the clouds; `--lift-3d` adds pose_3d.json (308 x 4 per
    person) to pose's files, and a video in the same run gets its motion capture (pose_3d.jsonl, a line per
    frame; the random-weight people give no skeleton, which the files do not pretend)."""
    import trimesh

    out = tmp_path / "lifted"
    inputs = [data / "people" / "hopper.png", data / VIDEO]
    code, stdout, _ = run_cli(cli_args(tiny_dir, inputs, out, "--tasks", "pose,pointmap", "--lift-3d",
                                       "--keep-background", "-q"))
    assert code == 0, stdout
    folder = out / "people" / "hopper"
    mesh = trimesh.load(folder / "pointmap" / "person_mesh.glb")
    assert sum(len(g.faces) for g in mesh.geometry.values()) > 0
    names = {p.name for p in (folder / "pose").iterdir()}
    assert set(task_specs.get("pose").files) | {"pose_3d.json"} <= names
    document = json.loads((folder / "pose" / "pose_3d.json").read_text())
    assert document["people"] and all(np.asarray(p["keypoints"], dtype=float).shape == (308, 4)
                                      for p in document["people"])
    records = by_name(this_run(out / "manifest.jsonl"), data)
    assert "people/hopper/pose/pose_3d.json" in records["people/hopper.png"].outputs
    video_pose = {p.rsplit("/", 1)[-1] for p in records[VIDEO].outputs if "/pose/" in p}
    assert {"pose_coco_wholebody.jsonl", "pose_3d.jsonl"} <= video_pose
    lines = (out / "clips" / "walk" / "pose" / "pose_3d.jsonl").read_text().splitlines()
    assert len(lines) == 4 and all(json.loads(line)["frame"] == i for i, line in enumerate(lines))


def test_rerun_with_lift_3d_redoes_images_done_without_it(data, tiny_dir, tmp_path):
    """Resume counts the files the options add: an image whose pose was done without --lift-3d is not complete
    for a run with it (pose_3d.json is written then); once lifted it is skipped, with or without the flag."""
    out = tmp_path / "relift"
    image = [data / "people" / "hopper.png"]
    pose_3d = out / "hopper" / "pose" / "pose_3d.json"  # one file named: its folder is the common one
    code, stdout, _ = run_cli(cli_args(tiny_dir, image, out, "--tasks", "pose", "-q"))
    assert code == 0 and "1 ok, 0 failed, 0 skipped" in stdout and not pose_3d.exists()

    code, stdout, _ = run_cli(cli_args(tiny_dir, image, out, "--tasks", "pose", "--lift-3d", "-q"))
    assert code == 0 and "1 ok, 0 failed, 0 skipped" in stdout, stdout
    assert pose_3d.is_file() and "people" in json.loads(pose_3d.read_text())
    before = len(read_manifest(out / "manifest.jsonl"))

    for flags in (["--lift-3d"], []):
        code, stdout, _ = run_cli(cli_args(tiny_dir, image, out, "--tasks", "pose", *flags, "-q"))
        assert code == 0 and "0 ok, 0 failed, 1 skipped" in stdout, (flags, stdout)
    skipped = by_name(this_run(out / "manifest.jsonl", before), data)["people/hopper.png"]
    assert skipped.status == "skipped" and "hopper/pose/pose_3d.json" in skipped.outputs


def test_rerun_with_lift_3d_redoes_videos_done_without_it(data, tiny_dir, tmp_path):
    """The same for a video: done without --lift-3d it has no pose_3d.jsonl, so a run with the flag redoes it;
    after that it is skipped."""
    out = tmp_path / "relift_video"
    video = [data / VIDEO]
    lines = out / "walk" / "pose" / "pose_3d.jsonl"
    code, stdout, _ = run_cli(cli_args(tiny_dir, video, out, "--tasks", "pose", "-q"))
    assert code == 0 and "1 ok, 0 failed, 0 skipped" in stdout and not lines.exists()
    code, stdout, _ = run_cli(cli_args(tiny_dir, video, out, "--tasks", "pose", "--lift-3d", "-q"))
    assert code == 0 and "1 ok, 0 failed, 0 skipped" in stdout, stdout
    assert len(lines.read_text().splitlines()) == 4
    code, stdout, _ = run_cli(cli_args(tiny_dir, video, out, "--tasks", "pose", "--lift-3d", "-q"))
    assert code == 0 and "0 ok, 0 failed, 1 skipped" in stdout, stdout

"""The benchmarks' harness: each run's results file names where and how it was measured, a partial run keeps the
tables it did not make (stamped with their own commit), and the docs' blocks are written from the files."""

import json

from benchmarks import __main__ as entry
from benchmarks import harness


def test_a_run_writes_its_results_file_with_the_machine_the_load_and_the_versions(tmp_path):
    with harness.Run("probe", "python -m benchmarks probe --x 1", weights="stand-ins", results=tmp_path) as run:
        run.figures["ms"] = 12.5
        run.table("main", ["task", "ms"], [["seg", 12.5]], caption="One row.")
    [written] = tmp_path.glob("probe-*.json")
    record = json.loads(written.read_text())
    assert written.name == f"probe-{harness.machine()['name']}.json"
    assert record["machine"]["cores"] >= 1 and record["machine"]["cpu"]
    assert len(record["load"]["before"]) == 3 and len(record["load"]["after"]) == 3
    assert record["versions"]["python"] and record["commit"] and record["command"].endswith("--x 1")
    assert record["figures"] == {"ms": 12.5} and record["tables"]["main"]["rows"] == [["seg", "12.5"]]


def test_a_partial_run_keeps_the_earlier_tables_with_their_own_commit(tmp_path):
    path = tmp_path / f"probe-{harness.machine()['name']}.json"
    earlier = {"benchmark": "probe", "command": "python -m benchmarks probe --all", "commit": "abc1234",
               "load": {"range": "0.5-1"}, "versions": {"torch": "2.0"}, "weights": "stand-ins",
               "machine": harness.machine(), "tables": {"video": {"columns": ["a"], "rows": [["1"]], "caption": ""},
                                                        "image": {"columns": ["a"], "rows": [["old"]], "caption": ""}}}
    path.write_text(json.dumps(earlier))
    with harness.Run("probe", "python -m benchmarks probe --only image", results=tmp_path) as run:
        run.table("image", ["a"], [["new"]])
    tables = json.loads(path.read_text())["tables"]
    assert tables["image"]["rows"] == [["new"]] and "commit" not in tables["image"]
    assert tables["video"]["rows"] == [["1"]]
    assert (tables["video"]["commit"], tables["video"]["load"], tables["video"]["torch"]) == ("abc1234", "0.5-1", "2.0")
    assert tables["video"]["command"] == "python -m benchmarks probe --all"


def test_a_docs_block_is_written_from_its_file_naming_machine_commit_and_command(tmp_path):
    with harness.Run("probe", "python -m benchmarks probe", weights="tiny random weights", results=tmp_path) as run:
        run.table("main", ["task", "ms"], [["seg", 3]])
    name = f"probe-{harness.machine()['name']}.json"
    page = f"Before.\n<!-- results: {name} main -->\nstale\n<!-- /results -->\nAfter.\n"
    written = harness.tables_in(page, tmp_path)
    assert "| seg | 3 |" in written and "stale" not in written and written.endswith("<!-- /results -->\nAfter.\n")
    footnote = written.splitlines()[-3]
    assert harness.machine()["cpu"] in footnote and "`python -m benchmarks probe`" in footnote
    assert "tiny random weights" in footnote and json.loads((tmp_path / name).read_text())["commit"] in footnote
    assert harness.tables_in(written, tmp_path) == written  # written once, it stays


def test_an_unknown_benchmark_is_named_not_a_traceback(capsys):
    assert entry.main(["no-such-bench"]) == 2
    assert "no benchmark named 'no-such-bench'" in capsys.readouterr().err


def test_every_benchmark_in_the_registry_can_be_found():
    import importlib

    for name, (where, _, _) in entry.BENCHMARKS.items():
        module, function = where.split(":")
        assert callable(getattr(importlib.import_module(f"benchmarks.{module}"), function)), name


def test_fresh_pictures_decode_to_a_new_image_each_time(tmp_path):
    """No cache may answer a fresh picture: a one-pixel change vanished in the JPEG's rounding."""
    import cv2
    import numpy as np

    pictures = harness.Pictures(tmp_path, fresh=True)
    decoded = [cv2.imread(pictures()) for _ in range(3)]
    assert not any(np.array_equal(a, b) for i, a in enumerate(decoded) for b in decoded[i + 1:])
    assert harness.Pictures(tmp_path).__call__() == pictures.path  # not fresh: the one picture


def test_checkpoints_given_to_a_benchmark_are_never_overwritten_by_tiny_ones(tmp_path):
    given = tmp_path / "sapiens2-seg-0.4b"
    given.mkdir()
    (given / "model.safetensors").write_bytes(b"full-size weights")
    assert harness.tiny_checkpoints(tmp_path) == tmp_path
    assert (given / "model.safetensors").read_bytes() == b"full-size weights"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["sapiens2-seg-0.4b", "yolov8n-random.pt"]


def test_the_compile_benchmark_compares_the_float32_road_the_test_holds(tmp_path, monkeypatch):
    """On a CPU with native bf16 the default road is bf16, whose keypoints move further than the targets allow."""
    from benchmarks import batch
    from tests import compile_parity

    given = []
    launch = compile_parity.Launch(1.0, 0, 0, "", tmp_path)
    monkeypatch.setattr(compile_parity, "make_inputs", lambda folder: folder)
    monkeypatch.setattr(compile_parity, "run_cli", lambda *a, **k: given.append(k.get("dtype")) or launch)
    monkeypatch.setattr(compile_parity, "record_pose", lambda *a: given.append(a[6]) or [])
    monkeypatch.setattr(compile_parity, "compare", lambda *a: {})
    monkeypatch.setattr(compile_parity, "pose_parity", lambda *a: {})
    with harness.Run("compile", "python -m benchmarks compile", results=tmp_path) as run:
        batch.compiled_launches(["--checkpoint-dir", str(tmp_path)], run)
    assert given == ["float32"] * 5


def test_the_burst_benchmark_records_its_crowd_launch_after_the_cold_ones(tmp_path, monkeypatch):
    from benchmarks import first

    (tmp_path / "sapiens2-seg-0.4b").mkdir()
    (tmp_path / "yolov8n-random.pt").write_bytes(b"detector")
    answered = {"counts": {"ok": 1}, "after_ok": True, "after": {}, "wall_s": 0.1}
    monkeypatch.setattr(first, "one_launch", lambda *args: dict(answered))
    with harness.Run("burst", "python -m benchmarks burst", results=tmp_path) as run:
        first.burst(["--launches", "2", "--clients", "1", "--dtypes", "float32", "--crowd", "3",
                     "--checkpoint-dir", str(tmp_path)], run)
    assert run.figures == {"runs": {"float32": [answered, answered]}, "crowd": answered}
    assert run.tables["burst"]["rows"] == [["float32", "2 x 1", "0", "ok 2", "True"],
                                           ["float32, crowd", "1 x 3", "0", "ok 1", "True"]]


def test_the_motion_tables_keep_the_world_run_and_the_camera_frame_run_apart():
    """The world's table comes from a run with --cameras, the camera frame's from one without: each its own key, so
    one run does not overwrite the other's table in the results file."""
    from benchmarks import bench_motion_truth as motion

    m = {"mpjpe_clean_mm": 0.4, "mpjpe_noise_mm": 11.0, "mpjpe_mm": 12.5, "heavy_mm": 19.0, "bone_error_pct": 6.0,
         "foot_slide_mm": 3.0, "body_jumps_90": 0, "body_jumps_clean": 0, "euler_flips": 0, "euler_flips_clean": 0,
         "swap_error_mm": 40.0, "baseline_error_mm": 30.0, "fit_ratio": 0.4, "finger_jumps_clean": 0,
         "id_switches": 0, "height_error": 0.01, "world_found": 4, "below_floor_pct": 0.0, "world_foot_slide_mm": 8.0}
    columns, rows = motion._clips_table([("curve", "after", m)])
    assert len(rows[0]) == len(columns) and rows[0][:3] == ["curve", "after", "0.400 / 11 / 12.5 / 19"]
    assert rows[0][-1] == "noise, faults, heavy, bones"
    columns, rows = motion._world_table({"curve": {"after": m, "camera 1.8 m, 15 down, 4 rolled": m}})
    assert [row[1] for row in rows] == ["level, 1 m", "1.8 m, 15 down, 4 rolled"] and len(rows[0]) == len(columns)
    assert motion._world_table({"curve": {"after": {**m, "world_found": 0}}}) is None


def test_full_size_checkpoints_are_written_per_family_with_the_body_parts_their_masks_need(tmp_path, monkeypatch):
    """cpu's pose-noflip is the pose family; normals and depth remove the background with the body-part model;
    matting has no full size. The folder gains the random detector the benchmarks' managers name."""
    from benchmarks import checkpoints

    written = []
    monkeypatch.setattr(checkpoints, "write_fullsize_checkpoint", lambda task, root: written.append(task))
    monkeypatch.setattr(checkpoints, "write_tiny_detector", lambda path: path.write_bytes(b"detector"))
    assert checkpoints.ensure_fullsize(["pose-noflip", "normal", "matting"], tmp_path) == tmp_path
    assert written == ["normal", "pose", "seg"]
    assert (tmp_path / "yolov8n-random.pt").read_bytes() == b"detector"

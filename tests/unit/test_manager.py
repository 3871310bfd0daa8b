"""Model manager: lazy, one load under concurrent first requests, bounded, clear failures."""

import threading

import pytest

from sapiens2_demo.models.manager import CheckpointUnavailable, ModelManager
from sapiens2_demo.models.registry import TASKS, UnknownCheckpoint, checkpoint, revision_overrides


def test_nothing_loads_at_start(manager):
    assert manager.loaded_keys == []
    assert manager.load_counts == {}
    assert not manager.is_loaded(checkpoint("seg", "0.4b"))


def test_loads_local_checkpoint_through_task_class(manager, tiny_dir):
    ckpt = checkpoint("seg", "0.4b")
    loaded = manager.get(ckpt)
    assert type(loaded.model).__name__ == "Sapiens2ForSemanticSegmentation"
    assert type(loaded.processor).__name__ == "Sapiens2ImageProcessor"
    assert loaded.source == str(tiny_dir / "sapiens2-seg-0.4b")
    assert loaded.nbytes > 0
    assert manager.get(ckpt) is loaded  # second call is a cache hit
    assert manager.load_counts == {("sapiens2", ckpt.repo_id, ckpt.revision): 1}


def test_every_task_loads_its_own_class(manager):
    expected = {"pose": "Sapiens2ForPoseEstimation", "seg": "Sapiens2ForSemanticSegmentation",
                "normal": "Sapiens2ForNormalEstimation", "pointmap": "Sapiens2ForPointmapEstimation",
                "matting": "Sapiens2ForImageMatting", "pretrain": "Sapiens2Model"}
    for task, class_name in expected.items():
        loaded = manager.get(checkpoint(task, TASKS[task].sizes[0]))
        assert type(loaded.model).__name__ == class_name


def test_one_load_under_eight_concurrent_first_requests(manager, monkeypatch):
    ckpt = checkpoint("normal", "0.4b")
    calls = []
    real_load = manager._load_sapiens2
    barrier = threading.Barrier(8)

    def slow_load(c):
        calls.append(c)
        return real_load(c)

    monkeypatch.setattr(manager, "_load_sapiens2", slow_load)
    results, errors = [], []

    def worker():
        try:
            barrier.wait()
            results.append(manager.get(ckpt))
        except Exception as error:  # pragma: no cover - reported below
            errors.append(error)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len(calls) == 1
    assert len(results) == 8 and all(r is results[0] for r in results)


def test_eviction_keeps_within_budget(tiny_dir):
    probe = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32")
    seg = probe.get(checkpoint("seg", "0.4b")).nbytes
    normal = probe.get(checkpoint("normal", "0.4b")).nbytes
    budget = int(max(seg, normal) * 1.05)  # room for either model, not both
    assert seg + normal > budget
    manager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32", memory_budget_bytes=budget)
    manager.get(checkpoint("seg", "0.4b"))
    manager.get(checkpoint("normal", "0.4b"))
    keys = [key[1] for key in manager.loaded_keys]
    assert keys == ["facebook/sapiens2-normal-0.4b"]  # least recently used went
    assert manager.loaded_bytes <= manager.memory_budget_bytes
    manager.get(checkpoint("seg", "0.4b"))  # comes back on demand
    assert manager.load_counts[("sapiens2", "facebook/sapiens2-seg-0.4b", "main")] == 2


def test_missing_checkpoint_names_repo_revision_and_remedy(tmp_path):
    manager = ModelManager(checkpoint_dir=tmp_path, device="cpu", dtype="float32")
    with pytest.raises(CheckpointUnavailable) as info:
        manager.get(checkpoint("pose", "1b"))
    message = str(info.value)
    assert "facebook/sapiens2-pose-1b" in message
    assert "revision main" in message
    assert "--checkpoint-dir" in message and "sapiens2-pose-1b" in message
    assert manager.loaded_keys == []


def test_corrupt_checkpoint_is_a_clear_error(tiny_dir, tmp_path):
    import shutil

    broken = tmp_path / "sapiens2-seg-0.4b"
    shutil.copytree(tiny_dir / "sapiens2-seg-0.4b", broken)
    (broken / "model.safetensors").write_bytes(b"not a safetensors file")
    manager = ModelManager(checkpoint_dir=tmp_path, device="cpu", dtype="float32")
    with pytest.raises(CheckpointUnavailable, match="facebook/sapiens2-seg-0.4b"):
        manager.get(checkpoint("seg", "0.4b"))


def test_only_allow_listed_checkpoints():
    with pytest.raises(UnknownCheckpoint):
        checkpoint("matting", "0.4b")
    with pytest.raises(UnknownCheckpoint):
        checkpoint("../../etc", "0.4b")
    with pytest.raises(UnknownCheckpoint):
        checkpoint("seg", "evil/repo")
    assert checkpoint("matting", "1b").repo_id == "facebook/sapiens2-matting-1b"


def test_revision_override(monkeypatch):
    monkeypatch.setenv("SAPIENS2_REVISIONS", "facebook/sapiens2-seg-0.4b=refs/pr/1")
    assert checkpoint("seg", "0.4b").revision == "refs/pr/1"
    assert checkpoint("seg", "1b").revision == "main"
    with pytest.raises(UnknownCheckpoint):
        revision_overrides("someone/else=main")


def test_device_and_dtype_are_chosen_and_overridable(tiny_dir):
    import torch

    auto = ModelManager(checkpoint_dir=tiny_dir)
    expected = ("cuda", torch.bfloat16) if torch.cuda.is_available() else ("cpu", torch.float32)
    assert (auto.device, auto.dtype) == expected
    forced = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="bfloat16")
    loaded = forced.get(checkpoint("seg", "0.4b"))
    assert next(loaded.model.parameters()).dtype == torch.bfloat16


def test_stress_many_threads_with_evictions(tiny_dir):
    """8 threads x 8 random requests over every task, under a budget that holds about two models, so most loads evict
    one (16 x 12 took 49 s in a full run of the suite on the 2-core EPYC, 8-18 s alone)."""
    import random

    probe = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32")
    ckpts = [checkpoint(task, TASKS[task].sizes[0]) for task in TASKS]
    largest = max(probe.get(c).nbytes for c in ckpts)
    manager = ModelManager(checkpoint_dir=tiny_dir, device="cpu", dtype="float32",
                           memory_budget_bytes=int(largest * 2.1))
    errors, over_budget = [], []

    def worker(seed):
        rng = random.Random(seed)
        try:
            for _ in range(8):
                ckpt = rng.choice(ckpts)
                loaded = manager.get(ckpt)
                assert loaded.model.config.num_labels == {"pose": 308, "seg": 29, "normal": 3, "pointmap": 3,
                                                          "matting": 4, "pretrain": 2}[ckpt.task]  # 2: unused default
                if manager.loaded_bytes > manager.memory_budget_bytes:
                    over_budget.append(manager.loaded_bytes)
        except Exception as error:  # reported below
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(seed,)) for seed in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert not over_budget
    assert sum(manager.load_counts.values()) > len(ckpts)  # evictions really happened
    assert manager.loaded_bytes <= manager.memory_budget_bytes


def test_falls_back_to_the_pr_revision_when_main_lacks_transformers_files(tiny_dir, monkeypatch):
    import transformers

    seen = []
    auto = transformers.AutoModelForSemanticSegmentation
    real_model, real_processor = auto.from_pretrained, transformers.Sapiens2ImageProcessor.from_pretrained

    def fake(real):
        def from_pretrained(source, revision=None, **kwargs):
            seen.append((source, revision))
            if revision == "main":
                raise OSError(f"{source} does not appear to have a file named config.json.")
            return real(str(tiny_dir / "sapiens2-seg-0.4b"), **kwargs)
        return from_pretrained

    monkeypatch.setattr(auto, "from_pretrained", fake(real_model))
    monkeypatch.setattr(transformers.Sapiens2ImageProcessor, "from_pretrained", fake(real_processor))
    manager = ModelManager(device="cpu", dtype="float32")  # no checkpoint dir: the hub path
    loaded = manager.get(checkpoint("seg", "0.4b"))
    assert loaded.source == "facebook/sapiens2-seg-0.4b@refs/pr/1"
    assert ("facebook/sapiens2-seg-0.4b", "main") in seen and ("facebook/sapiens2-seg-0.4b", "refs/pr/1") in seen


def test_offline_hub_failure_names_the_revision_without_retrying(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    manager = ModelManager(device="cpu", dtype="float32")
    with pytest.raises(CheckpointUnavailable) as info:
        manager.get(checkpoint("normal", "0.8b"))
    assert "facebook/sapiens2-normal-0.8b at revision main:" in str(info.value)
    assert "refs/pr/1" not in str(info.value)  # offline is not "missing files": no second try


def test_a_model_off_its_road_at_load_is_refused_and_the_next_get_loads_it(manager, monkeypatch):
    """A load that comes out part in another dtype (what two loads side by side used to make) is never handed out."""
    import torch

    from sapiens2_demo.models import loading

    ckpt = checkpoint("seg", "0.4b")
    real_check = loading.off_road
    monkeypatch.setattr("sapiens2_demo.models.loading.off_road",
                        lambda model, device, dtype: real_check(model.half(), device, dtype))
    with pytest.raises(loading.ModelBroken, match="off its road .*float16@cpu"):
        manager.get(ckpt)
    assert manager.loaded_keys == []
    monkeypatch.setattr("sapiens2_demo.models.loading.off_road", real_check)
    loaded = manager.get(ckpt)
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}


def test_loads_never_interleave(manager, monkeypatch):
    """Loads touch process-wide state (torch's default dtype, threads): four first requests of four models load one
    after the other, never two at once."""
    import time

    inside, most = [0], [0]
    real_load = manager._load_sapiens2

    def watched(ckpt):
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.05)
        try:
            return real_load(ckpt)
        finally:
            inside[0] -= 1

    monkeypatch.setattr(manager, "_load_sapiens2", watched)
    threads = [threading.Thread(target=manager.get, args=(checkpoint(task, "0.4b"),))
               for task in ("seg", "pose", "normal", "pointmap")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1 and len(manager.loaded_keys) == 4

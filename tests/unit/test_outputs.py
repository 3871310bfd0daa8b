"""Per-session output folders: separate, swept after max age, deleted with the session."""

import os
import time

from sapiens2_demo.jobs.outputs import OutputStore


def test_runs_are_separate_per_session(tmp_path):
    store = OutputStore(tmp_path, max_age_s=60)
    a, b = store.new_run_dir("session-a"), store.new_run_dir("session-b")
    assert a.parent.name == "session-a" and b.parent.name == "session-b"
    assert store.new_run_dir("session-a") != a


def test_session_names_cannot_escape_the_root(tmp_path):
    store = OutputStore(tmp_path / "out", max_age_s=60)
    run = store.new_run_dir("../../etc")
    assert store.root in run.resolve().parents


def test_old_runs_are_swept(tmp_path):
    store = OutputStore(tmp_path, max_age_s=60)
    old, fresh = store.new_run_dir("s"), store.new_run_dir("s")
    (old / "depth.npy").write_bytes(b"x")
    past = time.time() - 120
    os.utime(old, (past, past))
    assert store.sweep() == 1
    assert not old.exists() and fresh.exists()


def test_delete_session(tmp_path):
    store = OutputStore(tmp_path, max_age_s=60)
    run = store.new_run_dir("gone")
    (run / "pose.json").write_text("{}")
    store.delete_session("gone")
    assert not run.exists()



def test_a_new_run_folder_survives_a_sweep_removing_its_empty_session_folder(tmp_path, monkeypatch):
    """Sixteen simultaneous requests: one request's sweep removed the session folder another had just made (still
    empty) before that one made its run folder inside it (mkdir: FileNotFoundError)."""
    from pathlib import Path

    store = OutputStore(tmp_path, max_age_s=60)
    mkdir, raced = Path.mkdir, []

    def racing(self, *args, **kwargs):
        if self.parent.name == "s" and not raced:
            raced.append(self)
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", racing)
    run = store.new_run_dir("s")
    assert raced and run.is_dir() and run.parent.name == "s"


def test_a_sweep_goes_on_when_another_removes_a_session_folder_under_it(tmp_path, monkeypatch):
    """Two apps (or two requests) sweeping one folder: the other removed a session's folder between this sweep's
    look at it and its listing (a request of the two benchmark apps failed with FileNotFoundError)."""
    import shutil
    from pathlib import Path

    store = OutputStore(tmp_path, max_age_s=60)
    gone, kept = store.new_run_dir("gone"), store.new_run_dir("kept")
    is_dir = Path.is_dir

    def racing(self):
        found = is_dir(self)
        if self == gone.parent:
            shutil.rmtree(self)  # the other sweep, right after this one saw the folder
        return found

    monkeypatch.setattr(Path, "is_dir", racing)
    assert store.sweep() == 0
    assert kept.is_dir() and not gone.exists()

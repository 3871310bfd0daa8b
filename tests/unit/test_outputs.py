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
    store.sweeper.join()  # the sweep the first run started, done before the folder ages (else it may take it first)
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


def test_a_new_run_does_not_wait_for_the_sweep_and_sweeps_at_most_once_a_while(tmp_path, monkeypatch):
    """The sweep stats every run folder of the last hour: it runs in a thread of its own, started by a new run at
    most every `sweep_every_s`, and old folders still go."""
    import threading

    store = OutputStore(tmp_path, max_age_s=60, sweep_every_s=3600)
    old = store.new_run_dir("s")
    store.sweeper.join()
    past = time.time() - 120
    os.utime(old, (past, past))
    store._swept_at = float("-inf")  # the next run may sweep
    release, sweeps, sweep = threading.Event(), [], store.sweep

    def held(*args, **kwargs):
        sweeps.append(1)
        assert release.wait(timeout=30)
        return sweep(*args, **kwargs)

    monkeypatch.setattr(store, "sweep", held)
    runs = [store.new_run_dir("s") for _ in range(5)]  # returns while the sweep is held
    assert all(run.is_dir() for run in runs) and len(sweeps) == 1 and old.exists()
    release.set()
    store.sweeper.join(timeout=30)
    assert not old.exists() and all(run.is_dir() for run in runs)
    store.new_run_dir("s")
    assert len(sweeps) == 1  # within sweep_every_s: no other sweep

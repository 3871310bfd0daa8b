"""ultralytics never installs anything at run time: its patched PIL.Image.open pip-installs pi-heif when a file is
not an image it knows (a visitor's upload would make the server install packages); the app turns that off before
ultralytics is imported, and keeps ultralytics' settings under its cache, not the home folder's config."""

import os
from pathlib import Path

import pytest


def test_a_bad_upload_installs_nothing(client, tmp_path, monkeypatch):
    import ultralytics  # noqa: F401 - patches PIL.Image.open (what a run with the detector does first)
    import ultralytics.utils.checks as checks
    from gradio_client import handle_file

    from sapiens2_demo.models.manager import ModelManager  # noqa: F401 - the app's modules, as a server has them

    asked, ran = [], []
    original = checks.check_requirements

    def check_requirements(*args, **kwargs):
        asked.append(args)
        return original(*args, **kwargs)

    class NoSubprocess:  # every way checks.py could run pip or uv
        def __getattr__(self, name):
            def run(*args, **kwargs):
                ran.append((name, args))
                raise RuntimeError("no installs in tests")
            return run

    monkeypatch.setattr(checks, "check_requirements", check_requirements)
    monkeypatch.setattr(checks, "subprocess", NoSubprocess())
    monkeypatch.setattr(checks, "ONLINE", True)  # as on a server with internet
    fake = tmp_path / "photo.heic"
    fake.write_bytes(b"\x00\x00\x00\x18ftypheic" + b"\x00" * 64)  # a HEIC header and nothing readable after it
    with pytest.raises(Exception, match="not a supported image|could not read"):
        client.predict(handle_file(str(fake)), api_name="/segment")
    assert asked, "the upload did not reach ultralytics' pi-heif install path: this test checks nothing"
    assert not ran, f"ultralytics tried to install: {ran}"
    assert checks.AUTOINSTALL is False


def test_ultralytics_settings_live_under_the_app_cache():
    from ultralytics.utils import SETTINGS_FILE, USER_CONFIG_DIR

    import sapiens2_demo  # noqa: F401 - sets the variables before ultralytics is imported

    home_config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "Ultralytics"
    assert USER_CONFIG_DIR != home_config and Path(os.environ["YOLO_CONFIG_DIR"]) in USER_CONFIG_DIR.parents
    assert SETTINGS_FILE.parent == USER_CONFIG_DIR


def test_a_detector_named_by_release_is_fetched_into_the_app_cache(tmp_path, monkeypatch):
    from sapiens2_demo.models.manager import detector_file

    monkeypatch.setenv("HF_HOME", str(tmp_path / "cache" / "huggingface"))
    assert detector_file("yolo26n.pt") == str(tmp_path / "cache" / "sapiens2-ultralytics" / "weights" / "yolo26n.pt")
    mine = tmp_path / "mine.pt"
    mine.write_bytes(b"weights")
    assert detector_file(str(mine)) == str(mine)  # a path as given
    assert detector_file("models/yolo.pt") == "models/yolo.pt"  # a relative path too, even before it exists

"""The Video tab's example clips: present, small, decodable, and reproducible by assets/make_example_videos.py."""

import importlib.util
import sys
from pathlib import Path

import av
import pytest

ASSETS = Path(__file__).resolve().parents[2] / "assets"
SCRIPT = ASSETS / "make_example_videos.py"
EXAMPLES = ["astronaut_pan", "grace_hopper_zoom"]


def load_script():
    spec = importlib.util.spec_from_file_location("make_example_videos", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def decode(path: Path) -> dict:
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        frames = sum(1 for _ in container.decode(stream))
        return {"frames": frames, "fps": float(stream.average_rate), "size": (stream.width, stream.height),
                "codec": stream.codec_context.name, "audio": [s.codec_context.name for s in container.streams.audio]}


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_is_small_and_decodes(name):
    path = ASSETS / f"{name}.mp4"
    assert path.is_file(), f"run {SCRIPT.name} to make {path.name}"
    assert path.stat().st_size < 1_000_000
    info = decode(path)
    assert info["frames"] >= 48 and info["codec"] == "h264"
    assert info["fps"] in (24, 25)


def test_script_covers_every_example():
    assert sorted(load_script().CLIPS) == sorted(EXAMPLES)


@pytest.mark.parametrize("name", EXAMPLES)
def test_script_regenerates_the_same_clip(name, tmp_path):
    made = load_script().make_clip(name, tmp_path / f"{name}.mp4")
    assert made == tmp_path / f"{name}.mp4" and not list(tmp_path.glob("*.partial"))
    assert decode(made) == decode(ASSETS / f"{name}.mp4")

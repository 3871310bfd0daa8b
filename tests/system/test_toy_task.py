"""Proof that a task is one-place knowledge: a model-free "edges" task registered once, here, runs through the
image API, `/video` and the batch CLI without a line changed anywhere else."""

import json

import cv2
import numpy as np
import pytest
from PIL import Image

from sapiens2_demo import tasks
from sapiens2_demo.results import TaskOutput
from tests.conftest import ASSETS, launch_app


class EdgesResult:
    def __init__(self, edges):
        self.edges = edges  # (H, W) uint8, 255 on an edge


class EdgesAnnotator:
    def annotate(self, frame, result):
        return np.repeat(result.edges[..., None], 3, axis=2)


def run_edges(frames, manager, size, *, seg_cache=None, low=50, **_):
    return [EdgesResult(cv2.Canny(cv2.cvtColor(f, cv2.COLOR_RGB2GRAY), int(low), 2 * int(low))) for f in frames]


def export_edges(rgb, result, folder, **_):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "edges.png"
    Image.fromarray(result.edges).save(path)
    return [path]


class EdgesVideoExport:
    def __init__(self, folder, **_):
        self.path, self.count = folder / "edges_count.json", []

    def add(self, index, time, frame, result):
        self.count.append(int((result.edges > 0).sum()))

    def close(self):
        self.path.write_text(json.dumps(self.count))
        return [self.path]

    def abort(self):
        self.path.unlink(missing_ok=True)


def present_edges(image, result, **options):
    return TaskOutput(main=EdgesAnnotator().annotate(image.rgb, result), notes=["edges drawn"])


EDGES = tasks.TaskSpec(
    "edges", "Edges", "Edges", "edges", ("none",), run_edges,
    options=(tasks.Option("low", 50, "Low threshold", "slider", low=1, high=200, step=1, model="low"),),
    renderer=lambda **_: EdgesAnnotator(), present=present_edges, export=export_edges, files=("edges.png",),
    video_export=EdgesVideoExport)


@pytest.fixture(scope="module")
def edges_app(tiny_dir):
    tasks.register(EDGES)
    demo, url = launch_app(tiny_dir, tiny_dir / "yolov8n-random.pt")
    yield url
    demo.close()
    tasks.unregister("edges")


def test_toy_task_through_the_image_api(edges_app):
    from gradio_client import Client, handle_file

    client = Client(edges_app, verbose=False)
    drawing, files, notes = client.predict(handle_file(str(ASSETS / "astronaut.jpg")), low=80, api_name="/edges")
    edges = np.asarray(Image.open(files[0]))
    photo = cv2.cvtColor(np.asarray(Image.open(ASSETS / "astronaut.jpg").convert("RGB")), cv2.COLOR_RGB2GRAY)
    assert np.array_equal(edges, cv2.Canny(photo, 80, 160))  # the option reached the pipeline
    assert "edges drawn" in notes and drawing


def test_toy_task_through_video_and_cli(edges_app, tmp_path, tiny_dir):
    from gradio_client import Client, handle_file

    from sapiens2_demo import cli
    from tests.videos import make_video

    clip = make_video(tmp_path / "clip.mp4", frames=6, size=(64, 48))
    video, files, notes = Client(edges_app, verbose=False).predict(
        handle_file(str(clip)), "edges", api_name="/video")
    counts = json.loads(open(next(f for f in files if f.endswith("edges_count.json"))).read())
    assert len(counts) == 6 and video.endswith(".mp4")

    out, photo = tmp_path / "out", tmp_path / "camera.jpg"
    photo.write_bytes((ASSETS / "camera.jpg").read_bytes())
    code = cli.main(["--input", str(photo), str(clip), "--output", str(out), "--tasks", "edges",
                     "--checkpoint-dir", str(tiny_dir), "--device", "cpu", "--quiet"])
    assert code == 0
    assert (out / "camera" / "edges" / "edges.png").is_file()
    assert json.loads((out / "clip" / "edges" / "edges_count.json").read_text()) == counts

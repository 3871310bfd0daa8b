"""An app on stand-in checkpoints says so (issue 38): the stand-in builder marks its folder with STANDINS.txt, and
the start-up log, the page's footer and every answer's notes read "stand-in checkpoints: shapes, not estimates";
on other checkpoints none of them does."""

import json
import logging
import urllib.request
from types import SimpleNamespace

import pytest

from tests.conftest import ASSETS, launch_app

SAID = "stand-in checkpoints: shapes, not estimates"


@pytest.fixture(scope="module")
def marked_app(tiny_dir, tmp_path_factory):
    """The app on the tiny checkpoints, in a folder marked as the stand-ins' (STANDINS.txt, as standins/train.py
    writes it), with what it logged while starting."""
    folder = tmp_path_factory.mktemp("marked")
    for path in tiny_dir.iterdir():
        (folder / path.name).symlink_to(path)
    (folder / "STANDINS.txt").write_text("Stand-in checkpoints (sapiens2_demo/standins): not models.\n")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger().addHandler(handler)
    try:
        demo, url = launch_app(folder, folder / "yolov8n-random.pt")
    finally:
        logging.getLogger().removeHandler(handler)
    yield demo, url, records
    demo.close()


def test_the_start_up_log_says_stand_ins(marked_app):
    _, _, records = marked_app
    said = [record for record in records if SAID in record.getMessage()]
    assert said and said[0].levelno >= logging.WARNING and "STANDINS.txt" in said[0].getMessage()


def test_the_page_footer_says_stand_ins(marked_app):
    _, url, _ = marked_app
    with urllib.request.urlopen(url + "config") as response:
        config = json.load(response)
    road = [c for c in config["components"] if c.get("props", {}).get("elem_id") == "road"]
    assert road and SAID in road[0]["props"]["value"].lower(), road


def test_every_answer_says_stand_ins(marked_app):
    """An answer leads its notes with it (every tab's handler builds them with ui.common.answer_notes)."""
    from gradio_client import Client, handle_file

    client = Client(marked_app[1], verbose=False)
    *_, notes = client.predict(handle_file(str(ASSETS / "camera.jpg")), flip_test=False, api_name="/pose")
    assert notes.lower().startswith(f"- {SAID}"), notes


def test_other_checkpoints_say_nothing_of_the_kind(tiny_dir):
    from sapiens2_demo.ui.common import answer_notes, runs_stand_ins

    unmarked = SimpleNamespace(manager=SimpleNamespace(checkpoint_dir=tiny_dir))
    assert not runs_stand_ins(unmarked.manager) and answer_notes(unmarked, ["1 person posed."]) == ["1 person posed."]
    assert not runs_stand_ins(SimpleNamespace(checkpoint_dir=None))  # the hub's checkpoints


def test_the_stand_in_detectors_empty_answer_says_why(marked_app):
    """The stand-ins' detector (random weights, in their folder) finds no one: pose's "No person detected" says
    that this is the detector, once, in place of reading as a fault of the photo."""
    from gradio_client import Client, handle_file

    from sapiens2_demo.pose.detector import NO_PERSON_NOTE
    from sapiens2_demo.ui.common import RANDOM_DETECTOR_NO_PERSON

    *_, notes = Client(marked_app[1], verbose=False).predict(handle_file(str(ASSETS / "camera.jpg")),
                                                             flip_test=False, api_name="/pose")
    assert notes.count(RANDOM_DETECTOR_NO_PERSON) == 1 and NO_PERSON_NOTE not in notes, notes
    assert "random weights" in RANDOM_DETECTOR_NO_PERSON


def test_a_real_detector_beside_the_stand_ins_is_not_called_random(tiny_dir, tmp_path):
    from sapiens2_demo.pose.detector import NO_PERSON_NOTE
    from sapiens2_demo.ui.common import answer_notes, runs_random_detector

    (tmp_path / "STANDINS.txt").write_text("stand-ins\n")
    theirs = SimpleNamespace(checkpoint_dir=tmp_path, detector_name=str(tmp_path / "yolov8n-random.pt"))
    other = SimpleNamespace(checkpoint_dir=tmp_path, detector_name="yolo26n.pt")  # an ultralytics model name
    assert runs_random_detector(theirs) and not runs_random_detector(other)
    assert NO_PERSON_NOTE in answer_notes(SimpleNamespace(manager=other), [NO_PERSON_NOTE])

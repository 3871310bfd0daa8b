"""What a visitor reads on the page: the Body parts class names whole wherever the slider stands, and an option's
label naming every model it runs."""

import json
import re
import urllib.request

import numpy as np
from PIL import Image

from tests.conftest import ASSETS


def test_class_names_read_whole_at_the_sliders_start(client):
    """The slider starts in the middle, showing the input on the left and the parts on the right: names drawn on
    the parts only lost their left half ("Face Neck" read "ck"). They are written on both sides, so wherever the
    slider stands a name is whole."""
    from gradio_client import handle_file

    photo = handle_file(str(ASSETS / "astronaut.jpg"))
    (_, plain), *_ = client.predict(photo, show_names=False, api_name="/segment")
    (before, after), *_ = client.predict(photo, show_names=True, api_name="/segment")
    before, after, plain = (np.asarray(Image.open(path).convert("L"), np.int16) for path in (before, after, plain))
    written = np.abs(after - plain) > 60  # the names' boxes and letters (JPEG noise is far below this)
    assert written.mean() > 0.002, written.mean()
    # the input side carries the same names, pixel for pixel but for JPEG noise (it was the photo there)
    assert np.abs(before - after)[written].mean() < 12, np.abs(before - after)[written].mean()
    assert np.abs(before - plain)[written].mean() > 60


def test_an_options_label_names_every_model_it_runs(app_server):
    """"Lift to 3D (also runs the depth model)" also ran the body-part segmentation (the lift reads each keypoint's
    depth inside the person's mask): the label of each option that adds models names each of them, as the page
    shows it."""
    from sapiens2_demo import tasks
    from sapiens2_demo.tasks.catalog import OPTION_MODELS

    with urllib.request.urlopen(app_server[1] + "config") as response:
        labels = {c["props"].get("label") for c in json.load(response)["components"]}
    options = [(spec, o) for spec in tasks.all_specs() for o in spec.options if o.model in OPTION_MODELS]
    assert {o.name for _, o in options} >= {"lift_3d", "remove_background"}
    for spec, option in options:
        assert option.label in labels or spec.present is None, option.label  # a task tab shows this label
        words = re.sub(r"[-_]", " ", option.label.lower())
        for task in OPTION_MODELS[option.model]:
            named = tasks.get(task).short.lower().removesuffix("s")  # "depth", "body part"
            assert named in words, (option.label, task)

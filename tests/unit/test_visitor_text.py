"""What a visitor reads on the page: the notes as Markdown, the body-part names written on the image."""

import json
import shutil
import subprocess

import numpy as np
import pytest

from sapiens2_demo.render.parts import PartNamesAnnotator, display_name
from sapiens2_demo.util import notes_markdown


def test_notes_answer_in_plain_text():
    """API and MCP callers read the notes as written ("motion_<id>.bvh", not "motion_&lt;id&gt;.bvh")."""
    text = notes_markdown(["3D motion: 1 person in 9 frames: motion_<id>.bvh each and motion.glb", "a & b"])
    assert text == "- 3D motion: 1 person in 9 frames: motion_<id>.bvh each and motion.glb\n- a & b"


@pytest.mark.skipif(not shutil.which("node"), reason="needs node to run the page's JavaScript")
def test_the_page_escapes_the_notes_before_showing_them():
    """The browser's copy: a tag in a note (a file name, an error) is shown as text, neither dropped nor run."""
    from sapiens2_demo.ui.common import ESCAPE_NOTES_JS

    note = "- motion_<id>.bvh & <img src=x onerror=alert(1)>"
    shown = subprocess.run(["node", "-e", f"process.stdout.write(({ESCAPE_NOTES_JS})({json.dumps(note)}))"],
                           capture_output=True, text=True, check=True, timeout=30).stdout
    assert shown == "- motion_&lt;id&gt;.bvh &amp; &lt;img src=x onerror=alert(1)&gt;"


def test_part_names_are_spelled_as_the_legend():
    assert display_name("Upper_Clothing") == "Upper Clothing" and display_name("Torso") == "Torso"


def _label_box_height(side: int) -> int:
    """The height of the black box a label is written in, on a side x side image with one class in the middle."""
    labels = np.zeros((side, side), np.uint8)
    labels[side // 4:3 * side // 4, side // 4:3 * side // 4] = 23  # Upper_Clothing
    out = PartNamesAnnotator().annotate(np.full((side, side, 3), 255, np.uint8), labels)
    rows = np.flatnonzero((out == 0).all(axis=2).any(axis=1))
    return int(rows.max() - rows.min() + 1)


@pytest.mark.parametrize("side", [300, 1100, 2200])
def test_labels_grow_with_the_image(side):
    """Capitals 1/40 of the longer side (at least 12 px), so the label stays readable once the picture is scaled
    to a panel: the box is the capitals plus the descent and a padding, 1.5 to 2.5 times their height."""
    cap = max(PartNamesAnnotator.MIN_LABEL_PX, side * PartNamesAnnotator.LABEL_SHARE)
    assert 1.5 * cap <= _label_box_height(side) <= 2.5 * cap

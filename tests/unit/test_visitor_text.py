"""What a visitor reads on the page: the notes as Markdown, the body-part names written on the image."""

import numpy as np
import pytest

from sapiens2_demo.render.parts import PartNamesAnnotator, display_name
from sapiens2_demo.util import notes_markdown


def test_notes_keep_angle_brackets_as_text():
    """A page takes "<id>" as an HTML tag and drops it with the rest of the line: written as entities."""
    text = notes_markdown(["3D motion: 1 person(s): motion_<id>.bvh each and motion.glb (metres)", "plain"])
    assert text == ("- 3D motion: 1 person(s): motion_&lt;id&gt;.bvh each and motion.glb (metres)\n"
                    "- plain")


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

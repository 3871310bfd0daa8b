"""The tabs' 3D viewers (Depth & 3D mesh, Pose's 3D skeleton, the Video tab's motion.glb): always shown, always
holding a model, filled after a run in one plain step from the model the run recorded.

Why a viewer is never empty nor hidden: gradio 6.31's Model3D loads its canvas code lazily when a value comes to a
viewer that has none (`create_renderer` in js/model3D/shared/renderer.svelte.ts), and drops the loaded code when
the value is assigned again before that load ends (the effect's clean-up marks the load stale, and the second run
returns early because the file is the one already resolved). The value is assigned twice whenever it comes with
the update that shows the viewer, as a generator's last yield (gradio sends it again on completion), or, on a
loaded machine, when two updates reach the page together. The viewer then stays blank, with only its download link,
until the page is reloaded. A viewer that holds a model from the start has its canvas code loaded at page load,
when nothing else assigns its value, and keeps it for every later model; so each viewer starts with a card that
says what a run will show there (export/viewer_card.py), and a run that makes no model puts the card back.
The fixed height keeps the canvas's size out of Babylon's hands (with an auto height the canvas takes the
proportions of its first drawing buffer).
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

import gradio as gr

from ..export.viewer_card import write_card_glb
from .common import session_of

VIEWER_HEIGHT = 420
CARD_PREFIX = "sapiens2-viewer-card-"  # the page's CSS hides a card's download button by this name
CLEAR_COLOUR = (0.1, 0.1, 0.1, 1.0)


class ShownModels:
    """The 3D model each session's last run of a tab made: the input of that tab's viewer step. Kept here rather
    than in a gr.State output of the endpoint: gradio 6.31's MCP server drops State outputs twice, so every tool
    call of such an endpoint fails (IndexError)."""

    MAX_ENTRIES = 4096  # API clients never close their session: the oldest entries go beyond this

    def __init__(self):
        self._paths: OrderedDict[tuple, str | None] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, session: str | None, tab: str, path: str | None) -> None:
        with self._lock:
            self._paths[(session, tab)] = path
            self._paths.move_to_end((session, tab))
            while len(self._paths) > self.MAX_ENTRIES:
                self._paths.popitem(last=False)

    def get(self, session: str | None, tab: str) -> str | None:
        with self._lock:
            return self._paths.get((session, tab))

    def forget(self, session: str | None) -> None:
        with self._lock:
            for key in [key for key in self._paths if key[0] == session]:
                del self._paths[key]


SHOWN_MODELS = ShownModels()


def model_viewer(tab: str, label: str, title: str, hint: str = "", elem_id: str | None = None) -> gr.Model3D:
    """A tab's 3D viewer, holding the card (`title`, `hint`) until a run makes a model."""
    folder = tempfile.mkdtemp(prefix="sapiens2-viewer-card-")  # one per app build: two processes never share it
    try:
        card = write_card_glb(Path(folder) / f"{CARD_PREFIX}{tab}.glb", title, hint)
        # gradio copies the card into its cache and keeps it there (a default value); that copy is what runs return
        return gr.Model3D(str(card), label=label, height=VIEWER_HEIGHT, clear_color=CLEAR_COLOUR,
                          interactive=False, elem_id=elem_id or f"{tab}-viewer")
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fill_step(tab: str, card: str):
    """The step that gives a tab's viewer the model the session's last run of `tab` recorded, or `card` (the
    viewer's card, as gradio cached it) when it made none."""

    def fill(request: gr.Request):
        return SHOWN_MODELS.get(session_of(request), tab) or card

    return fill


def fill_after(event, tab: str, viewer: gr.Model3D):
    """After a successful run (`event`), one plain step fills `viewer` (fill_step); a failed run leaves it as
    it was."""
    return event.success(fill_step(tab, viewer.value["path"]), None, viewer, api_visibility="private",
                         show_progress="hidden")

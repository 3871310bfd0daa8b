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

Each model comes with its camera (`framing`): gradio's viewer (Babylon's) aims at the centre of the model's bounds
from 1.1 times their diagonal, slightly from above, with a 0.8 rad vertical field of view, which cuts a standing
person's head and feet off (a box 1.8 m tall, 0.5 m wide was cut at both ends in Chromium). An animated model
(motion.glb) is framed on the box its animation covers, which its exporter writes into the file: gradio's viewer
aims at the centre of that box too (Babylon's viewer bounds an animated model over its animation), while the
file's static bounds hold only the first frame, so a person walking across left the view.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import threading
from collections import OrderedDict
from pathlib import Path

import gradio as gr
import numpy as np

from ..export.bounds import recorded as recorded_bounds
from ..export.motion_gltf import read_animated_bounds
from ..export.viewer_card import write_card_glb
from .common import session_of

VIEWER_HEIGHT = 420
FIELD_OF_VIEW = 0.8  # radians, vertical: the viewer's camera (Babylon's ArcRotateCamera default)
NARROWEST = 0.85  # the canvas's width / height at its narrowest (a phone: the tab's columns stacked); ~1.4 on a desktop
MARGIN = 1.15  # room around the model
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


def framing(path) -> tuple[float, float, float] | None:
    """The viewer's camera for the model at `path` as gr.Model3D's camera_position (alpha, beta in degrees, radius):
    in front of it (the photo's own view: the glTF files face +z) and far enough that its bounds fit the canvas,
    whatever its shape; None when the file has no bounds to go by."""
    bounds = recorded_bounds(path)  # our writers' own bounds: the file is not read back (export/bounds.py)
    if bounds is None:
        bounds = read_animated_bounds(path)  # an animation (motion.glb): what it covers while it plays
    if bounds is None:
        import trimesh

        try:
            bounds = trimesh.load(str(path), force="scene").bounds
        except Exception:  # noqa: BLE001 - the viewer's own framing stays
            return None
    if bounds is None or not np.isfinite(bounds).all():
        return None
    width, height, depth = (float(v) for v in bounds[1] - bounds[0])
    half = max(height / 2, width / 2 / NARROWEST)  # what must fit from the centre up and across
    radius = MARGIN * half / math.tan(FIELD_OF_VIEW / 2) + depth / 2  # the near side is depth / 2 closer
    return 90.0, 90.0, max(radius, 1e-3)


def shown(path: str) -> dict:
    """A viewer's update to `path`, framed on it."""
    return gr.update(value=path, camera_position=framing(path) or (None, None, None))


def model_viewer(tab: str, label: str, title: str, hint: str = "", elem_id: str | None = None) -> gr.Model3D:
    """A tab's 3D viewer, holding the card (`title`, `hint`) until a run makes a model."""
    folder = tempfile.mkdtemp(prefix="sapiens2-viewer-card-")  # one per app build: two processes never share it
    try:
        card = write_card_glb(Path(folder) / f"{CARD_PREFIX}{tab}.glb", title, hint)
        # gradio copies the card into its cache and keeps it there (a default value); that copy is what runs return
        return gr.Model3D(str(card), label=label, height=VIEWER_HEIGHT, clear_color=CLEAR_COLOUR,
                          interactive=False, elem_id=elem_id or f"{tab}-viewer",
                          camera_position=framing(card) or (None, None, None))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fill_step(tab: str, card: str):
    """The step that gives a tab's viewer the model the session's last run of `tab` recorded, or `card` (the
    viewer's card, as gradio cached it) when it made none."""

    def fill(request: gr.Request):
        return shown(SHOWN_MODELS.get(session_of(request), tab) or card)

    return fill


def fill_after(event, tab: str, viewer: gr.Model3D):
    """After a successful run (`event`), one plain step fills `viewer` (fill_step); a failed run leaves it as
    it was."""
    return event.success(fill_step(tab, viewer.value["path"]), None, viewer, api_visibility="private",
                         show_progress="hidden")

"""The Video tab's Rerun viewer (gradio_rerun.Rerun: its wheel carries the web viewer, no CDN): the run's
recording.rrd, loaded when the job ends, in one plain step after it (as the 3D viewers, ui/viewers.py). Without
gradio-rerun (a trimmed install) a line says the viewer is off and nothing of rerun is imported."""

from __future__ import annotations

import importlib.util

import gradio as gr

from .common import session_of
from .viewers import SHOWN_MODELS

TAB = "video-rerun"  # SHOWN_MODELS' key: the session's last recording
HEIGHT = 640
OFF = ("<small>The Rerun viewer is off: gradio-rerun and rerun-sdk are not installed "
       "(`pip install gradio-rerun==0.39.0`).</small>")


def available() -> bool:
    return all(importlib.util.find_spec(name) is not None for name in ("gradio_rerun", "rerun"))


def rerun_viewer():
    """The viewer (empty until a run with the recording ends), or None and a line saying it is off."""
    if not available():
        gr.Markdown(OFF, elem_id="video-rerun-off")
        return None
    from gradio_rerun import Rerun

    # the side panels folded: the page is narrow beside the options; the time panel stays (the scrubber)
    return Rerun(label="Rerun viewer (recording.rrd: video, 2D, 3D and joint angles on one timeline)",
                 height=HEIGHT, elem_id="video-rerun",
                 panel_states={"blueprint": "collapsed", "selection": "collapsed", "time": "expanded"})


def remember(request, files) -> None:
    """The run's recording (or none) for the step after it."""
    SHOWN_MODELS.put(session_of(request), TAB, next((str(p) for p in files if p.name == "recording.rrd"), None))


def fill_after(event, viewer) -> None:
    if viewer is None:
        return

    def fill(request: gr.Request):
        return SHOWN_MODELS.get(session_of(request), TAB)

    event.success(fill, None, viewer, api_visibility="private", show_progress="hidden")

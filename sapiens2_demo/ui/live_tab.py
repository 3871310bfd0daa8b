"""The Live tab and the `/live` endpoint: the browser's webcam streamed to the server, each frame run through
a model (pose, body parts, normals or depth) and rendered back, with the measured frames per second.

How frames flow in gradio 6.31 (read from its source, checked in the browser):
- the browser captures a JPEG every `stream_every` seconds and posts it whether or not the previous one has
  come back (the webcam widget is given no "pending" flag, and stream events default to trigger_mode
  "multiple");
- the server keeps one slot per stream (`POST /stream/{event_id}` overwrites `event.data`) and calls the
  handler with whatever is in it as soon as the previous call returns.
So when the model is slower than the camera, the frames that arrive during a call replace each other and only
the newest is processed: frames are dropped, never queued, and the picture stays live. `live_frame` counts
those drops (estimated from the camera's frame rate, since gradio discards them silently; in Chromium, frames
shown + drops counted matched the frames the browser posted within 8 %), and drops a frame itself, with
gr.skip(), when its session is still busy with another call (two streams or API calls at once), so no caller
can build a backlog either. An exception raised by a stream handler ends the stream, so failures come back
as a message in the stats instead, and the stream goes on.
"""

from __future__ import annotations

import os
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

import gradio as gr
import numpy as np

from .. import gpu, tasks
from ..jobs.image import make_job
from ..render.frames import picture
from ..util import as_rgb_uint8, fit_longest_side
from .common import note, user_errors
from .sizes import size_menu

STREAM_EVERY_S = 0.1  # the browser sends a frame this often (10 fps at most)
TIME_LIMIT_S = int(os.environ.get("SAPIENS2_LIVE_TIME_LIMIT_S", "180"))  # a stream then stops; start it again
MAX_STREAMS = int(os.environ.get("SAPIENS2_LIVE_STREAMS", "2"))  # each open stream holds a worker slot
MAX_SIDE = 640  # longest side the model sees: keeps it live (cameras send up to 1920x1440)
# Ask the camera for VGA: less to encode, upload and decode. A hint; bigger frames are downscaled here.
CAMERA = gr.WebcamOptions(mirror=False,  # frames as the camera sees them: the model's left is the person's left
                          constraints={"video": {"width": {"ideal": 640}, "height": {"ideal": 480}}})
LIVE_OPTIONS = dict(flip_test=False, max_people=10)  # live favours speed: no flip test (2x compute)
FPS_WINDOW = 10  # frames per second are measured over this many frames
RESET_AFTER_S = 3.0  # a pause this long starts the counters afresh (a new stream)
MAX_SESSIONS = 64
DEFAULT_TASK = tasks.names(live=True)[0]
SIZES = max((spec.sizes for spec in tasks.specs(live=True)), key=len)
IDLE_TEXT = "Start the camera: frames per second show here."


@dataclass
class LiveSession:
    """One browser session's live state: a renderer (steady depth colours) and the counters."""

    setup: tuple  # (task, size, remove_background, colour_bar): changing it starts afresh
    renderer: object  # the task's annotator (the depth one keeps its colour scale steady)
    busy: threading.Lock = field(default_factory=threading.Lock)
    stream: object = None  # the gr.Request of the stream being served (gradio passes one object per stream)
    stream_start: float = 0.0  # when that stream's first frame arrived
    stream_frames: int = 0  # frames gradio handed us in that stream
    frames: int = 0  # frames rendered
    replaced: int = 0  # frames gradio replaced by a newer one while we were busy (estimated)
    refused: int = 0  # frames refused because this session was busy
    last_seen: float = 0.0  # when the last frame arrived or was finished
    done_at: deque = field(default_factory=lambda: deque(maxlen=FPS_WINDOW))
    model_s: deque = field(default_factory=lambda: deque(maxlen=FPS_WINDOW))
    input_hw: tuple[int, int] = (0, 0)

    @property
    def dropped(self) -> int:
        return self.replaced + self.refused

    def fps(self) -> float:
        if len(self.done_at) < 2 or self.done_at[-1] <= self.done_at[0]:
            return 0.0
        return (len(self.done_at) - 1) / (self.done_at[-1] - self.done_at[0])

    def stats(self) -> str:
        model_ms = 1000 * sum(self.model_s) / len(self.model_s) if self.model_s else 0.0
        h, w = self.input_hw
        return (f"**{self.fps():.1f} fps** · model {model_ms:.0f} ms/frame · {self.frames} shown · "
                f"{self.dropped} dropped · camera {w}×{h} px")

    def count_arrival(self, request, now: float) -> None:
        """Count the frames gradio dropped before this one: the camera sends one every STREAM_EVERY_S, and
        every one not handed to us in this stream was replaced by a newer one while we were busy."""
        if request is None or request is not self.stream:
            self.stream, self.stream_start, self.stream_frames = request, now, 0
        self.stream_frames += 1
        if request is not None:
            sent = int((now - self.stream_start) / STREAM_EVERY_S + 0.5) + 1
            self.replaced = max(self.replaced, sent - self.stream_frames)


_SESSIONS: OrderedDict[tuple, LiveSession] = OrderedDict()
_SESSIONS_LOCK = threading.Lock()


def _session_for(ctx, request, setup: tuple, now: float) -> LiveSession:
    key = (ctx.manager_key, getattr(request, "session_hash", None))
    with _SESSIONS_LOCK:
        session = _SESSIONS.get(key)
        stale = session is not None and not session.busy.locked() and (
            session.setup != setup or now - session.last_seen > RESET_AFTER_S)
        if session is None or stale:
            session = _SESSIONS[key] = LiveSession(setup=setup, renderer=tasks.get(setup[0]).renderer(
                colour_bar=setup[3]))
        _SESSIONS.move_to_end(key)
        while len(_SESSIONS) > MAX_SESSIONS:
            _SESSIONS.popitem(last=False)
        session.last_seen = now
        return session


def forget_sessions(ctx) -> None:
    """Drop every live session of this app (tests; a session's state also goes when it is pushed out)."""
    with _SESSIONS_LOCK:
        for key in [key for key in _SESSIONS if key[0] == ctx.manager_key]:
            del _SESSIONS[key]


def downscale(frame: np.ndarray, max_side: int = MAX_SIDE) -> np.ndarray:
    """RGB uint8, longest side at most `max_side` (aspect kept), writable (gradio's decoded frame is read-only)."""
    return fit_longest_side(as_rgb_uint8(frame), max_side)


def live_frame(ctx, frame, task: str = DEFAULT_TASK, size: str = "0.4b", remove_background: bool = False,
               colour_bar: bool = True, request: gr.Request | None = None):
    """One webcam frame -> (the rendered frame or gr.skip(), the stats Markdown).

    A frame that arrives while this session is still busy with another is dropped (gr.skip(), counted).
    Failures (a missing checkpoint, a bad size) become a plain message in the stats and the stream goes on.
    """
    if frame is None:
        return gr.skip(), gr.skip()
    now = time.perf_counter()
    if task not in tasks.names(live=True):
        return gr.skip(), f"**Cannot run:** unknown task {task!r}; choose one of {', '.join(tasks.names(live=True))}."
    session = _session_for(ctx, request, (task, size, bool(remove_background), bool(colour_bar)), now)
    if not session.busy.acquire(blocking=False):
        session.refused += 1
        return gr.skip(), session.stats()
    try:
        session.count_arrival(request, now)
        try:
            with user_errors("Live"):
                small = downscale(frame)
                session.input_hw = tuple(np.shape(frame)[:2])
                job = make_job(ctx, task, size, {**LIVE_OPTIONS, "remove_background": bool(remove_background)})
                if tasks.get(task).draw is not None:  # only the picture is wanted: drawn on the GPU where there is one
                    job.options["draw"] = {"colour_bar": bool(colour_bar)}  # the live renderer's options
                    job.options["draw_state"] = getattr(session.renderer, "state", None)  # the depth colour scale
                started = time.perf_counter()
                result = gpu.answers(ctx.manager_key, [small], [job])[0][0]
                session.model_s.append(time.perf_counter() - started)
                if getattr(result, "state", None) is not None:
                    session.renderer.state = result.state
                shown = picture(session.renderer, small, result)
        except gr.Error as error:
            return gr.skip(), f"**Cannot run:** {error.message}"
        session.frames += 1
        session.done_at.append(time.perf_counter())
        return shown, session.stats()
    finally:
        session.last_seen = time.perf_counter()  # a pause counts from the end of the last frame
        session.busy.release()


def applies(task: str, control: str) -> bool:
    """Whether the Live tab's `control` does something for `task` (its spec's `controls`)."""
    return task in tasks.names(live=True) and control in tasks.get(task).controls


def build_live_tab(ctx) -> None:
    def live(frame, task: str = DEFAULT_TASK, size: str = "0.4b", remove_background: bool = False,
             colour_bar: bool = True, request: gr.Request = None):
        """One webcam frame through a Sapiens2 model, rendered back (the Live tab streams frames to it).

        Args:
            frame: the picture (a camera frame; downscaled to 640 px on the longest side)
            task: one of 'pose', 'segment', 'normals', 'pointmap'
            size: model size, one of 0.4b, 0.8b, 1b, 5b
            remove_background: normals and depth: only the person, found with the body-part model
            colour_bar: depth: the colour scale in metres beside the picture (true or false)

        Returns:
            the rendered frame; the frames-per-second statistics (Markdown)
        """
        return live_frame(ctx, frame, task, size, remove_background, colour_bar, request=request)

    with gr.Tab("Live", id="live", elem_id="tab-live"):
        gr.Markdown("Your webcam, streamed to the server: every frame goes through the model and comes back "
                    f"rendered, with the frames per second over the last {FPS_WINDOW} frames and the model's time "
                    f"per frame. Frames are downscaled to {MAX_SIDE} px. When the model is slower than the camera, "
                    "frames are dropped rather than queued, so the picture stays live. A stream stops after "
                    f"{TIME_LIMIT_S} s; start it again any time.")
        with gr.Row():
            with gr.Column():
                camera = gr.Image(sources=["webcam"], streaming=True, type="numpy", label="Camera",
                                  webcam_options=CAMERA, elem_id="live-camera")
                task = gr.Radio([(spec.short, spec.name) for spec in tasks.specs(live=True)],
                                value=tasks.names(live=True)[0], label="Task")
                size = size_menu(ctx.manager, [spec.family for spec in tasks.specs(live=True)], SIZES)
                background = gr.Checkbox(False, label="Remove background (normals, depth: runs body parts too)",
                                         visible=applies(DEFAULT_TASK, "remove_background"))
                bar = gr.Checkbox(True, label="Colour bar in metres beside the depth", elem_id="live-colour-bar",
                                  visible=applies(DEFAULT_TASK, "colour_bar"))
            with gr.Column():
                # no buttons on the picture: on a laptop's panel they covered the depth colour bar's top label
                shown = gr.Image(label="Live result", format="jpeg", interactive=False, buttons=[],
                                 elem_id="live-output")
                stats = gr.Markdown(IDLE_TEXT, elem_id="live-stats")
        note()
    task.change(lambda chosen: [gr.update(visible=applies(chosen, "remove_background")),
                                gr.update(visible=applies(chosen, "colour_bar"))], task, [background, bar],
                api_visibility="private", show_progress="hidden", queue=False)  # only what applies to the task
    camera.stream(live, [camera, task, size, background, bar], [shown, stats], api_name="live",
                  stream_every=STREAM_EVERY_S, time_limit=TIME_LIMIT_S, concurrency_limit=MAX_STREAMS,
                  concurrency_id="live", show_progress="hidden")

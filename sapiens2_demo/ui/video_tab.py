"""The Video tab and the `/video` endpoint: every task on a video, rendered back with its audio.

A thin front door onto `jobs.video.VideoJob`: the handler is a generator, so the progress bar counts
frames and the Stop button cancels the run (closing the generator aborts every file being written).
"""

from __future__ import annotations

import logging
from pathlib import Path

import gradio as gr

from .. import tasks
from ..jobs.image import announce_loads, load_notes
from ..jobs.video import ALL as ALL_TASKS
from ..jobs.video import DETECT_EVERY, VideoJob, VideoLimits, default_batch_size
from ..media.image import load_image
from ..media.video import VideoError, probe
from . import mcp, rerun_viewer
from .common import (
    ASSETS,
    ImageUpload,
    answer_markdown,
    check_upload,
    cleared_by,
    needs,
    note,
    notes_output,
    session_of,
    user_errors,
)
from .image_tabs import card_on_new_input
from .sizes import size_menu
from .viewers import SHOWN_MODELS, fill_after, model_viewer

log = logging.getLogger(__name__)

DEFAULT_TASK = tasks.names(video=True)[0]
SIZES = max((spec.sizes for spec in tasks.specs(video=True)), key=len)
VIDEO_EXTENSIONS = [".mp4", ".mov", ".webm", ".mkv", ".avi", ".m4v"]
# (clip, task): a few seconds each, made from the image tabs' public-domain photos by assets/make_example_videos.py
VIDEO_EXAMPLES = [[str(ASSETS / "astronaut_pan.mp4"), tasks.names(video=True)[0]],
                  [str(ASSETS / "grace_hopper_zoom.mp4"), tasks.names(video=True)[1]]]


BROWSER_CODECS = {"h264", "vp8", "vp9", "av1"}  # what the video box can preview (BROWSER.md); the server reads more


def check_video_upload(path, limits: VideoLimits | None = None):
    """A video upload's quick check (the input's upload event): a file we cannot read as a video (its first frame
    must decode), or one over the size limit, is cleared at once with a warning that says why, instead of
    waiting for a run to fail. One we can read but a browser may not preview (HEVC, MPEG-4 Part 2, an AVI) is
    kept, with a note that the run works all the same. The run checks again (API callers skip this step)."""
    if path is None:
        return gr.skip()
    try:
        info = probe(path, max_bytes=(limits or VideoLimits()).max_bytes)
    except VideoError as error:
        log.info("refused a video upload: %s", error)
        gr.Warning(str(error), title="Not a video we can use")  # the reader's words are the visitor's
        return None
    if info.video_codec not in BROWSER_CODECS or Path(path).suffix.lower() == ".avi":
        gr.Info(f"Your browser may not preview this video ({info.video_codec}), but it can be processed: the result "
                "plays here as H.264.", title="Preview may not play")
    return gr.skip()


def run_video(ctx, video, task: str = DEFAULT_TASK, size: str = "0.4b", stride: int = 1, detection_threshold: float = 0.3,
              max_people: int = 20, tracking: bool = True, smoothing: bool = True, min_cutoff: float = 0.2,
              beta: float = 0.05, remove_background: bool = True, raw_normals: bool = False,
              matting_background: str = "colour", colour: str = "#00b140", background_image=None,
              frame_exports: bool = False, batch_size: int = 0, detect_every: int = DETECT_EVERY,
              motion_3d: bool = False, temporal_smoothing: bool = False, motion_people: str = "",
              colour_bar: bool = True, rerun: bool = False,
              request: gr.Request = None, progress=gr.Progress()):
    """Generator: yields nothing visible until the end (progress goes to the bar), then the outputs."""
    with user_errors("Video"):
        if video is None:
            raise VideoError("Please upload a video first.")
        background = load_image(background_image).rgb if background_image is not None else None
        run_dir = ctx.outputs.new_run_dir(getattr(request, "session_hash", None))
        job = VideoJob(video, task, ctx.manager_key, run_dir, size=size, stride=int(stride),
                       batch_size=int(batch_size) or default_batch_size(ctx.manager.device),
                       limits=VideoLimits(), detection_threshold=detection_threshold,
                       max_people=min(int(max_people), ctx.max_people), tracking=tracking, smoothing=smoothing,
                       min_cutoff=min_cutoff, beta=beta, remove_background=remove_background,
                       raw_normals=raw_normals, matting_background=matting_background, colour=colour,
                       background_image=background, frame_exports=bool(frame_exports),
                       detect_every=int(detect_every), motion_3d=bool(motion_3d),
                       temporal_smoothing=bool(temporal_smoothing), motion_people=str(motion_people or ""),
                       colour_bar=bool(colour_bar), rerun=bool(rerun))
        since = ctx.manager.notes_mark()
        steps = job.run()
        progress(0, desc="Reading the video...")
        announce_loads(ctx, job.jobs(), progress)  # models not loaded yet: "Loading ... compiling: N s last time"
        try:
            while True:
                try:
                    update = next(steps)
                except StopIteration as stop:
                    out = stop.value
                    break
                progress((update.done, update.total), desc=update.describe(), unit="frames")
        finally:
            steps.close()  # a cancelled request lands here: the partial files are removed
    motion = next((str(path) for path in out.files if path.name == "motion.glb"), None)
    SHOWN_MODELS.put(session_of(request), "video", motion)
    rerun_viewer.remember(request, out.files)
    notes = out.notes + load_notes(ctx, since, job.jobs())  # "compiled at load in N s": its own loads' notes
    yield str(out.video), [str(path) for path in out.files], answer_markdown(ctx, notes)


# The 3D-motion viewer is hidden with visible="hidden" (on the page, not shown), never False: gradio 6.31 takes a
# component with visible=False off the page, and a Model3D put back later drew nothing (its canvas code is loaded
# once, at page load: ui/viewers.py)
MOTION_VIEWER_HIDDEN = "hidden"
STOPPED = "- Stopped: the run was cancelled and its partial files removed."
DENSE_OPTIONS = "Normals, depth and matting options"


def task_controls(pose_options, dense_options, remove_background, steady, raw_normals, colour_bar, matting_mode,
                  colour, background_image, frame_exports, motion_viewer) -> dict:
    """The Video tab's task-specific controls, each with its rule (chosen task, matting background) -> shown: those
    the chosen task's spec names (`TaskSpec.controls`; the grid of every task: all but the colour bar, which the grid
    has not), a matting background's control only with that background, and the 3D-motion viewer with the pose
    options (it shows what one of them makes). An option that would change nothing is not offered."""
    def names(chosen: str) -> set[str]:
        if chosen == ALL_TASKS:
            return {name for spec in tasks.specs(in_all=True) for name in spec.controls} - {"colour_bar"}
        return set(tasks.get(chosen).controls) if chosen in tasks.names(video=True) else set()

    def needs(*wanted: str):
        return lambda chosen, background: bool(names(chosen) & set(wanted))

    def matting_with(choice: str):
        return lambda chosen, background: "matting" in names(chosen) and background == choice

    return {pose_options: needs("pose_options"),
            dense_options: needs("remove_background", "steady", "raw_normals", "colour_bar", "matting"),
            remove_background: needs("remove_background"), steady: needs("steady"), raw_normals: needs("raw_normals"),
            colour_bar: needs("colour_bar"), matting_mode: needs("matting"), colour: matting_with("colour"),
            background_image: matting_with("image"), frame_exports: needs("frame_exports"),
            motion_viewer: needs("pose_options")}


def build_video_tab(ctx) -> None:
    def video(video, task: str = DEFAULT_TASK, size: str = "0.4b", stride: int = 1,
              detection_threshold: float = 0.3, max_people: int = 20, tracking: bool = True,
                      smoothing: bool = True, min_cutoff: float = 0.2, beta: float = 0.05,
                      remove_background: bool = True, raw_normals: bool = False,
                      matting_background: str = "colour", colour: str = "#00b140", background_image=None,
                      frame_exports: bool = False, batch_size: int = 0, detect_every: int = DETECT_EVERY,
                      motion_3d: bool = False, temporal_smoothing: bool = False, motion_people: str = "",
                      colour_bar: bool = True, rerun: bool = False,
                      request: gr.Request = None, progress=gr.Progress()):
        """Runs one Sapiens2 task (or all of them, as a grid) on every frame of a video and renders it back with
        the input's audio; pose follows people across frames (track ids, smoothing).

        Args:
            video: the input video (mp4, mov, webm, mkv, avi; the first 60 s are processed)
            task: one of 'pose', 'segment', 'normals', 'pointmap', 'matting', or 'all' (a grid of every task)
            size: model size, one of 0.4b, 0.8b, 1b, 5b (a task with one size always uses it)
            stride: process every Nth frame (1 = every frame)
            detection_threshold: pose: the person detector's score threshold (0.05 to 0.95)
            max_people: pose: the most people per frame
            tracking: pose: keep each person's id across frames (true or false)
            smoothing: pose: smooth keypoints over time with a One Euro filter (true or false)
            min_cutoff: pose smoothing: minimum cutoff in Hz (lower = smoother)
            beta: pose smoothing: speed coefficient (higher = less lag on fast moves)
            remove_background: normals and depth: only the person, found with the body-part model
            raw_normals: normals: also export the raw normal maps (float16 .npy per frame)
            matting_background: matting: one of 'colour', 'transparent', 'image'
            colour: matting: the background colour, like '#00b140'
            background_image: matting: the background picture when matting_background is 'image'
            frame_exports: also export per-frame data (label and depth PNG zips, normals .npy, alpha videos)
            batch_size: frames per model call (0 = the server's default)
            detect_every: pose: run the person detector every Nth frame (boxes follow the keypoints between)
            motion_3d: pose: lift every frame to 3D with the depth and body-part models; writes pose_3d.jsonl, a
                BVH per person and an animated motion.glb (true or false)
            temporal_smoothing: normals and depth: steady over time, no flicker where the scene is still
            motion_people: pose with motion_3d: the track ids to write motion files for, like '1, 3' (the ids
                drawn on the video; empty = everyone)
            colour_bar: depth: the colour scale in metres beside the picture (true or false; not in the grid)
            rerun: also a Rerun recording, recording.rrd: the video, keypoints and boxes per track id, the 3D
                motion, joint angles (also joint_angles_<id>.csv / .png) and the dense maps on one timeline

        Returns:
            the rendered video; the downloads (a list of files); notes (Markdown)
        """
        yield from run_video(ctx, video, task, size, stride, detection_threshold, max_people, tracking, smoothing,
                             min_cutoff, beta, remove_background, raw_normals, matting_background, colour,
                             background_image, frame_exports, batch_size, detect_every, motion_3d,
                             temporal_smoothing, motion_people, colour_bar, rerun, request=request,
                             progress=progress)

    limits = VideoLimits()
    with gr.Tab("Video", id="video", elem_id="tab-video"):
        with gr.Row():
            with gr.Column():
                clip = gr.Video(label="Video (mp4, mov, webm, mkv, avi)", sources=["upload"], include_audio=True,
                                 elem_id="video-input")
                clip.upload(check_video_upload, clip, clip, api_visibility="private", show_progress="hidden")
                choices = [(spec.short, spec.name) for spec in tasks.specs(video=True)] + [("All tasks (grid)", ALL_TASKS)]
                task = gr.Radio(choices, value=choices[0][1], label="Task")
                gr.Examples(VIDEO_EXAMPLES, [clip, task], label="Example clips", elem_id="video-examples",
                            example_labels=["Astronaut, slow pan (pose)", "Grace Hopper, slow zoom (body parts)"])
                gr.Markdown("<small>The example clips are made from the public-domain photos of the image tabs "
                            "(NASA, US Navy): a camera panning and zooming over a still photo, so the person moves "
                            "in the frame (no real motion).</small>")
                size = size_menu(ctx.manager, [spec.family for spec in tasks.specs(video=True)], SIZES,
                                 label="Model size (a task with one size always uses it)")
                stride = gr.Slider(1, 10, 1, step=1, label="Process every Nth frame")
                with gr.Accordion("Pose options", open=False) as pose_options:
                    det_thr = gr.Slider(0.05, 0.95, 0.3, step=0.05, label="Detection threshold")
                    max_people = gr.Slider(1, ctx.max_people, min(20, ctx.max_people), step=1, label="Max people")
                    every = gr.Slider(1, 10, DETECT_EVERY, step=1, label="Run the person detector every Nth frame "
                                      "(between, boxes follow the keypoints; 1 = every frame, slower)")
                    tracking = gr.Checkbox(True, label="Track people across frames (stable ids)")
                    smoothing = gr.Checkbox(True, label="Smooth keypoints over time (One Euro filter)")
                    min_cutoff = gr.Slider(0.01, 5.0, 0.2, step=0.01, label="Smoothing: min cutoff (Hz; lower = smoother)")
                    beta = gr.Slider(0.0, 1.0, 0.05, step=0.005, label="Smoothing: beta (higher = less lag on fast moves)")
                    motion = gr.Checkbox(False, label="3D motion: lift each frame to 3D with the depth and body-part "
                                         "models; a BVH per person and an animated motion.glb", elem_id="video-motion-3d")
                    people = gr.Textbox("", label="3D motion: people to export (the ids drawn on the video, e.g. "
                                        "1, 3; empty = everyone)", elem_id="video-motion-people")
                with gr.Accordion(DENSE_OPTIONS, open=False) as dense_options:
                    fg = gr.Checkbox(True, label="Remove background (normals, depth)")
                    steady = gr.Checkbox(False, label="Steady over time (normals, depth): no flicker where the scene "
                                         "is still", elem_id="video-steady")
                    raw = gr.Checkbox(False, label="Also export the raw normal maps (float16 .npy per frame)")
                    bar = gr.Checkbox(True, label="Colour bar in metres beside the depth", elem_id="video-colour-bar")
                    mode = gr.Radio(["colour", "transparent", "image"], value="colour", label="Matting background")
                    colour = gr.ColorPicker("#00b140", label="Matting background colour")
                    bg_img = ImageUpload(type="filepath", label="Matting background image", sources=["upload"])
                    bg_img.upload(check_upload, bg_img, bg_img, api_visibility="private", show_progress="hidden")
                exports = gr.Checkbox(False, label="Also export per-frame data: body-part label and depth PNG zips, "
                                      "normals .npy, matting alpha and transparent videos (slower: a file per frame "
                                      "or two more videos to encode)")
                record = gr.Checkbox(False, label="Rerun recording (recording.rrd): the video, 2D and 3D pose, joint "
                                     "angles and the maps on one timeline, opened in the viewer below",
                                     elem_id="video-rerun-on", visible=rerun_viewer.available())
                with gr.Row():
                    btn = gr.Button("Process video", variant="primary")
                    stop = gr.Button("Stop", variant="secondary", interactive=False)  # only while a video runs
                # the run's progress beside the button that started it: with the options open, the result's panel
                # (which shows it too) is off the screen
                progress_box = gr.Markdown(elem_id="video-progress", elem_classes=["progress-box"])
                gr.Markdown(f"<small>Limits: the first {limits.max_seconds:g} s are processed, frames are downscaled "
                            f"to {limits.max_side} px on the longest side, uploads up to "
                            f"{limits.max_bytes // 2**20} MB.</small>")
            with gr.Column():
                # no buttons on the frame: the player's download button covered the depth colour bar's top label
                # on a laptop's panel (the video is under Downloads too)
                rendered = gr.Video(label="Result (with the input's audio)", interactive=False, buttons=[],
                                    elem_id="video-output")
                files = gr.File(label="Downloads", file_count="multiple", interactive=False, elem_id="video-files")
                viewer = model_viewer("video", "3D motion (motion.glb: the first person's animation plays)",
                                      "The 3D motion appears here", 'tick "3D motion" under Pose options and '
                                      "run pose", elem_id="video-motion")
                info = notes_output("video-notes")
        recording_viewer = rerun_viewer.rerun_viewer()
        note()
        inputs = [clip, task, size, stride, det_thr, max_people, tracking, smoothing, min_cutoff, beta, fg, raw,
                  mode, colour, bg_img, exports, gr.Number(0, visible=False), every, motion, steady,
                  people, bar, record]  # the hidden number is batch_size: API only
        shown = task_controls(pose_options, dense_options, fg, steady, raw, bar, mode, colour, bg_img, exports, viewer)
        for control, rule in shown.items():  # as the page opens
            control.visible = rule(task.value, mode.value) or (MOTION_VIEWER_HIDDEN if control is viewer else False)
        def show(chosen: str, background: str):
            updates = [gr.update(visible=rule(chosen, background)) for rule in shown.values()]
            motion = updates[list(shown).index(viewer)]
            motion["visible"] = motion["visible"] or MOTION_VIEWER_HIDDEN
            updates[list(shown).index(dense_options)]["label"] = (  # one task's box is named for it
                f"{tasks.get(chosen).short} options" if chosen != ALL_TASKS else DENSE_OPTIONS)
            return updates

        for trigger in (task.change, mode.change):
            trigger(show, [task, mode], list(shown), api_visibility="private", show_progress="hidden", queue=False)
        # Stop is on only while a run is under way: the empty-input check stops a run before it starts (the video
        # box says what to do), and gradio 6.31's page runs no .then step after a failed one, so .failure too
        start = btn.click(lambda _clip: gr.update(interactive=True), clip, stop, validator=needs("a video", "pick an example clip under Task"),
                          api_visibility="private", show_progress="hidden")
        event = start.success(video, inputs, [rendered, files, info], api_name="video", concurrency_id="video",
                              show_progress_on=[progress_box, rendered])
        mcp.add_video_tool(ctx, inputs, video.__doc__, run_video)  # the MCP tool, on these inputs
        for finished in (event.then, event.failure):
            finished(lambda: gr.update(interactive=False), None, stop, api_visibility="private",
                     show_progress="hidden", queue=False)
        fill_after(event, "video", viewer)  # the motion the run recorded, in a step of its own (see viewers.py)
        rerun_viewer.fill_after(event, recording_viewer)
        cleared_by(clip, [rendered, files, info])
        card_on_new_input(clip, viewer)
        stop.click(lambda: (gr.update(interactive=False), STOPPED), None, [stop, info], cancels=[event],
                   api_visibility="private", queue=False)

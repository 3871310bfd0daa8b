"""The Video tab and the `/video` endpoint: every task on a video, rendered back with its audio.

A thin front door onto `jobs.video.VideoJob`: the handler is a generator, so the progress bar counts
frames and the Stop button cancels the run (closing the generator aborts every file being written).
"""

from __future__ import annotations

import logging

import gradio as gr

from .. import tasks
from ..jobs.video import DETECT_EVERY, VideoJob, VideoLimits, default_batch_size
from ..media.image import load_image
from ..media.video import VideoError
from ..util import notes_markdown
from .common import ASSETS, note, user_errors

log = logging.getLogger(__name__)

DEFAULT_TASK = tasks.names(video=True)[0]
SIZES = max((spec.sizes for spec in tasks.specs(video=True)), key=len)
VIDEO_EXTENSIONS = [".mp4", ".mov", ".webm", ".mkv", ".avi", ".m4v"]
# (clip, task): a few seconds each, made from the image tabs' public-domain photos by assets/make_example_videos.py
VIDEO_EXAMPLES = [[str(ASSETS / "astronaut_pan.mp4"), tasks.names(video=True)[0]],
                  [str(ASSETS / "grace_hopper_zoom.mp4"), tasks.names(video=True)[1]]]


def run_video(ctx, video, task: str = DEFAULT_TASK, size: str = "0.4b", stride: int = 1, detection_threshold: float = 0.3,
              max_people: int = 20, tracking: bool = True, smoothing: bool = True, min_cutoff: float = 0.2,
              beta: float = 0.05, remove_background: bool = True, raw_normals: bool = False,
              matting_background: str = "colour", colour: str = "#00b140", background_image=None,
              frame_exports: bool = False, batch_size: int = 0, detect_every: int = DETECT_EVERY,
              motion_3d: bool = False, temporal_smoothing: bool = False,
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
                       temporal_smoothing=bool(temporal_smoothing))
        steps = job.run()
        progress(0, desc="Reading the video...")
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
    yield str(out.video), [str(path) for path in out.files], notes_markdown(out.notes)


def motion_viewer(files):
    """The 3D viewer after a run: motion.glb when the run wrote one, shown; else hidden."""
    paths = [getattr(f, "path", None) or getattr(f, "name", None) or f for f in files or []]
    found = next((str(p) for p in paths if str(p).endswith("motion.glb")), None)
    return gr.Model3D(value=found, visible=found is not None)


def build_video_tab(ctx) -> None:
    def video_handler(video, task: str = DEFAULT_TASK, size: str = "0.4b", stride: int = 1,
                      detection_threshold: float = 0.3, max_people: int = 20, tracking: bool = True,
                      smoothing: bool = True, min_cutoff: float = 0.2, beta: float = 0.05,
                      remove_background: bool = True, raw_normals: bool = False,
                      matting_background: str = "colour", colour: str = "#00b140", background_image=None,
                      frame_exports: bool = False, batch_size: int = 0, detect_every: int = DETECT_EVERY,
                      motion_3d: bool = False, temporal_smoothing: bool = False,
                      request: gr.Request = None, progress=gr.Progress()):
        yield from run_video(ctx, video, task, size, stride, detection_threshold, max_people, tracking, smoothing,
                             min_cutoff, beta, remove_background, raw_normals, matting_background, colour,
                             background_image, frame_exports, batch_size, detect_every, motion_3d,
                             temporal_smoothing, request=request, progress=progress)

    limits = VideoLimits()
    with gr.Tab("Video", id="video", elem_id="tab-video"):
        with gr.Row():
            with gr.Column():
                video = gr.Video(label="Video (mp4, mov, webm, mkv, avi)", sources=["upload"], include_audio=True,
                                 elem_id="video-input")
                choices = [(spec.short, spec.name) for spec in tasks.specs(video=True)] + [("All tasks (grid)", "all")]
                task = gr.Radio(choices, value=choices[0][1], label="Task")
                gr.Examples(VIDEO_EXAMPLES, [video, task], label="Example clips", elem_id="video-examples",
                            example_labels=["Astronaut, slow pan (pose)", "Grace Hopper, slow zoom (body parts)"])
                gr.Markdown("<small>The example clips are made from the public-domain photos of the image tabs "
                            "(NASA, US Navy) by `assets/make_example_videos.py`: a camera panning and zooming over "
                            "a still photo, so the person moves in the frame (no real motion).</small>")
                size = gr.Dropdown(list(SIZES), value=SIZES[0],
                                   label="Model size (a task with one size always uses it)")
                stride = gr.Slider(1, 10, 1, step=1, label="Process every Nth frame")
                with gr.Accordion("Pose options", open=False):
                    det_thr = gr.Slider(0.05, 0.95, 0.3, step=0.05, label="Detection threshold")
                    max_people = gr.Slider(1, ctx.max_people, min(20, ctx.max_people), step=1, label="Max people")
                    every = gr.Slider(1, 10, DETECT_EVERY, step=1, label="Run the person detector every Nth frame "
                                      "(between, boxes follow the keypoints; 1 = every frame, slower)")
                    tracking = gr.Checkbox(True, label="Track people across frames (stable ids)")
                    smoothing = gr.Checkbox(True, label="Smooth keypoints over time (One Euro filter)")
                    min_cutoff = gr.Slider(0.01, 5.0, 0.2, step=0.01, label="Smoothing: min cutoff (Hz; lower = smoother)")
                    beta = gr.Slider(0.0, 1.0, 0.05, step=0.005, label="Smoothing: beta (higher = less lag on fast moves)")
                    motion = gr.Checkbox(False, label="3D motion: lift each frame to 3D with the depth model; a BVH "
                                         "per person and an animated motion.glb", elem_id="video-motion-3d")
                with gr.Accordion("Normals, depth and matting options", open=False):
                    fg = gr.Checkbox(True, label="Remove background (normals, depth)")
                    steady = gr.Checkbox(False, label="Steady over time (normals, depth): no flicker where the scene "
                                         "is still", elem_id="video-steady")
                    raw = gr.Checkbox(False, label="Also export the raw normal maps (float16 .npy per frame)")
                    mode = gr.Radio(["colour", "transparent", "image"], value="colour", label="Matting background")
                    colour = gr.ColorPicker("#00b140", label="Matting background colour")
                    bg_img = gr.Image(type="filepath", label="Matting background image (for 'image')",
                                      sources=["upload"])
                exports = gr.Checkbox(False, label="Also export per-frame data: body-part label and depth PNG zips, "
                                      "normals .npy, matting alpha and transparent videos (slower: a file per frame "
                                      "or two more videos to encode)")
                with gr.Row():
                    btn = gr.Button("Process video", variant="primary")
                    stop = gr.Button("Stop", variant="stop")
                gr.Markdown(f"<small>Limits: the first {limits.max_seconds:g} s are processed, frames are downscaled "
                            f"to {limits.max_side} px on the longest side, uploads up to "
                            f"{limits.max_bytes // 2**20} MB.</small>")
            with gr.Column():
                rendered = gr.Video(label="Result (with the input's audio)", interactive=False, elem_id="video-output")
                files = gr.File(label="Downloads", file_count="multiple", elem_id="video-files")
                viewer = gr.Model3D(label="3D motion (motion.glb: the first person's animation plays)",
                                    clear_color=(0.1, 0.1, 0.1, 1.0), visible=False, elem_id="video-motion")
                info = gr.Markdown(elem_classes=["notes"])
        note()
        inputs = [video, task, size, stride, det_thr, max_people, tracking, smoothing, min_cutoff, beta, fg, raw,
                  mode, colour, bg_img, exports, gr.Number(0, visible=False), every, motion, steady]  # batch_size: API only
        event = btn.click(video_handler, inputs, [rendered, files, info], api_name="video", concurrency_id="video")
        # the 3D viewer is filled from the returned files: the endpoint's return values stay as they are
        event.then(motion_viewer, files, viewer, api_visibility="private", show_progress="hidden")
        stop.click(None, None, None, cancels=[event])

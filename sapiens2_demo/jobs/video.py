"""The video path: decode (a thread, ahead) -> batches of frames -> GPU call -> tracking / smoothing (pose)
-> render + export (a thread, behind) -> the output video and the downloads.

`VideoJob.run()` is a generator that yields `VideoProgress` after every batch and returns a `VideoOutput`;
closing it early (the user pressed Stop) or an error aborts every file being written, so nothing half-written
is ever served. `process_video` drains it for the batch CLI and the tests.

Limits (each with an environment variable; the Video tab and the CLI pass their own when asked):
- longest duration processed, SAPIENS2_VIDEO_MAX_SECONDS (60 s): longer input is CUT at the limit, with a note;
- longest side processed, SAPIENS2_VIDEO_MAX_SIDE (1280 px): bigger frames are downscaled, with a note;
- upload size, SAPIENS2_MAX_VIDEO_MB (200 MB): bigger files are refused;
- every Nth frame: `stride` (the output keeps the source's timing, at fps / N).
"""

from __future__ import annotations

import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import gpu, tasks
from ..export import rerun_recording
from ..results import PoseResult
from .video_threads import Decoder, Writer

log = logging.getLogger(__name__)

ALL = "all"  # every task of "all", rendered as a grid
RENDERER_ONLY = ("opaque", "colour_bar")  # what a video's renderers read besides their task's options


def _env(name: str, default: float) -> float:
    try:
        return float(os.environ.get(name, default))
    except ValueError:
        return default


@dataclass
class VideoLimits:
    max_seconds: float = field(default_factory=lambda: _env("SAPIENS2_VIDEO_MAX_SECONDS", 60))
    max_side: int = field(default_factory=lambda: int(_env("SAPIENS2_VIDEO_MAX_SIDE", 1280)))
    max_bytes: int = field(default_factory=lambda: int(_env("SAPIENS2_MAX_VIDEO_MB", 200) * 2**20))


@dataclass
class VideoProgress:
    done: int  # frames processed
    total: int  # frames to process (estimated from the container)
    fps: float  # frames per second so far
    eta_s: float  # seconds left at that rate

    def describe(self) -> str:
        return f"{self.done}/{self.total} frames, {self.fps:.1f} frames/s, {self.eta_s:.0f} s left"


@dataclass
class VideoOutput:
    video: Path  # the rendered H.264 mp4 (with the input's audio)
    files: list[Path]  # downloads (the rendered video first)
    notes: list[str]
    frames: int
    seconds: float


CHUNK_FRAMES = 16  # frames per GPU call: at least 12, so a minute of video is a few dozen calls, not hundreds
DETECT_EVERY = 4  # pose: the person detector on every 4th frame; boxes follow the keypoints between (a new
# person waits at most 3 frames to be found; a lost one is looked for again on the next frame)


def default_batch_size(device: str) -> int:
    return 8 if str(device).startswith("cuda") else 2


@dataclass
class VideoJob:
    path: Path
    task: str  # a task's name or alias (one that runs on video), or "all"
    manager_key: str  # gpu.register(manager)
    out_dir: Path
    size: str = "0.4b"
    batch_size: int = 2  # frames per forward
    chunk_size: int = CHUNK_FRAMES  # frames per GPU call (ZeroGPU: each call is a trip through its queue)
    stride: int = 1
    limits: VideoLimits = field(default_factory=VideoLimits)
    # pose
    detection_threshold: float = 0.3
    nms_iou: float = 0.3
    max_people: int = 20
    flip_test: bool | None = None  # None: the option's default where the job runs (off on a CPU: 2x the pose work)
    detect_every: int = DETECT_EVERY
    tracking: bool = True
    smoothing: bool = True
    min_cutoff: float | None = None  # One Euro filter; None = the module defaults (pose/smoothing.py)
    beta: float | None = None
    keypoint_threshold: float = 0.3
    motion_3d: bool = False  # each frame's pose lifted to 3D, per track: pose_3d.jsonl, motion_<id>.bvh, motion.glb
    motion_people: str = ""  # the track ids to write motion files for ("1, 3"); empty: everyone
    rerun: bool = False  # recording.rrd: every task's results on one timeline (export/rerun_recording.py)
    # dense
    remove_background: bool = True
    normals_background: str = "black"
    raw_normals: bool = False
    temporal_smoothing: bool = False  # normals, depth: steady over time (pipelines/steady.py)
    colour_bar: bool = False  # depth: its colour scale in metres beside the picture (not in the grid: no room)
    frame_exports: bool = False  # the heavy per-frame downloads (label / depth PNG zips, normals, alpha videos)
    # matting
    matting_background: str = "colour"
    colour: str = "#00b140"
    background_image: np.ndarray | None = None

    def __post_init__(self):
        video_tasks = tasks.names(video=True)
        if self.task != ALL and (self.task not in video_tasks and not _alias_of(self.task, video_tasks)):
            raise ValueError(f"Unknown task {self.task!r}; choose one of {', '.join(video_tasks)} or all.")
        self.path, self.out_dir = Path(self.path), Path(self.out_dir)
        self.stride = max(int(self.stride), 1)
        self.detect_every = max(int(self.detect_every), 1)
        self.batch_size = max(int(self.batch_size), 1)
        self.chunk_size = max(int(self.chunk_size), self.batch_size)
        from ..export.mocap_video import chosen_people

        chosen_people(self.motion_people)  # a bad list is refused before any work, in a sentence
        for spec in self.specs:
            spec.check(self.options_for(spec))

    @property
    def specs(self) -> list:
        return tasks.specs(in_all=True) if self.task == ALL else [tasks.get(self.task)]

    @property
    def tasks(self) -> tuple[str, ...]:
        return tuple(spec.name for spec in self.specs)

    def options_for(self, spec) -> dict:
        """This job's options as `spec` names them: `<task>_<option>` first (matting_background), then
        `<option>`; a video has no alpha channel, so renderers draw opaque pictures."""
        mine = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        chosen = {o.name: mine.get(f"{spec.name}_{o.name}", mine.get(o.name)) for o in spec.options}
        device = gpu.device_of(self.manager_key)
        chosen = {o.name: o.default_on(device) if chosen[o.name] is None else chosen[o.name] for o in spec.options}
        return {**mine, **chosen, "opaque": True, "colour_bar": self.colour_bar and self.task != ALL}

    def jobs(self):
        """Each task's GPU job; video-only pipeline options ride along (a runner takes or ignores them)."""
        jobs = [spec.job(self.size, self.options_for(spec)) for spec in self.specs]
        for spec, job in zip(self.specs, jobs):
            job.options["detect_every"] = self.detect_every
            if self.motion_3d and "lift_3d" in job.options:
                job.options["lift_3d"] = True  # each frame's pointmap, inside the same GPU call
            if self.temporal_smoothing and spec.steady:
                job.options["temporal_smoothing"] = True
        return jobs

    # -- the run ---------------------------------------------------------------------------------------
    def run(self):
        from ..media.video import VideoSink, probe

        started = time.perf_counter()
        info = probe(self.path, max_bytes=self.limits.max_bytes)
        notes = []
        duration = info.duration
        cut = duration > self.limits.max_seconds + 1e-6
        if cut:
            notes.append(f"The video is {duration:.1f} s long; processed the first {self.limits.max_seconds:g} s "
                         "(limit: SAPIENS2_VIDEO_MAX_SECONDS).")
            duration = self.limits.max_seconds
        if max(info.width, info.height) > self.limits.max_side:
            notes.append(f"Frames downscaled from {info.width}x{info.height} to at most {self.limits.max_side} px "
                         "on the longest side (limit: SAPIENS2_VIDEO_MAX_SIDE).")
        if self.stride > 1:
            notes.append(f"Every {self.stride}th frame processed ({info.fps / self.stride:.2f} frames/s output).")
        if not info.has_audio:
            notes.append("The video has no audio track.")
        total = max(1, math.ceil(min(info.frame_count, duration * info.fps + 0.5) / self.stride))
        fps = self._fps = info.fps / self.stride
        self.out_dir.mkdir(parents=True, exist_ok=True)
        # named as the tab names the task ("_depth", "_body_parts"), not by its API name ("_pointmap")
        shown_as = ALL if self.task == ALL else self.specs[0].short.lower().replace(" ", "_")
        rendered = self.out_dir / f"{self.path.stem[:60] or 'video'}_{shown_as}.mp4"
        sink = VideoSink(rendered, fps=fps, audio_from=self.path, audio_until=duration if cut else None)
        exports = self._exports(fps)
        decoder = Decoder(self.path, self.stride, duration if cut else None, self.limits.max_side,
                           self.chunk_size)
        titles = {spec.name: spec.short for spec in self.specs}
        self._done, self._last = 0, {}  # frames through the model so far; each task's last result
        recording = self._recording(info, fps, notes)
        recorded = {spec.name for spec in self.specs if spec.recording} if recording is not None else set()
        # tasks with no per-frame data to write want only the picture: drawn on the device where it can be
        self._pictures_only = {spec.name for spec in self.specs if spec.name not in exports and spec.name not in recorded}
        writer = Writer(self._renderers(), titles, sink, exports, recording)
        done, finished = 0, False
        try:
            expected = total if info.frame_count > 0 else 0  # what the container says it holds, when it says
            for frames, results in self._answered(decoder, expected):
                writer.put(frames, results)
                done += len(frames)
                rate = done / max(time.perf_counter() - started, 1e-6)
                total = max(total, done)
                yield VideoProgress(done, total, rate, max(total - done, 0) / rate)
            writer.finish()
            sink.close()
            files = [rendered] + [path for e in exports.values() for path in e.close()]
            notes += [note for e in exports.values() for note in getattr(e, "notes", [])]
            if recording is not None:  # after the exports: it reads the motion the pose export fitted
                motion = next((e.motion for e in exports.values() if getattr(e, "motion", None) is not None), None)
                files += recording.close(motion)
                notes += recording.notes
            finished = True
        finally:
            decoder.stop()
            if not finished:
                writer.stop()
                sink.abort()
                for e in [*exports.values(), *([recording] if recording is not None else [])]:
                    e.abort()
        seconds = time.perf_counter() - started
        notes.append(f"{done} frames in {seconds:.1f} s ({done / max(seconds, 1e-6):.2f} frames/s).")
        return VideoOutput(video=rendered, files=files, notes=notes, frames=done, seconds=seconds)

    def _exports(self, fps: float) -> dict:
        """Each task's per-frame downloads (a folder per task when there are several); tasks without any skip."""
        multi = len(self.specs) > 1
        exports = {}
        for spec in self.specs:
            if spec.video_export is not None:
                folder = self.out_dir / spec.out_folder if multi else self.out_dir
                folder.mkdir(parents=True, exist_ok=True)
                export = spec.video_export(folder, **{**self.options_for(spec), "fps": fps})
                if export is not None:
                    exports[spec.name] = export
        return exports

    def _recording(self, info, fps: float, notes: list[str]):
        """The Rerun recording when asked for and rerun-sdk is installed (else a note says it is off)."""
        if not self.rerun:
            return None
        if not rerun_recording.available():
            notes.append(rerun_recording.OFF_NOTE)
            return None
        dense = any(spec.recording == "map" for spec in self.specs)
        return rerun_recording.VideoRecording(self.out_dir, video_info=info, fps=fps, dense=dense,
                                              keypoint_threshold=self.keypoint_threshold)

    def _renderers(self) -> dict:
        return {spec.name: spec.renderer(**self.options_for(spec)) for spec in self.specs}

    def _answered(self, decoder, expected: int = 0):
        """(frames, results per task) per chunk: in this process the chunks as one pipeline (gpu.stream: the next
        chunk's first forward queued before the last batch of the chunk before is copied back) where every task
        can; on ZeroGPU (each call a worker process of its own), or for a task that goes on from the frame before
        it, one GPU call per chunk, what goes on from chunk to chunk sent back in with the next call. Either way the
        model takes a chunk batch_size frames at a time, and on a CPU in this process the first chunks grow from one
        forward's frames and the last ones taper towards the `expected` end (`Decoder.batches`)."""
        from ..pipelines.device_post import use_device_post

        # on the host road in this process (a CPU) the chunks grow and taper; the device road's copies back stay one
        # wait a chunk, and on ZeroGPU each chunk is a call
        on_host = not use_device_post(gpu.device_of(self.manager_key)) and not gpu.CROSSES_PROCESSES
        chunks = decoder.batches(expected, self.batch_size) if on_host else decoder.batches()
        jobs = self._jobs_now()
        if not gpu.streams(self.manager_key, jobs):
            for frames in chunks:
                yield frames, self._infer(frames)
            return
        sent = []  # the chunks handed to the stream, whose answers come back in order

        def pixels():
            for frames in chunks:
                sent.append(frames)
                yield [f.rgb for f in frames]

        for _, answers in gpu.stream(self.manager_key, pixels(), jobs, self.batch_size):
            frames = sent.pop(0)
            yield frames, self._received(frames, answers)

    def _jobs_now(self) -> list:
        """The GPU jobs for the next chunk: a task with nothing to export per frame gets its pictures drawn where
        the model runs, when it can; a task that follows frames goes on from the last chunk's last result."""
        jobs = self.jobs()
        for spec, job in zip(self.specs, jobs):
            if spec.follows_frames:  # this chunk goes on from the last one (pose: the people it followed)
                previous = self._last.get(spec.name)
                previous = spec.carry(previous) if spec.carry is not None and previous is not None else previous
                job.options.update(frame_index=self._done, previous=previous)
            if spec.draw is not None and spec.name in self._pictures_only:
                job.options["draw"] = {k: v for k, v in self.options_for(spec).items()  # what its renderer reads
                                       if k in spec.defaults() or k in RENDERER_ONLY}
                if job.options.get("temporal_smoothing"):  # the renderer carries the filter (tasks/drawn.py)
                    job.options["draw"]["steady"] = True
                job.options["draw_state"] = getattr(self._last.get(spec.name), "state", None)
        return jobs

    def _infer(self, frames) -> dict[str, list]:
        # one GPU call: on ZeroGPU float maps cross back as float16, unless the per-frame data exports are asked
        # for (those keep full precision: depth in mm)
        answers = gpu.answers(self.manager_key, [f.rgb for f in frames], self._jobs_now(), self.batch_size,
                              compact=not self.frame_exports)
        return self._received(frames, answers)

    def _received(self, frames, answers) -> dict[str, list]:
        """A chunk's answers per task, after tracking and smoothing pose; what the next chunk goes on from kept."""
        results = dict(zip(self.tasks, answers))
        self._done += len(frames)
        self._last.update({name: per_frame[-1] for name, per_frame in results.items()
                           if isinstance(per_frame, list) and per_frame})
        for per_frame in results.values():
            if per_frame and isinstance(per_frame[0], PoseResult):
                self._track(frames, per_frame)
        return results

    def _track(self, frames, poses) -> None:
        """Stable ids across frames (ultralytics' tracker) and One Euro smoothing of keypoints per track."""
        if not self.tracking:
            return
        if not hasattr(self, "_tracker"):
            from ..pose.smoothing import KeypointSmoother
            from ..pose.tracking import KeypointTracker

            self._tracker = KeypointTracker(frame_rate=self._fps)  # ids kept through absences up to 2 s
            options = {k: v for k, v in (("min_cutoff", self.min_cutoff), ("beta", self.beta)) if v is not None}
            self._smoother = KeypointSmoother(**options) if self.smoothing else None
            self._previous_ids = None  # the last frame's track ids
        for frame, result in zip(frames, poses):
            previous = self._previous_ids
            if result.followed and previous is not None and len(previous) == result.num_people:
                result.track_ids = previous.copy()  # the same people, followed in order: no matching needed
            else:
                result.track_ids = self._tracker.update(result.boxes, result.box_scores, frame.rgb.shape[:2],
                                                        lifted=result.lifted, time=frame.time)
            self._previous_ids = result.track_ids
            if result.lifted is not None:
                result.lifted.track_ids = result.track_ids
            if self._smoother is not None and result.num_people:
                result.keypoints = self._smoother.smooth(result.track_ids, result.keypoints, frame.time,
                                                         result.keypoint_scores)


def process_video(path, task: str, manager_key: str, out_dir, *, on_progress=None, **options) -> VideoOutput:
    """Run a VideoJob to the end; `on_progress(VideoProgress)` after each batch."""
    run = VideoJob(Path(path), task, manager_key, Path(out_dir), **options).run()
    while True:
        try:
            progress = next(run)
        except StopIteration as stop:
            return stop.value
        if on_progress is not None:
            on_progress(progress)


def _alias_of(name: str, video_tasks: list[str]) -> bool:
    try:
        return tasks.get(name).name in video_tasks
    except tasks.UnknownTask:
        return False

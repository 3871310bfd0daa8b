"""What a task is, written once: `TaskSpec` and the registry every front door reads.

A front door (an image tab, `/video`, Live, the CLI, the Ray engine) never switches on a task's name: it asks
the registry for the spec and calls what the spec holds (the pipeline, the renderer, the exporters). Adding a
task is one `register(TaskSpec(...))` (see `catalog.py` for the built-in six).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..results import Job


@dataclass(frozen=True)
class Option:
    """One user option: its API parameter name and default, how a tab shows it, and the pipeline option it
    feeds (`model`; None when it only changes the rendering or the files)."""

    name: str
    default: Any
    label: str
    kind: str = "checkbox"  # checkbox | slider | radio | dropdown | text | colour | image
    choices: tuple = ()  # radio / dropdown: values or (label, value) pairs
    low: float = 0.0
    high: float = 1.0
    step: float = 0.05
    advanced: bool = False  # inside the tab's "Options" accordion
    model: str | None = None
    shown_when: tuple[str, Any] | None = None  # (option, value): a tab shows this control only then
    info: str = ""  # help under the control (and in the API docs): what the option costs and gives
    cpu_default: Any = None  # the default on a CPU where it differs (None: `default` everywhere)

    def default_on(self, device: str | None = None) -> Any:
        return self.cpu_default if device == "cpu" and self.cpu_default is not None else self.default


@dataclass(frozen=True)
class TaskSpec:
    """Everything the app knows about one task.

    run(frames, manager, size, *, seg_cache, **model_options) -> one result per frame (pipelines layer)
    renderer(**options) -> an annotator with `annotate(frame, result) -> RGB uint8` (video, live, the grid)
    present(image, result, **options) -> TaskOutput: an image request's renders and notes, shown first
    export(rgb, result, folder, notes=..., **options) -> the image downloads written (the CLI; an image request
        after its display, see `finish`); a writer with nothing to write adds a note instead
    video_export(folder, fps=..., **options) -> per-frame downloads of a video (add / close / abort), or None
    all_options: the options the All-tasks tab runs the task with (over its defaults), e.g. pose lifts to 3D there
    model3d_files: the downloads the "model3d" output may show, the first one written wins
    viewer_file: a download an image tab also shows in a 3D viewer of its own, filled after the run from the
        returned files (so the endpoint's return values do not change), or None for no such viewer
    """

    name: str  # the public name: API, CLI, UI values
    title: str  # tab title
    short: str  # grid tile and All-tasks zip folder
    family: str  # checkpoint family: facebook/sapiens2-{family}-{size}
    sizes: tuple[str, ...]
    run: Callable
    aliases: tuple[str, ...] = ()  # older spellings still accepted
    folder: str = ""  # output folder of the CLI and multi-task videos (defaults to the name)
    options: tuple[Option, ...] = ()
    detector: bool = False  # needs the person detector (preloaded with the checkpoint)
    uses_mask: bool = False  # masks with the body-part segmentation when `remove_background` is on
    # run also takes frame_index (of frames[0] in the video) and previous (the result of the frame before), so a
    # video's frames carry work over across batches and GPU calls (pose follows people between detections)
    follows_frames: bool = False
    # (the last result of a video chunk) -> what the next chunk's run gets as `previous` (default: the result
    # itself), so a task sends back into the next GPU call only what it goes on from
    carry: Callable | None = None
    steady: bool = False  # its maps can be filtered over time on video (`temporal_smoothing`, pipelines/steady.py)
    renderer: Callable | None = None
    # draw(frames, manager, size, annotator, **options) -> pictures drawn on the model's device (tasks/drawn.py):
    # a CUDA video whose task writes no per-frame data gets these instead of results drawn on the host
    draw: Callable | None = None
    # the same two in two stages, for a GPU call of several batches (a video chunk): start(frames, ...) runs the
    # forwards and returns finish(), the post-processing (drawing) and copy back, which gpu.infer runs beside the
    # next batch's forwards; a task without them runs its batches one after the other
    start: Callable | None = None
    draw_start: Callable | None = None
    # prepare(frames, manager, size, **options) -> per frame what `start` needs of the whole call first (pose on
    # the device road: every frame's people, in one detector call), given to start as `prepared` (its batch's
    # share), or None: then a task that follows frames runs its batches one after the other. In a local video
    # (gpu.stream) the next chunk's runs in the pipeline's worker thread, beside this chunk's batches
    prepare: Callable | None = None
    draw_on_cpu: bool = False  # use `draw` on a CPU too: it measured faster there (docs/decisions.md)
    # an image request without raw data runs it with coded_maps=True: its maps cross from the device at their
    # files' bits (results.CodedMap), not as float32
    coded_maps: bool = False
    present: Callable | None = None  # None: the task has no generic image tab (e.g. features)
    export: Callable | None = None
    files: tuple[str, ...] = ()  # what a complete image export holds (the CLI's resume check)
    optional_files: tuple[str, ...] = ()  # written only when there is something to write
    option_files: dict = field(default_factory=dict, hash=False)  # option -> files always written when it is on
    video_option_files: dict = field(default_factory=dict, hash=False)  # the same for a video's downloads
    video_export: Callable | None = None
    video: bool = True  # runs on videos
    recording: str = ""  # what a video's Rerun recording reads of its results: "people" or "map" ("": the picture)
    live: bool = False  # offered in the Live tab
    # the Video and Live tabs' controls that apply to it, shown only when it is chosen: "pose_options",
    # "remove_background", "steady", "raw_normals", "colour_bar", "matting" (the matting background), "frame_exports"
    # (its video_export writes per-frame downloads on request)
    controls: tuple[str, ...] = ()
    in_all: bool = False  # part of "all" (the All-tasks tab, `--tasks all`, the video grid)
    button: str = "Run"
    outputs: tuple[str, ...] = ("image",)  # an image tab's result widgets: image | slider | legend | model3d
    result_label: str = "Result"
    model3d_label: str = "3D view"  # the "model3d" output's label
    model3d_files: tuple[str, ...] = ()
    viewer_file: str | None = None  # e.g. "pose_3d.glb": shown in an extra 3D viewer when a run writes it
    viewer_label: str = "3D view"
    viewer_card: tuple[str, str] = ("The 3D view appears here", "after a run")  # what an empty viewer says
    all_options: dict = field(default_factory=dict, hash=False)  # the All-tasks tab's options, e.g. {"lift_3d": True}
    files_label: str = "Downloads"
    items: Callable | None = None  # (job, n_frames) -> model items, for the GPU-time estimate
    validate: Callable | None = None  # (options) -> None or ValueError: checked before any model work
    description: str = ""  # what the endpoint gives, for API docs and MCP tool descriptions

    @property
    def out_folder(self) -> str:
        return self.folder or self.name

    @property
    def zip_folder(self) -> str:
        return self.short.lower().replace(" ", "_")

    def default_size(self) -> str:
        return self.sizes[0]

    def size_or_default(self, size: str | None) -> str:
        """`size` when this task has it, else its default (matting exists only as 1b)."""
        return size if size in self.sizes else self.default_size()

    def defaults(self, device: str | None = None) -> dict:
        """Each option's default (on `device`, where an option's CPU default differs)."""
        return {option.name: option.default_on(device) for option in self.options}

    def check(self, options: dict) -> None:
        if self.validate is not None:
            self.validate({**self.defaults(), **options})

    def job(self, size: str | None = None, options: dict | None = None, *, tolerate_errors: bool = False,
            device: str | None = None) -> Job:
        """The GPU job for these user options: each option that feeds the pipeline, under the pipeline's name."""
        chosen = {**self.defaults(device), **(options or {})}
        model_options = {o.model: chosen[o.name] for o in self.options if o.model and o.name in chosen}
        return Job(self.name, self.size_or_default(size), model_options, tolerate_errors)

    def model_items(self, job: Job, n_frames: int) -> float:
        if self.items is not None:
            return self.items(job, n_frames)
        masked = self.uses_mask and job.options.get("remove_background")
        return n_frames * (2 if masked else 1)

    def write_files(self, rgb, result, folder: str | Path, **options) -> list[Path]:
        if self.export is None:
            raise ValueError(f"The {self.name} task has no downloads.")
        return list(self.export(rgb, result, Path(folder), **options))

    def finish(self, out, rgb, result, folder: str | Path, **options):
        """Complete a shown TaskOutput: write its downloads (their notes join `out.notes`) and pick its 3D view."""
        out.files = self.write_files(rgb, result, folder, notes=out.notes, **options)
        written = {path.name: path for path in out.files}
        out.model3d = next((written[name] for name in self.model3d_files if name in written), None)
        return out


_REGISTRY: dict[str, TaskSpec] = {}


class UnknownTask(ValueError):
    pass


def register(spec: TaskSpec) -> TaskSpec:
    """Add (or replace) a task; every front door offers it from then on."""
    _REGISTRY[spec.name] = spec
    return spec


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def all_specs() -> list[TaskSpec]:
    return list(_REGISTRY.values())


def get(name: str) -> TaskSpec:
    """The spec for a public name or an alias (`seg`, `normal`, `pretrain` ...); UnknownTask otherwise."""
    key = str(name).strip().lower()
    for spec in _REGISTRY.values():
        if key == spec.name or key in spec.aliases:
            return spec
    raise UnknownTask(f"Unknown task {name!r}; choose one of {', '.join(_REGISTRY)}.")


def names(**where) -> list[str]:
    """Public names of the tasks whose flags match, e.g. names(video=True), names(in_all=True)."""
    return [s.name for s in _REGISTRY.values() if all(getattr(s, k) == v for k, v in where.items())]


def specs(**where) -> list[TaskSpec]:
    return [get(name) for name in names(**where)]


def choices(**where) -> list[tuple[str, str]]:
    """(title, name) pairs for a radio or dropdown."""
    return [(s.title, s.name) for s in specs(**where)]

"""What every tab shares: the upload component, the error wording, the acceptable-use note, the tab scaffold,
and the display copies handed to gradio. Every failure a user can cause becomes a gr.Error with a plain
message (no traceback)."""

from __future__ import annotations

import contextlib
import logging
import re
import traceback
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from ..media.image import ImageError, load_image
from ..models.loading import ModelBroken
from ..models.manager import CheckpointUnavailable
from ..models.registry import ACCEPTABLE_USE, LICENSE_URL, TASKS, UnknownCheckpoint
from ..pose.detector import NO_PERSON_NOTE
from ..results import TaskOutput
from ..util import notes_markdown

log = logging.getLogger(__name__)
ASSETS = Path(__file__).resolve().parents[2] / "assets"
EXAMPLES = [[str(ASSETS / name)] for name in ("astronaut.jpg", "grace_hopper.jpg", "camera.jpg")]
BROWSER_IMAGES = (".jpg", ".jpeg", ".png", ".webp")
DISPLAY_JPEG_QUALITY = 90  # display copies only: the downloads keep exact PNG / npy data


class ImageUpload(gr.Image):
    """gr.Image that hands over the uploaded file untouched, so our loader decides what is readable
    and words the message (gradio's own preprocessing would fail first, with its own error)."""

    is_template = True  # render with gr.Image's own frontend

    def preprocess(self, payload):
        if payload is None or (payload.url and payload.url.startswith("data:")):
            return super().preprocess(payload)
        return payload.path


CHECKPOINT_NAME = re.compile(r"facebook/sapiens2-([a-z]+)-([0-9.]+b)")


def visitor_message(error: CheckpointUnavailable) -> str:
    """What a visitor can do about a model the server cannot load (the operator's detail goes to the log)."""
    found = CHECKPOINT_NAME.search(str(error))
    if found is None:  # the person detector
        return ("The person detector is not available on this server. Enter person boxes under Options to "
                "skip it; the other tabs keep working.")
    family, size = found.groups()
    task = TASKS.get(family)
    title = task.title if task else family
    if task is not None and len(task.sizes) > 1:
        return f"This server does not have the {size} {title} model ({found.group(0)}); choose another size."
    return f"This server does not have the {title} model ({found.group(0)}); the other tabs keep working."


@contextlib.contextmanager
def user_errors(task_title: str):
    """Turn expected failures into a gr.Error a visitor can act on, its message led by the task's name (gradio
    6.31's toast shows only "Error" as its title); the operator's detail (paths, flags, the exception) goes to
    the server log."""
    def refuse(message: str, title: str):
        return gr.Error(f"{task_title}: {message}", title=f"{task_title}: {title}", print_exception=False)

    try:
        yield
    except gr.Error:
        raise
    except CheckpointUnavailable as error:
        log.warning("%s: a model could not be loaded: %s", task_title, error)
        raise refuse(visitor_message(error), "model not available") from None
    except ModelBroken as error:  # dropped by the manager: the next request loads it again
        log.error("%s: %s", task_title, error, exc_info=error.__cause__)
        raise refuse(str(error), "model reloaded") from None
    except ImageError as error:
        log.info("%s: refused the input: %s", task_title, error)
        raise refuse(str(error), "cannot use this file") from None
    except (UnknownCheckpoint, ValueError) as error:
        if not isinstance(error, UnknownCheckpoint) and not worded_here(error):  # a library's: a defect of ours
            log.error("%s failed", task_title, exc_info=error)
            raise refuse(FAILED, "failed") from None
        log.info("%s: refused the request: %s", task_title, error)
        raise refuse(str(error), "cannot run") from None
    except MemoryError:
        log.exception("%s ran out of memory", task_title)
        raise refuse("Ran out of memory. Try a smaller model size or a smaller image.", "out of memory") from None
    except Exception as error:  # noqa: BLE001 - the app must keep serving
        if type(error).__name__ == "OutOfMemoryError":  # torch.cuda.OutOfMemoryError
            log.warning("%s: %s", task_title, error)
            raise refuse("The GPU ran out of memory. Try a smaller model size or a smaller image.",
                         "out of memory") from None
        log.exception("%s failed", task_title)
        raise refuse(FAILED, "failed") from None


FAILED = ("Something went wrong on the server; it has been logged. Try again, or another image; the other tabs keep "
          "working.")
PACKAGE = Path(__file__).resolve().parents[1]


def worded_here(error: BaseException) -> bool:
    """Whether `error` comes from a raise statement of this package, a refusal worded for the visitor ("Box 1 is
    inverted"), and not from inside a library (numpy's "Number of samples, -60, must be non-negative."): that one
    is a defect of ours, logged with its traceback at ERROR, and the visitor told it is not their doing."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return True
    where = frames[-1]
    return PACKAGE in Path(where.filename).resolve().parents and (where.line or "").lstrip().startswith("raise")


# The stand-in builder (sapiens2_demo/standins) marks the checkpoint folder it writes with this file: their outputs
# have the shapes of the real ones and nothing more, and a visitor must not take them for Sapiens2's estimates
STANDIN_MARKER = "STANDINS.txt"
STANDIN_NOTE = "Stand-in checkpoints: shapes, not estimates"


def runs_stand_ins(manager) -> bool:
    """Whether the manager's checkpoint folder is the stand-ins' (it holds their marker)."""
    folder = getattr(manager, "checkpoint_dir", None)
    return folder is not None and (Path(folder) / STANDIN_MARKER).is_file()


def runs_random_detector(manager) -> bool:
    """Whether the person detector is the stand-ins' (the random-weight YOLO the builder writes into their folder):
    it finds no one, so every photo is posed as one whole-image box."""
    detector = getattr(manager, "detector_name", None)
    return runs_stand_ins(manager) and detector is not None and (
        Path(detector).absolute().parent == Path(manager.checkpoint_dir).absolute())


# on the stand-ins' detector, the note pose gives every photo says why (it read as a fault of the photo)
RANDOM_DETECTOR_NO_PERSON = ("No person detected: the stand-ins' person detector has random weights and finds no one, "
                             "so the whole image was used as one box (give boxes under Options to choose).")


def answer_notes(ctx, notes: list[str]) -> list[str]:
    """An answer's notes, led by the stand-in note on stand-ins (every answer: the page, the API, MCP)."""
    if not runs_stand_ins(ctx.manager):
        return list(notes)
    if runs_random_detector(ctx.manager):
        notes = [note.replace(NO_PERSON_NOTE, RANDOM_DETECTOR_NO_PERSON) for note in notes]
    return [f"{STANDIN_NOTE} (this server runs the stand-ins of sapiens2_demo/standins, not Sapiens2's weights).",
            *notes]


def answer_markdown(ctx, notes: list[str]) -> str:
    """answer_notes as the bullet list every tab answers with (util.notes_markdown)."""
    return notes_markdown(answer_notes(ctx, notes))


def check_upload(path):
    """An upload's quick check (the image input's upload event): a file we cannot read is cleared at once,
    with a warning that says why, instead of showing a broken picture until a run fails."""
    if path is None:
        return gr.skip()
    try:
        load_image(path)
    except ImageError as error:
        log.info("refused an upload: %s", error)
        gr.Warning(str(error), title="Not an image we can read")  # the loader's words are the visitor's
        return None
    return gr.skip()


EXAMPLES_AT = "pick an example at the bottom of this tab"  # an image tab's examples: under both columns


def needs(what: str, examples: str = EXAMPLES_AT):
    """A Run button's validator: without its first input (`what`: "an image", "a video") the run does not start,
    and that input's box says what to do (`examples`: where this tab's examples are: on a laptop an image tab's
    are below the first screen, so "below" was not enough), in place of a red "Error" toast. gradio runs it as the
    event is queued (API callers get the message as a ValidationError); one gr.validate per input of the event."""
    message = f"Upload {what} first: drop a file here, or {examples}."

    def validate(first, *others):
        checks = [gr.validate(first is not None, message)] + [gr.validate(True, "")] * len(others)
        return checks[0] if not others else tuple(checks)  # one input: gradio takes the value itself

    return validate


def cleared_by(source, outputs: list) -> None:
    """A new input (an upload, an example, the input cleared) empties `outputs`: the results of the previous input
    never stand beside it, as they did when its run failed."""
    count = len(outputs)
    source.change(lambda: [None] * count if count > 1 else None, None, outputs, api_visibility="private",
                  show_progress="hidden", queue=False)


def note() -> None:
    """The acceptable-use note every tab ends with."""
    gr.Markdown(f"<small>{ACCEPTABLE_USE} [License]({LICENSE_URL}).</small>")


def session_of(request: gr.Request | None) -> str | None:
    return getattr(request, "session_hash", None)


def image_in():
    return ImageUpload(type="filepath", label="Image", sources=["upload", "clipboard", "webcam"])


# The page's copy of the notes: every "&", "<" and ">" as an entity, so Markdown shows "motion_<id>.bvh" (and any
# angle brackets from a file name or an error) as text, never as a tag the page would drop or run
ESCAPE_NOTES_JS = "(text) => (text || '').replaceAll('&', '&amp;').replaceAll('<', '&lt;').replaceAll('>', '&gt;')"


def notes_output(elem_id: str | None = None) -> gr.Textbox:
    """The notes: a hidden plain-text box that the handlers answer into (what API and MCP callers get) and the
    Markdown the page shows, filled from the box in the browser with its text escaped (ESCAPE_NOTES_JS)."""
    text = gr.Textbox(visible="hidden", label="Notes", elem_id=f"{elem_id}-text" if elem_id else None)
    shown = gr.Markdown(elem_classes=["notes"], elem_id=elem_id)
    text.change(None, text, shown, js=ESCAPE_NOTES_JS, api_visibility="private", queue=False)
    return text


@contextlib.contextmanager
def task_tab(title: str, tab_id: str, scales=(1, 1)):
    """A tab's scaffold: an inputs column that starts with the image, a results column that ends with
    the notes, then examples and the acceptable-use note. The body fills `inputs` and `results`."""
    with gr.Tab(title, id=tab_id, elem_id=f"tab-{tab_id}"):
        with gr.Row():
            with gr.Column(scale=scales[0]) as inputs:
                img = image_in()
                img.upload(check_upload, img, img, api_visibility="private", show_progress="hidden")
            with gr.Column(scale=scales[1]):
                results = gr.Column()
                info = notes_output(f"{tab_id}-notes")
        yield SimpleNamespace(img=img, inputs=inputs, results=results, info=info)
        gr.Examples(EXAMPLES, [img])
        note()


def as_display_files(out: TaskOutput, run_dir: Path, loaded, upload: str | None,
                     saved: dict[int, str] | None = None) -> TaskOutput:
    """A copy of `out` with image files for gradio rather than arrays, written fast: JPEG for what is only looked
    at (PNG when there is transparency), and the upload itself where the input is shown unchanged. `saved`
    (array id -> file) carries the files over the steps of one request, so a step re-shows them unwritten.

    Files, not arrays: gradio 6.31 caches an array under a hash of its pixels and rewrites that file in place,
    so two requests rendering the same picture could serve each other a truncated image."""
    import dataclasses
    import functools

    from ..util import in_parallel, write_jpeg, write_png

    shown = run_dir / "shown"
    shown.mkdir(exist_ok=True)
    saved = {} if saved is None else saved  # the main render is usually also the slider's "after": write it once
    if upload and not loaded.notes and Path(upload).suffix.lower() in BROWSER_IMAGES:
        saved.setdefault(id(loaded.rgb), upload)  # untouched input (no rotation, conversion or downscale)

    arrays = [out.main, *(out.before_after or ()), *(a for a, _ in out.gallery or ())]
    new = {id(a): a for a in arrays if a is not None and id(a) not in saved}
    paths = {key: shown / f"{len(saved) + i}.{'png' if a.ndim == 3 and a.shape[2] == 4 else 'jpg'}"
             for i, (key, a) in enumerate(new.items())}

    def write(key):
        array, path = new[key], paths[key]
        if path.suffix == ".png":
            write_png(path, array)
        else:
            write_jpeg(path, array, DISPLAY_JPEG_QUALITY)

    in_parallel(*[functools.partial(write, key) for key in new])  # JPEG encoding releases the GIL
    saved.update({key: str(path) for key, path in paths.items()})

    def save(array):
        return saved[id(array)]

    return dataclasses.replace(
        out, main=None if out.main is None else save(out.main),
        before_after=None if out.before_after is None else tuple(save(a) for a in out.before_after),
        gallery=None if out.gallery is None else [(save(a), caption) for a, caption in out.gallery])

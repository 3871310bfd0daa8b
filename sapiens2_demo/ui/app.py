"""The Gradio interface: one tab per task, each a thin call into `tasks`.

No model logic lives here: a handler loads the upload, asks `tasks` for a TaskOutput and lays it out.
Every failure a user can cause becomes a gr.Error with a plain message (no traceback).
"""

from __future__ import annotations

import contextlib
import logging
from pathlib import Path
from types import SimpleNamespace

import gradio as gr

from .. import tasks
from ..media.image import ImageError, load_image
from ..models.manager import CheckpointUnavailable
from ..models.registry import ACCEPTABLE_USE, LICENSE_URL, TASKS, UnknownCheckpoint, default_size

log = logging.getLogger(__name__)
ASSETS = Path(__file__).resolve().parents[2] / "assets"
EXAMPLES = [[str(ASSETS / name)] for name in ("astronaut.jpg", "grace_hopper.jpg", "camera.jpg")]

class ImageUpload(gr.Image):
    """gr.Image that hands over the uploaded file untouched, so our loader decides what is readable
    and words the message (gradio's own preprocessing would fail first, with its own error)."""

    is_template = True  # render with gr.Image's own frontend

    def preprocess(self, payload):
        if payload is None or (payload.url and payload.url.startswith("data:")):
            return super().preprocess(payload)
        return payload.path


@contextlib.contextmanager
def user_errors(task_title: str):
    """Turn expected failures into a clear gr.Error; log unexpected ones and say so plainly."""
    try:
        yield
    except gr.Error:
        raise
    except (ImageError, UnknownCheckpoint, CheckpointUnavailable, ValueError) as error:
        raise gr.Error(str(error), title=f"{task_title}: cannot run", print_exception=False) from None
    except MemoryError:
        raise gr.Error("Ran out of memory. Try a smaller model size or a smaller image.",
                       title=f"{task_title}: out of memory") from None
    except Exception as error:  # noqa: BLE001 - the app must keep serving
        if type(error).__name__ == "OutOfMemoryError":  # torch.cuda.OutOfMemoryError
            raise gr.Error("The GPU ran out of memory. Try a smaller model size or a smaller image.",
                           title=f"{task_title}: out of memory") from None
        log.exception("%s failed", task_title)
        raise gr.Error(f"Something went wrong ({type(error).__name__}); the server log has details. "
                       "Other tabs keep working.", title=f"{task_title}: failed") from None


def note() -> None:
    """The acceptable-use note every tab ends with."""
    gr.Markdown(f"<small>{ACCEPTABLE_USE} [License]({LICENSE_URL}).</small>")


def _session(request: gr.Request | None) -> str | None:
    return getattr(request, "session_hash", None)


def _notes(out: tasks.TaskOutput) -> str:
    return "\n".join(f"- {note}" for note in out.notes)


BROWSER_IMAGES = (".jpg", ".jpeg", ".png", ".webp")
DISPLAY_JPEG_QUALITY = 90  # display copies only: the downloads keep exact PNG / npy data


def _as_display_files(out: tasks.TaskOutput, run_dir: Path, loaded, upload: str | None) -> tasks.TaskOutput:
    """Hand gradio image files rather than arrays, written fast: JPEG for what is only looked at (PNG when
    there is transparency), and the upload itself where the input is shown unchanged.

    Files, not arrays: gradio 6.31 caches an array under a hash of its pixels and rewrites that file in place,
    so two requests rendering the same picture could serve each other a truncated image."""
    from PIL import Image

    shown = run_dir / "shown"
    shown.mkdir(exist_ok=True)
    saved: dict[int, str] = {}  # the main render is usually also the slider's "after": write it once
    if upload and not loaded.notes and Path(upload).suffix.lower() in BROWSER_IMAGES:
        saved[id(loaded.rgb)] = upload  # untouched input (no rotation, conversion or downscale): no re-encode

    def save(array):
        if id(array) not in saved:
            rgba = array.ndim == 3 and array.shape[2] == 4
            path = shown / f"{len(saved)}.{'png' if rgba else 'jpg'}"
            if rgba:
                Image.fromarray(array).save(path, compress_level=1)
            else:
                Image.fromarray(array).save(path, quality=DISPLAY_JPEG_QUALITY)
            saved[id(array)] = str(path)
        return saved[id(array)]

    if out.main is not None:
        out.main = save(out.main)
    if out.before_after is not None:
        out.before_after = tuple(save(a) for a in out.before_after)
    if out.gallery is not None:
        out.gallery = [(save(a), caption) for a, caption in out.gallery]
    return out


def build_app(ctx: tasks.AppContext) -> gr.Blocks:
    def run(task_title, fn, image, request, progress, **kwargs) -> tasks.TaskOutput:
        with user_errors(task_title):
            if image is None:
                raise ImageError("Please upload an image first.")
            loaded = load_image(image)
            run_dir = ctx.outputs.new_run_dir(_session(request))
            out = fn(ctx, loaded, run_dir=run_dir, progress=progress, **kwargs)
            return _as_display_files(out, run_dir, loaded, image if isinstance(image, str) else None)

    # --- handlers: the first parameter of each is `image`, every other has a default -----------------
    def pose(image, size: str = "0.4b", boxes: str = "", flip_test: bool = True,
             detection_threshold: float = 0.3, nms_iou: float = 0.3, max_people: int = 20,
             keypoint_threshold: float = 0.3, show_face: bool = True, show_boxes: bool = True,
             request: gr.Request = None, progress=gr.Progress()):
        out = run("Pose", tasks.pose, image, request, progress, size=size, boxes=boxes,
                  flip_test=flip_test, detection_threshold=detection_threshold, nms_iou=nms_iou,
                  max_people=int(max_people), keypoint_threshold=keypoint_threshold,
                  show_face=show_face, show_boxes=show_boxes)
        return out.main, [str(p) for p in out.files], _notes(out)

    def segment(image, size: str = "0.4b", opacity: float = 0.5, show_names: bool = False,
                request: gr.Request = None, progress=gr.Progress()):
        out = run("Body parts", tasks.segment, image, request, progress, size=size, opacity=opacity,
                  show_names=show_names)
        return out.before_after, out.legend, [str(p) for p in out.files], _notes(out)

    def normals(image, size: str = "0.4b", remove_background: bool = True, background: str = "black",
                png_bits: int = 16, request: gr.Request = None, progress=gr.Progress()):
        out = run("Normals", tasks.normals, image, request, progress, size=size,
                  remove_background=remove_background, background=background, png_bits=int(png_bits))
        return out.before_after, [str(p) for p in out.files], _notes(out)

    def pointmap(image, size: str = "0.4b", remove_background: bool = True, max_points: int = 200_000,
                 request: gr.Request = None, progress=gr.Progress()):
        out = run("Depth & 3D", tasks.pointmap, image, request, progress, size=size,
                  remove_background=remove_background, max_points=int(max_points))
        return (out.before_after, str(out.model3d) if out.model3d else None,
                [str(p) for p in out.files], _notes(out))

    def matting(image, background: str = "colour", colour: str = "#00b140", background_image=None,
                request: gr.Request = None, progress=gr.Progress()):
        with user_errors("Matting"):
            bg = load_image(background_image).rgb if background_image is not None else None
        out = run("Matting", tasks.matting, image, request, progress, background=background,
                  colour=colour, background_image=bg)
        return out.before_after, [str(p) for p in out.files], _notes(out)

    def all_tasks(image, size: str = "0.4b", request: gr.Request = None, progress=gr.Progress()):
        out = run("All tasks", tasks.all_tasks, image, request, progress, size=size)
        return out.gallery, str(out.files[0]), _notes(out)

    # --- layout ----------------------------------------------------------------------------------
    def size_choice(task: str):
        sizes = list(TASKS[task].sizes)
        return gr.Dropdown(sizes, value=default_size(task), label="Model size",
                           interactive=len(sizes) > 1)

    def image_in():
        return ImageUpload(type="filepath", label="Image", sources=["upload", "clipboard", "webcam"])

    def notes_box():
        return gr.Markdown(elem_classes=["notes"])

    @contextlib.contextmanager
    def task_tab(title: str, tab_id: str, scales=(1, 1)):
        """A tab's scaffold: an inputs column that starts with the image, a results column that ends with
        the notes, then examples and the acceptable-use note. The body fills `inputs` and `results`."""
        with gr.Tab(title, id=tab_id, elem_id=f"tab-{tab_id}"):
            with gr.Row():
                with gr.Column(scale=scales[0]) as inputs:
                    img = image_in()
                with gr.Column(scale=scales[1]):
                    results = gr.Column()
                    info = notes_box()
            yield SimpleNamespace(img=img, inputs=inputs, results=results, info=info)
            gr.Examples(EXAMPLES, [img])
            note()

    with gr.Blocks(title="Sapiens2 demo", delete_cache=(1800, 3600)) as demo:
        gr.Markdown("# Sapiens2: human-centric vision\nPose (308 keypoints), body-part segmentation, "
                    "surface normals, depth & 3D, and matting with Meta's Sapiens2 models. Models load on "
                    "first use; the first run of each model takes longer.")
        with task_tab("Pose", "pose") as tab:
            with tab.inputs:
                size = size_choice("pose")
                with gr.Accordion("Options", open=False):
                    boxes = gr.Textbox("", label="Person boxes (optional JSON [[x1,y1,x2,y2], ...]; skips "
                                             "the detector)", placeholder="[[10, 20, 200, 400]]")
                    flip = gr.Checkbox(True, label="Flip test (more accurate, 2x compute)")
                    det_thr = gr.Slider(0.05, 0.95, 0.3, step=0.05, label="Detection threshold")
                    nms = gr.Slider(0.1, 0.9, 0.3, step=0.05, label="NMS IoU")
                    max_people = gr.Slider(1, ctx.max_people, min(20, ctx.max_people), step=1, label="Max people")
                    kpt_thr = gr.Slider(0.0, 1.0, 0.3, step=0.05, label="Keypoint threshold (drawing)")
                    face = gr.Checkbox(True, label="Draw face keypoints")
                    show_boxes = gr.Checkbox(True, label="Draw boxes")
                btn = gr.Button("Estimate pose", variant="primary")
            with tab.results:
                out_img = gr.Image(label="Keypoints", format="jpeg", interactive=False, elem_id="pose-output")
                files = gr.File(label="Downloads (official JSON, COCO-17, OpenPose)", file_count="multiple",
                                elem_id="pose-files")
            inputs = [tab.img, size, boxes, flip, det_thr, nms, max_people, kpt_thr, face, show_boxes]
            btn.click(pose, inputs, [out_img, files, tab.info], api_name="pose", concurrency_id="pose")

        with task_tab("Body parts", "segment") as tab:
            with tab.inputs:
                size = size_choice("seg")
                opacity = gr.Slider(0.0, 1.0, 0.5, step=0.05, label="Overlay opacity")
                names = gr.Checkbox(False, label="Write class names on the parts")
                btn = gr.Button("Segment body parts", variant="primary")
            with tab.results:
                slider = gr.ImageSlider(label="Image / body parts", format="jpeg", interactive=False,
                                        elem_id="segment-output")
                legend = gr.Dataframe(headers=["class", "colour", "share %"], label="Classes present",
                                      interactive=False, datatype=["str", "html", "number"])
                files = gr.File(label="Downloads (class-id PNG, colour PNG)", file_count="multiple",
                                elem_id="segment-files")
            btn.click(segment, [tab.img, size, opacity, names], [slider, legend, files, tab.info],
                      api_name="segment", concurrency_id="seg")

        with task_tab("Normals", "normals") as tab:
            with tab.inputs:
                size = size_choice("normal")
                fg = gr.Checkbox(True, label="Remove background (body-part segmentation)")
                bg = gr.Radio([("black", "black"), ("original image", "image")], value="black", label="Background")
                bits = gr.Radio([8, 16], value=16, label="PNG bit depth")
                btn = gr.Button("Estimate normals", variant="primary")
            with tab.results:
                slider = gr.ImageSlider(label="Image / normals", format="jpeg", interactive=False,
                                        elem_id="normals-output")
                files = gr.File(label="Downloads (.npy, PNG)", file_count="multiple", elem_id="normals-files")
            btn.click(normals, [tab.img, size, fg, bg, bits], [slider, files, tab.info], api_name="normals",
                      concurrency_id="normal")

        with task_tab("Depth & 3D", "pointmap") as tab:
            with tab.inputs:
                size = size_choice("pointmap")
                fg = gr.Checkbox(True, label="Remove background (body-part segmentation)")
                cap = gr.Slider(10_000, 500_000, 200_000, step=10_000, label="Max points in the cloud")
                btn = gr.Button("Estimate depth & 3D", variant="primary")
            with tab.results:
                depth = gr.ImageSlider(label="Image / depth (turbo inverse depth, colour bar in metres)",
                                       format="jpeg", interactive=False, elem_id="pointmap-output")
                cloud = gr.Model3D(label="Point cloud", clear_color=(0.1, 0.1, 0.1, 1.0))
                files = gr.File(label="Downloads (depth PNG mm, .npy m, .ply, .glb)", file_count="multiple",
                                elem_id="pointmap-files")
            btn.click(pointmap, [tab.img, size, fg, cap], [depth, cloud, files, tab.info], api_name="pointmap",
                      concurrency_id="pointmap")

        with task_tab("Matting", "matting") as tab:
            with tab.inputs:
                gr.Dropdown(["1b"], value="1b", label="Model size", interactive=False)
                mode = gr.Radio(["colour", "transparent", "image"], value="colour", label="Background")
                colour = gr.ColorPicker("#00b140", label="Background colour")
                bg_img = ImageUpload(type="filepath", label="Background image (for 'image')")
                btn = gr.Button("Matte", variant="primary")
            with tab.results:
                slider = gr.ImageSlider(label="Image / composite", format="jpeg", interactive=False,
                                        elem_id="matting-output")
                files = gr.File(label="Downloads (RGBA PNG, alpha PNG)", file_count="multiple",
                                elem_id="matting-files")
            btn.click(matting, [tab.img, mode, colour, bg_img], [slider, files, tab.info], api_name="matting",
                      concurrency_id="matting")

        with task_tab("All tasks", "all", scales=(1, 2)) as tab:
            with tab.inputs:
                size = gr.Dropdown(list(TASKS["pose"].sizes), value="0.4b", label="Model size (matting is always 1b)")
                btn = gr.Button("Run every task", variant="primary")
            with tab.results:
                gallery = gr.Gallery(label="All tasks", columns=3, height="auto", format="png", elem_id="all-output")
                files = gr.File(label="Download everything (.zip)", elem_id="all-files")
            btn.click(all_tasks, [tab.img, size], [gallery, files, tab.info], api_name="all", concurrency_id="all")

        from .features_tab import build_features_tab
        from .live_tab import build_live_tab
        from .video_tab import build_video_tab

        build_video_tab(ctx)
        build_live_tab(ctx)
        build_features_tab(ctx, task_tab, run)

        def forget_session(request: gr.Request):
            ctx.outputs.delete_session(_session(request))

        demo.unload(forget_session)
    demo.sapiens2_context = ctx  # for tests and tools that inspect the running app
    return demo

"""The built-in tasks, each described once. Everything else (tabs, `/video`, Live, the CLI, Ray, the GPU-time
estimate) reads these descriptions; see `spec.py` for what each field means."""

from __future__ import annotations

from pathlib import Path

from ..export import mocap_video, task_files
from ..export import video as video_files
from ..pipelines import steady
from . import drawn, present
from .runs import (
    person_masks,
    prepare_pose,
    run_matting,
    run_normals,
    run_pointmap,
    run_pose,
    run_segment,
    start_matting,
    start_normals,
    start_pointmap,
    start_pose,
    start_segment,
)
from .spec import Option, TaskSpec, register

SIZES = ("0.4b", "0.8b", "1b", "5b")
REMOVE_BACKGROUND = Option("remove_background", True, "Remove background (body-part segmentation)",
                           model="remove_background")


def raw_data(files: str) -> Option:
    """The option that adds a task's heavy raw downloads to an image request (off: the answer stays light; the
    batch CLI always writes them). One name for every task, so every front door reads it alike."""
    return Option("raw_data", False, f"Raw data too: {files} (a larger download)")


# -- pipelines: frames in, one result per frame out (options meant for other tasks, e.g. batch_size, ignored) --
def run_features(frames, manager, size, *, seg_cache=None, remove_background: bool = False, **_):
    """CLS embedding and patch features; with remove_background, each result carries the person mask its
    PCA colours are fitted on."""
    from ..pipelines.features import extract_features

    results = extract_features(frames, manager, size)
    seg_size = size if size in SIZES else SIZES[0]  # the 0.1b backbone has no body-part model of its size
    for result, mask in zip(results, person_masks(frames, manager, seg_size, seg_cache, remove_background)
                            or [None] * len(results)):
        result.mask = mask
    return results


def pose_items(job, n_frames: int) -> float:
    """Pose costs per person (the crops), twice with the flip test; 3 people a frame when not known yet."""
    detections = job.options.get("detections")
    people = sum(len(d.boxes) for d in detections) if detections else n_frames * 3
    lifted = 2 * n_frames if job.options.get("lift_3d") else 0  # the pointmap and the segmentation
    return people * (2 if job.options.get("flip_test", True) else 1) + lifted


# -- renderers: options once, then annotate(frame, result) per frame --------------------------------------
def pose_renderer(keypoint_threshold: float = 0.3, show_face: bool = True, show_boxes: bool = True, **_):
    from ..render.frames import PoseAnnotator

    return PoseAnnotator(keypoint_threshold, show_face, show_boxes)


def segment_renderer(opacity: float = 0.5, **_):
    from ..render.parts import PartsAnnotator

    return PartsAnnotator(opacity=opacity)


def normals_renderer(background: str = "black", **_):
    from ..render.normals import NormalsAnnotator

    return NormalsAnnotator(background=background)


def depth_renderer(colour_bar: bool = False, **_):
    from ..render.frames import SteadyDepthAnnotator

    return SteadyDepthAnnotator(colour_bar=colour_bar)


def matting_renderer(background: str = "colour", colour: str = "#00b140", background_image=None,
                     opaque: bool = False, **_):
    """opaque (video): no alpha channel, so 'transparent' shows the cut-out over grey (the WebM keeps the alpha)."""
    from ..render.matting import MattingAnnotator

    if opaque and background == "transparent":
        background, colour = "colour", "#808080"
    return MattingAnnotator(background=background, colour=colour, image=background_image)


# -- downloads --------------------------------------------------------------------------------------------
def export_features(rgb, result, folder: Path, **_) -> list[Path]:
    from ..export.features import write_features
    from ..pipelines.features import patch_mask
    from ..render.features import pca_rgb, upsample_to_image

    mask = None if result.mask is None else patch_mask(result.mask, result.grid_hw)
    picture = upsample_to_image(pca_rgb(result.patches, mask if mask is not None and mask.sum() >= 2 else None),
                                result.image_hw)
    return write_features(result, picture, folder, prefix="features")


def check_matting_background(options: dict) -> None:
    if options.get("background") == "image" and options.get("background_image") is None:
        raise ValueError("Choose a background image, or pick the 'colour' or 'transparent' background.")


def on_request(export):
    """A heavy per-frame video export (a PNG or .npy per frame, an extra video), written only when asked for
    (`frame_exports`): it costs more than the model on a GPU."""

    def make(folder, *, frame_exports: bool = False, **options):
        return export(folder, **options) if frame_exports else None

    return make


def normals_video_export(folder, *, raw_normals: bool = False, frame_exports: bool = False, **options):
    return video_files.NormalsVideoExport(folder, **options) if raw_normals or frame_exports else None


POSE_OPTIONS = (
    Option("boxes", "", "Person boxes (optional JSON [[x1,y1,x2,y2], ...]; skips the detector)", "text",
           advanced=True, model="boxes"),
    Option("flip_test", True, "Flip test", model="flip_test", cpu_default=False,
           info="Also runs each person mirrored and averages the two: steadier keypoints (most on hands and face), "
                "twice the pose model's work. On by default on a GPU, off on a CPU, where it doubles the wait."),
    Option("detection_threshold", 0.3, "Detection threshold", "slider", low=0.05, high=0.95, advanced=True,
           model="score_threshold"),
    Option("nms_iou", 0.3, "NMS IoU", "slider", low=0.1, high=0.9, advanced=True, model="nms_iou"),
    Option("max_people", 20, "Max people", "slider", low=1, high=50, step=1, advanced=True, model="max_people"),
    Option("keypoint_threshold", 0.3, "Keypoint threshold (drawing)", "slider", advanced=True),
    Option("show_face", True, "Draw face keypoints", advanced=True),
    Option("show_boxes", True, "Draw boxes", advanced=True),
    # appended: API order
    Option("lift_3d", False, "Lift to 3D (also runs the depth and body-part models)", model="lift_3d",
           info="Each keypoint's depth is read inside the body-part mask, so it lands on the person, not on what "
                "is behind them."),
)

register(TaskSpec(
    "pose", "Pose", "Pose", "pose", SIZES, run_pose, options=POSE_OPTIONS, items=pose_items, detector=True,
    follows_frames=True, prepare=prepare_pose, start=start_pose,
    renderer=pose_renderer, present=present.present_pose, export=task_files.export_pose,
    files=("pose_sapiens2.json", "pose_coco17.json", "pose_openpose_keypoints.json", "pose_coco_wholebody.json"),
    optional_files=("pose_3d.json", "pose_3d.glb"), all_options={"lift_3d": True}, model3d_files=("pose_3d.glb",),
    option_files={"lift_3d": ("pose_3d.json",)},  # the .glb only when a joint has a depth
    video_option_files={"lift_3d": ("pose_3d.jsonl",)},  # the BVH and .glb only when someone is solved
    video_export=mocap_video.pose_video_export, recording="people", live=True, in_all=True, button="Estimate pose",
    outputs=("image",), result_label="Keypoints",
    files_label="Downloads (official JSON, COCO-17, OpenPose, COCO-WholeBody; 3D keypoints when lifted)",
    viewer_file="pose_3d.glb", viewer_label="3D skeleton on its floor (metres; upright where the floor is seen)",
    viewer_card=("The 3D skeleton appears here", 'tick "Lift to 3D" and run; then drag to turn it'),
    controls=("pose_options",),  # the Video and Live tabs' controls for it
    description="Whole-body 2D pose of every person in an image: 308 keypoints per person (body, feet, hands, "
                "face), found with a person detector. Gives the skeleton drawing and the keypoints as the official "
                "Sapiens2 JSON, COCO-17, OpenPose BODY_25 and COCO-WholeBody files; with lift_3d, also 3D keypoints "
                "in metres (pose_3d.json) and a 3D skeleton (pose_3d.glb)."))

register(TaskSpec(
    "segment", "Body parts", "Body parts", "seg", SIZES, run_segment, aliases=("seg", "body_parts"), folder="seg",
    start=start_segment, draw=drawn.draw_segment, draw_start=drawn.start_segment,
    options=(Option("opacity", 0.5, "Overlay opacity", "slider"),
             Option("show_names", False, "Write class names on the parts")),
    renderer=segment_renderer, present=present.present_segment, export=task_files.export_segment,
    files=("body_parts_labels.png", "body_parts_colors.png"), video_export=on_request(video_files.LabelsVideoExport),
    recording="map", live=True, in_all=True, button="Segment body parts", outputs=("slider", "legend"), controls=("frame_exports",),
    result_label="Image / body parts", files_label="Downloads (class-id PNG, colour PNG)",
    description="Body-part segmentation of the people in an image: 29 classes (face, hair, arms, hands, legs, "
                "clothing...). Gives the input and the coloured overlay, a legend of the classes present with their "
                "pixel shares, a class-id PNG and a colour PNG."))

register(TaskSpec(
    "normals", "Normals", "Normals", "normal", SIZES, run_normals, aliases=("normal",), folder="normal",
    start=start_normals, draw=drawn.draw_normals, draw_start=drawn.start_normals,
    options=(REMOVE_BACKGROUND,
             Option("background", "black", "Background", "radio", (("black", "black"), ("original image", "image")),
                    shown_when=("remove_background", True)),  # what is painted where the background was removed
             Option("png_bits", 16, "PNG bit depth", "radio", (8, 16)),
             raw_data("normals.npy, float32 x y z per pixel, 25 MB at 1080p")),  # appended: API order
    uses_mask=True, follows_frames=True, carry=steady.carried, steady=True,  # video: temporal_smoothing
    coded_maps=True, renderer=drawn.steadied(normals_renderer, unit=True),  # steady video: the filter rides on it
    present=present.present_normals, export=task_files.export_normals,
    files=("normals.npy", "normals16.png"), option_files={"raw_data": ("normals.npy",)},
    video_export=normals_video_export, recording="map", live=True, in_all=True,
    button="Estimate normals", outputs=("slider",), result_label="Image / normals",
    files_label="Downloads (16- or 8-bit PNG; normals.npy with raw data)",
    controls=("remove_background", "steady", "raw_normals", "frame_exports"),  # the Video and Live tabs' controls
    description="Surface normals of the people in an image (one unit vector per pixel, camera frame). Gives the "
                "input and the normal map as colours and the normals as a 16- or 8-bit PNG; with raw_data, also "
                "as .npy (float32)."))

register(TaskSpec(
    "pointmap", "Depth & 3D", "Depth", "pointmap", SIZES, run_pointmap, aliases=("depth",), start=start_pointmap,
    draw=drawn.draw_pointmap, draw_start=drawn.start_pointmap,
    options=(REMOVE_BACKGROUND,
             Option("max_points", 200_000, "Max points in the cloud", "slider", low=10_000, high=500_000,
                    step=10_000, shown_when=("raw_data", True)),  # the clouds come with the raw data
             Option("max_faces", 300_000, "Max faces in the surface mesh", "slider", low=10_000, high=1_000_000,
                    step=10_000, model="max_faces"),  # a light answer's mesh grid is taken where the model runs
             raw_data("depth_m.npy (float32 metres) and the point cloud as .ply and .glb")),  # appended: API order
    uses_mask=True, follows_frames=True, carry=steady.carried, steady=True,  # video: temporal_smoothing
    coded_maps=True, renderer=drawn.steadied(depth_renderer), present=present.present_pointmap,
    export=task_files.export_pointmap,
    files=("depth_mm.png", "depth_m.npy"), optional_files=("person.ply", "person.glb", "person_mesh.glb"),
    option_files={"raw_data": ("depth_m.npy",)},  # and the clouds when a valid point exists
    video_export=on_request(video_files.DepthVideoExport), recording="map", live=True, in_all=True,
    button="Estimate depth & 3D",
    outputs=("slider", "model3d"), result_label="Image / depth (turbo inverse depth, colour bar in metres)",
    model3d_label="3D view (surface mesh; point clouds in the downloads)",
    viewer_card=("The person's 3D surface appears here", "after a run; then drag to turn it, scroll to zoom"),
    model3d_files=("person_mesh.glb", "person.glb"),  # the mesh; the cloud when no face is left
    files_label="Downloads (surface mesh .glb, depth PNG mm; with raw data: .npy m, point cloud .ply / .glb)",
    controls=("remove_background", "steady", "colour_bar", "frame_exports"),  # the Video and Live tabs' controls for it
    description="Metric depth and 3D shape of the people in an image (a pointmap: one 3D point per pixel). Gives "
                "the input and the depth as colours with a scale in metres, a coloured 3D surface mesh "
                "(person_mesh.glb) and the depth as a PNG in millimetres; with raw_data, also the depth as .npy in "
                "metres and the point cloud as .ply and .glb."))

register(TaskSpec(
    "matting", "Matting", "Matting", "matting", ("1b",), run_matting, start=start_matting, draw=drawn.draw_matting,
    draw_start=drawn.start_matting,
    draw_on_cpu=True, coded_maps=True,
    options=(Option("background", "colour", "Background", "radio", ("colour", "transparent", "image")),
             Option("colour", "#00b140", "Background colour", "colour", shown_when=("background", "colour")),
             Option("background_image", None, "Background image", "image", shown_when=("background", "image"))),
    validate=check_matting_background, renderer=matting_renderer, present=present.present_matting, export=task_files.export_matting,
    files=("matting_rgba.png", "matting_alpha.png"), video_export=on_request(video_files.MattingVideoExport), in_all=True,
    button="Cut out the people", outputs=("slider",), result_label="Image / composite",
    files_label="Downloads (RGBA PNG, alpha PNG)",
    controls=("matting", "frame_exports"),  # the Video and Live tabs' controls for it
    description="Cuts the people out of an image (alpha matting). Gives the input and the people composited over a "
                "colour, an image or transparency, the cut-out as an RGBA PNG and the alpha matte as a PNG."))

register(TaskSpec(
    "features", "Features", "Features", "pretrain", (*SIZES, "0.1b"), run_features, aliases=("pretrain",),
    options=(Option("remove_background", True, "Fit the PCA colours on the person (body-part segmentation)",
                    model="remove_background"),),
    uses_mask=True, export=export_features,
    files=("features_cls_embedding.npy", "features_patch_features.npy", "features_pca.png"), video=False))

LIFT_TASK = "pointmap"  # what lift_3d also runs (the CLI preloads its checkpoint)
# the models an option adds to its task's (a request's compile notes name them): a person mask is the body parts',
# the 3D lift's keypoints are looked up in a masked pointmap
OPTION_MODELS = {"remove_background": ("segment",), "lift_3d": (LIFT_TASK, "segment")}

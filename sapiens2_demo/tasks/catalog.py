"""The built-in tasks, each described once. Everything else (tabs, `/video`, Live, the CLI, Ray, the GPU-time
estimate) reads these descriptions; see `spec.py` for what each field means."""

from __future__ import annotations

from pathlib import Path

from ..export import mocap_video, task_files
from ..export import video as video_files
from ..export.mesh import grid_stride
from ..pipelines import dense, steady
from ..results import NormalsResult
from . import drawn, present
from .spec import Option, TaskSpec, register

SIZES = ("0.4b", "0.8b", "1b", "5b")
REMOVE_BACKGROUND = Option("remove_background", True, "Remove background (body-part segmentation)",
                           model="remove_background")


def raw_data(files: str) -> Option:
    """The option that adds a task's heavy raw downloads to an image request (off: the answer stays light; the
    batch CLI always writes them). One name for every task, so every front door reads it alike."""
    return Option("raw_data", False, f"Raw data too: {files} (a larger download)")


# -- pipelines: frames in, one result per frame out (options meant for other tasks, e.g. batch_size, ignored) --
def _person_masks(frames, manager, size, seg_cache, remove_background):
    if not remove_background:
        return None
    return [r.foreground for r in dense.segment_batch(frames, manager, size, cache=seg_cache)]


def _image_cache(frames, seg_cache):
    """The shared cache for an image request (the depth task and the pose lift of All tasks reuse one
    pointmap); video frames are never seen twice, so a chunk does not fill the cache with them."""
    return seg_cache if len(frames) == 1 else None


def run_pose(frames, manager, size, *, seg_cache=None, boxes=None, detections=None, max_people: int = 20,
             lift_3d: bool = False, **options):
    """User boxes (JSON text or a list, validated before any model work) replace the detector on every frame.
    detect_every (video, in options): the detector on every Nth frame, boxes following the keypoints between.
    lift_3d: also run the pointmap model on the frames with people and attach each frame's 3D keypoints
    (`PoseResult.lifted`, pose/lift.py), sampled inside the body-part mask so they stay on the person."""
    from ..pipelines.pose import follow_pose_batch

    if detections is None:
        detections = _user_detections(frames, boxes, max_people)
    results = follow_pose_batch(frames, manager, size, detections=detections, max_people=int(max_people),
                                **options)
    if lift_3d:
        lift_poses(frames, results, manager, size, seg_cache)
    return results


def _user_detections(frames, boxes, max_people):
    """The user's boxes on every frame, or None (the detector's; an empty list means that too)."""
    import numpy as np

    from ..pipelines.pose import Detections
    from ..pose.boxes import parse_boxes

    if not boxes:
        return None
    parsed = [parse_boxes(boxes, frame.shape[:2], max_boxes=int(max_people)) for frame in frames]
    if any(b is None for b in parsed):
        return None
    return [Detections(b, np.ones(len(b), np.float32)) for b in parsed]


def prepare_pose(frames, manager, size, *, boxes=None, max_people: int = 20, lift_3d: bool = False,
                 score_threshold: float = 0.3, nms_iou: float = 0.3, **_):
    """A GPU call's people, before its batches (TaskSpec.prepare): on the device road every frame's boxes in one
    detector call (or the user's), so the batches need not follow one another and can overlap; the detector's are
    queued on the device, each frame's a function that gives them, their copy back riding with the next copy back
    (the batch before's keypoints: `detect_queued`). None elsewhere (following people between detections)."""
    from ..pipelines.pose import batched_detection, detect_queued

    if not batched_detection(manager):
        return None
    given = _user_detections(frames, boxes, max_people)
    return given or detect_queued(frames, manager, score_threshold=score_threshold, nms_iou=nms_iou,
                                  max_people=int(max_people))


def start_pose(frames, manager, size, *, prepared, max_people: int = 20, boxes=None, lift_3d: bool = False,
               detect_every=None, frame_index=None, previous=None, **options):
    """The crops' forwards of `prepare_pose`'s people (nothing to follow: `frame_index` and `previous` unused), and
    with lift_3d the body-part and pointmap forwards of every frame (each has someone: the detector falls back to
    the whole image), all reading one upload of the frames; finishes with the decoding and the lift, sampled where
    the pointmap is from the keypoints still there (only the keypoints' points cross back, in the keypoints' copy)."""
    from ..pipelines.pose import pose_start

    images = dense.uploaded_once(frames, manager) if lift_3d else None
    people = [found() if callable(found) else found for found in prepared]  # queued boxes: on the host by now
    poses = pose_start(frames, manager, size, detections=people, max_people=int(max_people), defer_decoding=True,
                       uploaded=images, **options)
    if not lift_3d:
        return poses
    labels = dense.labels_start(images, manager, size)
    maps = dense.pointmaps_device_start(images, manager, size)

    def finish():
        from ..pose.lift import lift_on_device, lifted_from_sampled, sample_people_on_device

        pointmaps, masks = maps(), [label > 0 for label in labels()]
        # the keypoints sampled in the pointmaps before they cross: the lifted points come back in their copy
        done, carried = poses(ride=lambda points, sure, people: [
            sample_people_on_device(points, sure, people, pointmaps, masks)])
        lifted = lift_on_device(done, pointmaps, masks) if carried is None else lifted_from_sampled(done, carried[0])
        for pose, points in zip(done, lifted):
            pose.lifted = points
        return done

    return finish


def lift_poses(frames, poses, manager, size, seg_cache=None) -> None:
    """Set `lifted` on each pose: one pointmap forward for the frames with people (masked with the body-part
    segmentation, shared through the cache); a frame with nobody gets an empty Pose3DResult."""
    busy = [i for i, pose in enumerate(poses) if pose.num_people]
    picked = [frames[i] for i in busy]
    maps = dense.pointmap_batch(picked, manager, size, cache=_image_cache(picked, seg_cache),
                                masks=_person_masks(picked, manager, size, seg_cache, remove_background=True))
    _lift(poses, maps, busy)


def _lift(poses, maps, which) -> None:
    """poses[i].lifted from maps[k] for the k-th i of `which` with people; an empty Pose3DResult for the others."""
    from ..pose.lift import lift_keypoints, nobody_lifted

    for i, pointmap in zip(which, maps):
        if poses[i].num_people:
            poses[i].lifted = lift_keypoints(poses[i], pointmap)
    for pose in poses:
        if pose.lifted is None:
            pose.lifted = nobody_lifted()


def run_segment(frames, manager, size, *, seg_cache=None, **_):
    return dense.segment_batch(frames, manager, size, cache=seg_cache)


def run_normals(frames, manager, size, *, seg_cache=None, remove_background: bool = False,
                temporal_smoothing: bool = False, previous=None, coded_maps: bool = False, **_):
    """temporal_smoothing (video): the maps filtered over time, going on from `previous` (pipelines/steady.py); on
    the device road all of it there. coded_maps (a light image answer): normals16.png's codes cross, not float32."""
    if temporal_smoothing and dense.use_device_post(manager.device):
        return steady.steady_on_device(manager, size, frames, "normals", remove_background, previous)
    masks = _person_masks(frames, manager, size, seg_cache, remove_background)
    results = dense.normals_batch(frames, manager, size, masks=masks, coded=coded_maps)
    if temporal_smoothing:
        results = steady.steady_results(frames, results, "normals", manager.device, previous, unit=True)
    return results


def run_pointmap(frames, manager, size, *, seg_cache=None, remove_background: bool = False,
                 temporal_smoothing: bool = False, previous=None, coded_maps: bool = False,
                 max_faces: int = 300_000, **_):
    """coded_maps (a light answer): the depth PNG's mm and the mesh grid (max_faces) cross, not float32 points."""
    if temporal_smoothing and dense.use_device_post(manager.device):
        return steady.steady_on_device(manager, size, frames, "points", remove_background, previous)
    masks = _person_masks(frames, manager, size, seg_cache, remove_background)
    strides = [grid_stride(*f.shape[:2], int(max_faces)) for f in frames] if coded_maps else None
    results = dense.pointmap_batch(frames, manager, size, masks=masks, cache=_image_cache(frames, seg_cache),
                                   mesh_strides=strides)
    if temporal_smoothing:
        results = steady.steady_results(frames, results, "points", manager.device, previous)
    return results


def run_matting(frames, manager, size, *, seg_cache=None, coded_maps: bool = False, **_):  # coded: 8-bit maps cross
    return dense.matting_batch(frames, manager, size, coded=coded_maps)


# -- the same in two stages, for a GPU call of several batches (a video chunk): start(...) runs the forwards and
# returns finish(), the post-processing and copy back, which gpu.infer runs beside the next batch's forwards.
# Video frames are never seen twice: no cache (the one-batch calls above keep theirs).
def _masks_start(frames, manager, size, remove_background):
    if not remove_background:
        return lambda: None
    labels = dense.segment_start(frames, manager, size)
    return lambda: [r.foreground for r in labels()]


def start_segment(frames, manager, size, **_):
    return dense.segment_start(frames, manager, size)


def start_normals(frames, manager, size, *, remove_background: bool = False, **_):
    frames = dense.uploaded_once(frames, manager)  # the mask's forward and the task's read one upload
    masks = _masks_start(frames, manager, size, remove_background)
    maps = dense.normals_start(frames, manager, size)
    return lambda: [NormalsResult(normals=n, mask=m) for n, m in zip(maps(), masks() or [None] * len(frames))]


def start_pointmap(frames, manager, size, *, remove_background: bool = False, **_):
    frames = dense.uploaded_once(frames, manager)
    return dense.pointmap_start(frames, manager, size, _masks_start(frames, manager, size, remove_background))


def start_matting(frames, manager, size, **_):
    return dense.matting_start(frames, manager, size)


def run_features(frames, manager, size, *, seg_cache=None, remove_background: bool = False, **_):
    """CLS embedding and patch features; with remove_background, each result carries the person mask its
    PCA colours are fitted on."""
    from ..pipelines.features import extract_features

    results = extract_features(frames, manager, size)
    seg_size = size if size in SIZES else SIZES[0]  # the 0.1b backbone has no body-part model of its size
    for result, mask in zip(results, _person_masks(frames, manager, seg_size, seg_cache, remove_background)
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
    Option("lift_3d", False, "Lift to 3D (also runs the depth model)", model="lift_3d"),  # appended: API order
)

register(TaskSpec(
    "pose", "Pose", "Pose", "pose", SIZES, run_pose, options=POSE_OPTIONS, items=pose_items, detector=True,
    follows_frames=True, prepare=prepare_pose, start=start_pose,
    renderer=pose_renderer, present=present.present_pose, export=task_files.export_pose,
    files=("pose_sapiens2.json", "pose_coco17.json", "pose_openpose_keypoints.json", "pose_coco_wholebody.json"),
    optional_files=("pose_3d.json", "pose_3d.glb"), all_options={"lift_3d": True}, model3d_files=("pose_3d.glb",),
    option_files={"lift_3d": ("pose_3d.json",)},  # the .glb only when a joint has a depth
    video_option_files={"lift_3d": ("pose_3d.jsonl",)},  # the BVH and .glb only when someone is solved
    video_export=mocap_video.pose_video_export, live=True, in_all=True, button="Estimate pose",
    outputs=("image",), result_label="Keypoints",
    files_label="Downloads (official JSON, COCO-17, OpenPose, COCO-WholeBody; 3D keypoints when lifted)",
    viewer_file="pose_3d.glb", viewer_label="3D skeleton (metres, camera frame)",
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
    live=True, in_all=True, button="Segment body parts", outputs=("slider", "legend"),
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
    video_export=normals_video_export, live=True, in_all=True,
    button="Estimate normals", outputs=("slider",), result_label="Image / normals",
    files_label="Downloads (16- or 8-bit PNG; normals.npy with raw data)",
    controls=("remove_background", "steady", "raw_normals"),  # the Video and Live tabs' controls for it
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
    video_export=on_request(video_files.DepthVideoExport), live=True, in_all=True, button="Estimate depth & 3D",
    outputs=("slider", "model3d"), result_label="Image / depth (turbo inverse depth, colour bar in metres)",
    model3d_label="3D view (surface mesh; point clouds in the downloads)",
    viewer_card=("The person's 3D surface appears here", "after a run; then drag to turn it, scroll to zoom"),
    model3d_files=("person_mesh.glb", "person.glb"),  # the mesh; the cloud when no face is left
    files_label="Downloads (surface mesh .glb, depth PNG mm; with raw data: .npy m, point cloud .ply / .glb)",
    controls=("remove_background", "steady", "colour_bar"),  # the Video and Live tabs' controls for it
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
    controls=("matting",),  # the Video and Live tabs' controls for it
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

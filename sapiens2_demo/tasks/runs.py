"""What each task runs: the pipelines called with a job's options, in one call (`run_*`) or in two stages for a GPU
call of several batches (`prepare_*` / `start_*`). The task descriptions that name them are in catalog.py."""

from __future__ import annotations

from ..export.mesh import grid_stride
from ..pipelines import dense, steady
from ..results import NormalsResult


def person_masks(frames, manager, size, seg_cache, remove_background):
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
        import numpy as np

        from ..pose.floor_pixels import floor_from_device, floor_on_device
        from ..pose.lift import lift_on_device, lifted_from_sampled, sample_people_on_device

        pointmaps, masks = maps(), [label > 0 for label in labels()]
        boxes = np.concatenate([np.asarray(found.boxes, np.float32).reshape(-1, 4) for found in people])
        # the keypoints sampled in the pointmaps before they cross: the lifted points and the floor beside the feet
        # come back in their copy
        done, carried = poses(ride=lambda points, sure, counts: [
            sample_people_on_device(points, sure, counts, pointmaps, masks),
            floor_on_device(points, sure, counts, boxes, pointmaps, masks)])
        if carried is None:  # decoded again (rare): sampled from the keypoints it gave, in a copy of its own
            lifted = lift_on_device(done, pointmaps, masks)
            floors = floor_from_device(done, _floor_again(done, boxes, pointmaps, masks))
        else:
            lifted, floors = lifted_from_sampled(done, carried[0]), floor_from_device(done, carried[1])
        for pose, points, floor in zip(done, lifted, floors):
            pose.lifted = points
            pose.lifted.floor = floor
        return done

    return finish


def _floor_again(poses, boxes, pointmaps, masks):
    """The floor pixels of `floor_on_device` from the keypoints on the host, copied up and back."""
    import numpy as np
    import torch

    from ..pose.floor_pixels import floor_on_device

    device = pointmaps[0].device
    keypoints = torch.from_numpy(np.concatenate([pose.keypoints for pose in poses])).to(device)
    scores = torch.from_numpy(np.concatenate([pose.keypoint_scores for pose in poses])).to(device)
    counts = [pose.num_people for pose in poses]
    return floor_on_device(keypoints, scores, counts, boxes, pointmaps, masks).cpu().numpy()


def lift_poses(frames, poses, manager, size, seg_cache=None) -> None:
    """Set `lifted` on each pose: one pointmap forward for the frames with people (masked with the body-part
    segmentation, shared through the cache); a frame with nobody gets an empty Pose3DResult."""
    busy = [i for i, pose in enumerate(poses) if pose.num_people]
    picked = [frames[i] for i in busy]
    maps = dense.pointmap_batch(picked, manager, size, cache=_image_cache(picked, seg_cache),
                                masks=person_masks(picked, manager, size, seg_cache, remove_background=True))
    _lift(poses, maps, busy)


def background_mask(foreground):
    """(h, w) bool: where the segmentation saw nobody, cut to the camera tracker's width (a few kB a frame)."""
    import cv2
    import numpy as np

    from ..pose.camera_rotation import WORK_WIDTH

    foreground = np.asarray(foreground, bool)
    height, width = foreground.shape
    if width > WORK_WIDTH:
        size = (WORK_WIDTH, max(1, round(height * WORK_WIDTH / width)))
        foreground = cv2.resize(foreground.view(np.uint8), size, interpolation=cv2.INTER_NEAREST) > 0
    return ~foreground


def _lift(poses, maps, which) -> None:
    """poses[i].lifted from maps[k] for the k-th i of `which` with people; an empty Pose3DResult for the others."""
    from ..pose.floor_pixels import floor_pixels
    from ..pose.lift import lift_keypoints, nobody_lifted

    for i, pointmap in zip(which, maps):
        if poses[i].num_people:
            poses[i].lifted = lift_keypoints(poses[i], pointmap)
            if getattr(pointmap, "mask", None) is not None:
                poses[i].lifted.background = background_mask(pointmap.mask)
                poses[i].lifted.floor = floor_pixels(pointmap.points, pointmap.mask, poses[i])
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
        return steady.steady_on_device(manager, size, frames, steady.NORMALS, remove_background, previous)
    masks = person_masks(frames, manager, size, seg_cache, remove_background)
    results = dense.normals_batch(frames, manager, size, masks=masks, coded=coded_maps)
    if temporal_smoothing:
        results = steady.steady_results(frames, results, steady.NORMALS, manager.device, previous, unit=True)
    return results


def run_pointmap(frames, manager, size, *, seg_cache=None, remove_background: bool = False,
                 temporal_smoothing: bool = False, previous=None, coded_maps: bool = False,
                 max_faces: int = 300_000, **_):
    """coded_maps (a light answer): the depth PNG's mm and the mesh grid (max_faces) cross, not float32 points."""
    if temporal_smoothing and dense.use_device_post(manager.device):
        return steady.steady_on_device(manager, size, frames, steady.POINTS, remove_background, previous)
    masks = person_masks(frames, manager, size, seg_cache, remove_background)
    strides = [grid_stride(*f.shape[:2], int(max_faces)) for f in frames] if coded_maps else None
    results = dense.pointmap_batch(frames, manager, size, masks=masks, cache=_image_cache(frames, seg_cache),
                                   mesh_strides=strides)
    if temporal_smoothing:
        results = steady.steady_results(frames, results, steady.POINTS, manager.device, previous)
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

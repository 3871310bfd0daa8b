"""Frames -> PoseResults: person boxes, the crops of every frame batched through the pose model (with flip
test), DARK-UDP decoding."""

from __future__ import annotations

import time
import weakref
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from .. import ledger
from ..models.crops import crop_people
from ..models.inference import forward, input_size, upload
from ..models.registry import checkpoint
from ..pose.boxes import parse_boxes
from ..pose.decode import decode_heatmaps
from ..pose.detector import PERSON_CLASSES, find_people
from ..pose.meta import flip_pairs_from_indices
from ..results import PoseResult
from ..util import as_rgb_uint8
from .detect_device import find_people_queued

STAGES = ("load", "detect", "crop", "forward", "decode")


def estimate_pose(image: np.ndarray, manager, size: str = "0.4b", *, boxes=None, flip_test: bool = True,
                  score_threshold: float = 0.3, nms_iou: float = 0.3, max_people: int = 20,
                  batch_size: int = 8, timings: dict | None = None,
                  detector_classes: tuple[int, ...] | None = PERSON_CLASSES) -> PoseResult:
    """308 keypoints for every person in an RGB uint8 image, in image pixels (a batch of one).

    boxes: user boxes ([[x1, y1, x2, y2], ...] or its JSON string) skip the detector; see parse_boxes.
    timings: if given, filled with seconds per stage (load, detect, crop, forward, decode).
    Raises ValueError for a bad image or boxes, CheckpointUnavailable when the pose model is missing;
    a missing detector or no detection falls back to the whole image, with a note in result.notes.
    """
    image = as_rgb_uint8(image)
    user_boxes = parse_boxes(boxes, image.shape[:2], max_boxes=max_people)  # validate before any loading
    detections = None if user_boxes is None else [Detections(user_boxes, np.ones(len(user_boxes), np.float32))]
    return estimate_pose_batch([image], manager, size, detections=detections, flip_test=flip_test,
                               score_threshold=score_threshold, nms_iou=nms_iou, max_people=max_people,
                               batch_size=batch_size, timings=timings, detector_classes=detector_classes)[0]


@dataclass
class Detections:
    """Person boxes for one frame: (N, 4) float32 x1 y1 x2 y2, (N,) scores, notes, optional track ids."""

    boxes: np.ndarray
    scores: np.ndarray
    notes: list[str] = field(default_factory=list)
    track_ids: np.ndarray | None = None


def detect_batch(frames: list[np.ndarray], manager, *, score_threshold: float = 0.3, nms_iou: float = 0.3,
                 max_people: int = 20, detector_classes: tuple[int, ...] | None = PERSON_CLASSES
                 ) -> list[Detections]:
    """The detector on each frame, with the whole-image fallback (see find_people); on the device road all the
    frames in one detector call on the device, their boxes copied back in one copy (`detect_queued`)."""
    from .device_post import use_device_post

    if use_device_post(manager.device):
        return [detections() for detections in detect_queued(frames, manager, score_threshold=score_threshold,
                                                             nms_iou=nms_iou, max_people=max_people,
                                                             detector_classes=detector_classes)]
    return [Detections(*find_people(frame, manager, score_threshold, nms_iou, max_people, detector_classes))
            for frame in frames]


def detect_queued(frames: list[np.ndarray], manager, *, score_threshold: float = 0.3, nms_iou: float = 0.3,
                  max_people: int = 20, detector_classes: tuple[int, ...] | None = PERSON_CLASSES) -> list:
    """`detect_batch` on the device road with no wait now: one zero-argument function per frame giving its
    Detections; their boxes cross with the next copy back on the device (a batch's keypoints), or on their own
    when asked for first (detect_device.py)."""
    people = find_people_queued(frames, manager, score_threshold, nms_iou, max_people, detector_classes)
    return [lambda found=found: Detections(*found()) for found in people]


def estimate_pose_batch(frames: list[np.ndarray], manager, size: str = "0.4b", **options) -> list[PoseResult]:
    """One PoseResult per frame. The crops of all people of all frames go through the model together,
    `batch_size` crops at a time (heatmaps are 60 MB a person at full size, so memory stays bounded).

    detections: boxes per frame (user boxes, or the detector's with track ids on video); None runs the
    detector on every frame. The options are `pose_start`'s.
    """
    return pose_start(frames, manager, size, **options)()


def pose_start(frames: list[np.ndarray], manager, size: str = "0.4b", *,
               detections: list[Detections] | None = None, flip_test: bool = True,
               score_threshold: float = 0.3, nms_iou: float = 0.3, max_people: int = 20,
               batch_size: int = 8, timings: dict | None = None,
               detector_classes: tuple[int, ...] | None = PERSON_CLASSES, defer_decoding: bool = False,
               uploaded: list | None = None):
    """`estimate_pose_batch` in two stages: the detector, crops and forwards now; returns `finish()`, which gives
    the results. defer_decoding (a GPU call of several batches, overlap.py): on the device road the decoding
    and its copy back wait for `finish()`, run beside the next batch's forwards, every batch of crops decoded
    together with one copy back, the heatmaps kept on the device until then (60 MB a person at full size);
    otherwise each batch of crops is decoded after its forward.
    uploaded: the frames already on the device road's device (`upload`'s tensors), read instead of a second upload
    (pose lifted to 3D runs its other forwards on them too)."""
    frames = [as_rgb_uint8(frame) for frame in frames]
    timed = timings is not None  # then each stage waits for the device, so its time is its own
    timings = {} if timings is None else timings
    for stage in STAGES:
        timings.setdefault(stage, 0.0)
    with _timed(timings, "load"):
        loaded = manager.get(checkpoint("pose", size))
    if detections is None:
        with _timed(timings, "detect"):
            detections = detect_batch(frames, manager, score_threshold=score_threshold, nms_iou=nms_iou,
                                      max_people=max_people, detector_classes=detector_classes)
    if len(detections) != len(frames):
        raise ValueError(f"{len(detections)} detections for {len(frames)} frames")

    from .device_post import pose_keypoints, pose_keypoints_many, use_device_post

    flip_pairs = model_flip_pairs(loaded.model) if flip_test else None
    on_device = use_device_post(loaded.device)
    model_input = input_size(loaded.processor)
    crops = [(i, box) for i, det in enumerate(detections) for box in np.asarray(det.boxes, np.float32).reshape(-1, 4)]
    images = (uploaded or upload(frames, loaded.device)) if on_device else frames  # each frame crosses once, pinned, as uint8
    decoded, deferred = [], []  # per batch of crops: its keypoints and scores, or (heatmaps, boxes) to decode
    batch_size = max(int(batch_size), 1)
    for start in range(0, len(crops), batch_size):
        chunk = crops[start:start + batch_size]
        boxes = np.stack([box for _, box in chunk])
        with _timed(timings, "crop"):  # cut where the frames are, waiting for nothing (models/crops.py)
            pixel_values = crop_people(loaded, images, [i for i, _ in chunk], boxes)
        with _timed(timings, "forward"):
            heatmaps = forward_with_flip(loaded, pixel_values, flip_pairs, on_device=on_device)
            if timed and heatmaps.is_cuda:
                import torch

                torch.cuda.synchronize(heatmaps.device)
        if defer_decoding and on_device:  # decoded where the heatmaps are, all batches in finish: one copy back
            deferred.append((heatmaps, boxes))
        else:  # now: one batch of heatmaps at a time
            with _timed(timings, "decode"):
                decode = pose_keypoints if on_device else decode_heatmaps
                decoded.append(decode(heatmaps, boxes, model_input))

    def finish(ride=None):
        """The results; with `ride` (deferred decoding only), (the results, what it gave on the host, or None):
        ride(keypoints, scores, people a frame) gets every crop's image keypoints and scores on the device and gives
        float32 tensors there that cross in the keypoints' copy (pose lifted to 3D: one copy, not two)."""
        carried = None
        with _timed(timings, "decode"):
            if deferred and not decoded and ride is not None:
                people = [len(det.boxes) for det in detections]
                found, carried = pose_keypoints_many(deferred, model_input,
                                                     extra=lambda points, sure: ride(points, sure, people))
            else:
                found = decoded + pose_keypoints_many(deferred, model_input) if deferred else decoded
        keypoints = np.concatenate([k for k, _ in found]).astype(np.float32) if found else np.zeros((0, 0, 2), np.float32)
        scores = np.concatenate([s for _, s in found]).astype(np.float32) if found else np.zeros((0, 0), np.float32)
        results, first = [], 0
        for frame, det in zip(frames, detections):
            n = len(det.boxes)
            results.append(PoseResult(
                image_size=(int(frame.shape[0]), int(frame.shape[1])), boxes=np.asarray(det.boxes, np.float32).reshape(-1, 4),
                box_scores=np.asarray(det.scores, np.float32), keypoints=keypoints[first:first + n],
                keypoint_scores=scores[first:first + n], notes=list(det.notes), track_ids=det.track_ids))
            first += n
        return results if ride is None else (results, carried)

    return finish


FOLLOW_SCORE = 0.3  # a keypoint at least this sure places a followed person's next box
FOLLOW_MIN_KEYPOINTS = 8  # fewer sure keypoints: the person is lost, and the next frame runs the detector
FOLLOW_PAD = 1.25  # the box around a person's keypoints, grown like the detector's boxes are in top-down pose


def follow_people(previous: PoseResult) -> Detections | None:
    """The next frame's boxes from this frame's keypoints: each person's box is the box around their sure
    keypoints, grown by FOLLOW_PAD and clipped to the frame. None (detect again) when nobody was there or
    someone is lost."""
    if previous.num_people == 0:
        return None
    h, w = previous.image_size
    boxes = []
    for points, scores in zip(previous.keypoints, previous.keypoint_scores):
        sure = points[(scores >= FOLLOW_SCORE) & np.isfinite(points).all(axis=1)]
        if len(sure) < FOLLOW_MIN_KEYPOINTS:
            return None
        (x1, y1), (x2, y2) = sure.min(axis=0), sure.max(axis=0)
        cx, cy, half_w, half_h = (x1 + x2) / 2, (y1 + y2) / 2, (x2 - x1) * FOLLOW_PAD / 2, (y2 - y1) * FOLLOW_PAD / 2
        boxes.append([max(cx - half_w, 0), max(cy - half_h, 0), min(cx + half_w, w), min(cy + half_h, h)])
    return Detections(np.asarray(boxes, np.float32), np.asarray(previous.box_scores, np.float32))


def follow_pose_batch(frames: list[np.ndarray], manager, size: str = "0.4b", *, detect_every: int = 1,
                      detections: list[Detections] | None = None, frame_index: int = 0,
                      previous: PoseResult | None = None, **options) -> list[PoseResult]:
    """Video frames in order: the detector on every `detect_every`-th frame of the video, and on the frame
    after a person is lost; between, each person's box follows their keypoints (`follow_people`), as
    top-down pose trackers do. The detector costs more than the pose model on a CPU. detect_every=1 is
    `estimate_pose_batch`: every frame detected, every crop of the batch in one forward; so is the device road
    (`batched_detection`).
    frame_index: the video index of frames[0]; previous: the result of the frame before it (None: detect)."""
    detect_every = max(int(detect_every), 1)
    if detect_every == 1 or detections is not None or batched_detection(manager):  # given boxes as they are
        return estimate_pose_batch(frames, manager, size, detections=detections, **options)
    results: list[PoseResult] = []
    for i, frame in enumerate(frames, start=int(frame_index)):
        last = results[-1] if results else previous
        followed = follow_people(last) if last is not None and i % detect_every else None
        [result] = estimate_pose_batch([frame], manager, size, **options,
                                       detections=None if followed is None else [followed])
        result.followed = followed is not None
        results.append(result)
    return results


def batched_detection(manager) -> bool:
    """Whether video detects every frame, all the frames of a batch in one detector call, instead of following
    people from frame to frame between detections (`detect_every`): on the device road, where following makes each
    frame wait for the one before (its keypoints copied back) and the batched detector costs little."""
    from .device_post import use_device_post

    return use_device_post(manager.device)


def forward_with_flip(loaded, pixel_values, flip_pairs=None, *, on_device: bool = False):
    """Float32 heatmaps of a batch of crops; with `flip_pairs`, averaged with those of the mirrored crops, which
    go through the model in the same forward (one batch of 2N: on a CPU one large batch beats two halves)."""
    import torch
    from transformers.models.sapiens2.modeling_sapiens2 import flip_back

    if flip_pairs is None:
        return forward(loaded, pixel_values, on_device=on_device)["heatmaps"].float()
    n = pixel_values.shape[0]
    both = forward(loaded, torch.cat([pixel_values, pixel_values.flip(-1)]), on_device=on_device)["heatmaps"]
    pairs = ledger.on_device(flip_pairs.to(both.device))  # there already (model_flip_pairs): no copy
    # flip_back mirrors the maps of the mirrored crops back and swaps left/right keypoints (the model's own step)
    return (both[:n].float() + flip_back(both[n:], pairs).float()) / 2


_FLIP_PAIRS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # model -> its pairs, on its device


def model_flip_pairs(model):
    """(P, 2) long tensor of left/right keypoint pairs: the checkpoint's config, else keypoints308.json; on the
    model's device, uploaded once per model from pinned memory (a copy from pageable memory waits for the device)."""
    import torch

    if model in _FLIP_PAIRS:
        return _FLIP_PAIRS[model]
    pairs = getattr(getattr(model, "config", None), "flip_pairs", None)
    if not pairs:
        pairs = flip_pairs_from_indices()
    parameter = next(iter(model.parameters()), None) if hasattr(model, "parameters") else None
    pairs = torch.as_tensor(np.asarray(pairs, dtype=np.int64).reshape(-1, 2))
    book = ledger.active()
    if book is not None and parameter is not None:  # the one upload, here, from pinned memory: no wait
        book.copy_in(pairs, "flip pairs", blocking=False)
    pairs = pairs if parameter is None else ledger.upload_once(pairs, parameter.device)
    _FLIP_PAIRS[model] = pairs
    return pairs


@contextmanager
def _timed(timings: dict, stage: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[stage] = timings.get(stage, 0.0) + time.perf_counter() - start

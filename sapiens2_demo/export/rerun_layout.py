"""What a video's Rerun recording (rerun_recording.py) is laid out on: its entity paths, the annotation contexts
(the 308-point skeleton, the 29 body parts), the viewer's default layout (blueprint), and whether the input video
can be the recording's video asset. Imports rerun: only called once rerun_recording.available() said yes."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..pose.joint_angles import GROUPS
from ..pose.meta import FACE_START, keypoint_meta

CAMERA = "world/camera"  # the pinhole; the video and the 2D overlay are its image
IMAGE = f"{CAMERA}/image"
MAPS = "world/maps"  # the dense maps, smaller than the video: a pinhole of their own
PEOPLE_2D, PEOPLE_3D = f"{IMAGE}/people", "world/people"
ANGLES = "angles"  # angles/<group>/<track id>/<left|right|value>
PERSON_CLASS = 0
SEG29 = Path(__file__).resolve().parent.parent / "data" / "seg29.json"
ASSET_SUFFIXES = {".mp4", ".mov", ".m4v"}  # ISO BMFF: what rerun's video asset reads
ASSET_CODECS = {"h264", "av1"}  # what Chromium's WebCodecs decodes in the web viewer (H.265 mostly not)
# The keypoints it holds, 2D and 3D: the body, the feet, the wrists, the arms' landmarks and the neck. The fingers'
# 40 and the face's 238 would be three quarters of the bytes: they are in pose_frames.jsonl (and the motion files).
FINGERS = np.r_[21:41, 42:62]  # the right hand's then the left's, each followed by its wrist (41, 62)
RECORDED_KEYPOINTS = np.setdiff1d(np.arange(FACE_START), FINGERS)


def skeleton_context():
    """Class 0, "person": the recorded keypoints' names and colours and the links between them."""
    import rerun as rr

    meta, recorded = keypoint_meta(), set(RECORDED_KEYPOINTS.tolist())
    keypoints = [rr.AnnotationInfo(id=k, label=meta["names"][k], color=tuple(meta["keypoint_colors"][k]))
                 for k in sorted(recorded)]
    links = [tuple(link) for link in meta["skeleton_links"] if set(link) <= recorded]
    # rerun draws every link in the class's colour (no colour per link): the body's blue of the 2D drawing
    person = rr.AnnotationInfo(id=PERSON_CLASS, label="person", color=tuple(meta["skeleton_link_colors"][4]))
    return rr.AnnotationContext([rr.ClassDescription(info=person,
                                                     keypoint_annotations=keypoints, keypoint_connections=links)])


def body_parts_context():
    import rerun as rr

    seg = json.loads(SEG29.read_text())
    return rr.AnnotationContext([rr.AnnotationInfo(id=i, label=name, color=tuple(colour))
                                 for i, (name, colour) in enumerate(zip(seg["classes"], seg["palette_rgb"]))])


def angle_path(group: str, track_id: int, side: str | None) -> str:
    return f"{ANGLES}/{group}/{track_id}/{side or 'value'}"


def blueprint(dense: bool):
    """The video with its 2D overlay beside the 3D view (and the dense maps when there are), the angle plots below:
    a tab per joint group, the root's speed last."""
    import rerun.blueprint as rrb

    top = [rrb.Spatial2DView(origin=CAMERA, name="Video"), rrb.Spatial3DView(origin="world", name="3D")]
    if dense:
        top.append(rrb.Spatial2DView(origin=MAPS, name="Maps"))
    plots = [rrb.TimeSeriesView(origin=f"{ANGLES}/{group}", name=f"{label} (deg)") for group, label in GROUPS.items()]
    plots.append(rrb.TimeSeriesView(origin=f"{ANGLES}/speed", name="Root speed (m/s)"))
    return rrb.Blueprint(rrb.Vertical(rrb.Horizontal(*top), rrb.Tabs(*plots), row_shares=[3, 2]),
                         collapse_panels=True)


def asset_refusal(info, frame_hw: tuple[int, int]) -> str | None:
    """Why the input cannot be the video asset (then each frame is logged as a JPEG), or None when it can: an MP4
    family file in a codec the web viewer decodes, stored upright (the asset ignores rotation), in the processed
    frames' shape (downscaled frames are fine: the overlay is scaled to the video)."""
    if Path(info.path).suffix.lower() not in ASSET_SUFFIXES:
        return f"a {Path(info.path).suffix or 'suffix-less'} file, not MP4"
    if info.video_codec not in ASSET_CODECS:
        return f"{info.video_codec} video, which the web viewer may not decode"
    if info.rotation:
        return "a rotated video"
    h, w = frame_hw
    if abs(info.width / info.height - w / h) > 0.01:
        return "frames cut to another shape"
    return None


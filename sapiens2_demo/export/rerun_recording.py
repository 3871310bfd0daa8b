"""A video job's Rerun recording, `recording.rrd`: the video, its 2D overlay, the 3D motion, the joint angles and
the dense maps on one timeline ("time", seconds; "frame", the source frame index), for Rerun's viewer (the Video
tab embeds it; `rerun recording.rrd` opens it on a desktop).

One explicit `rr.RecordingStream` per job (never rerun's global one: a server runs several visitors' jobs at once),
saved straight to disk as it is logged. Entities (rerun_layout.py names them):
- world/camera/image: the input video as a video asset (its bytes once) with a frame reference per processed frame,
  or, for a file the web viewer cannot decode (rerun_layout.asset_refusal), each processed frame as a JPEG;
- .../image/people/<track id>/keypoints and /box: the recorded keypoints (rerun_layout.RECORDED_KEYPOINTS: body,
  feet, wrists) above the drawing threshold (the skeleton's names, links and colours from the annotation context
  at /) and the box with its id;
- world/people/<track id>/skeleton: the fitted 3D motion's recorded keypoints (pose with 3D motion), in the world
  frame the feet give (pose/world.py: Y up, the floor at Y = 0, the camera placed in it) or, where no floor was
  found, the camera's frame (x right, y down, z forward); the pinhole world/camera's focal length is the lift's;
- angles/<group>/<track id>/<side>: pose/joint_angles.py's series, also written as joint_angles_<id>.csv / .png;
Positions are stored on a power-of-two grid (PIXEL_STEP, METRE_STEP) and angles to the CSV's 0.01: the file's LZ4
compresses numbers whose low bits are zero, which the raw float32 of a model's output never are.
- world/maps/body_parts, depth, normals: the dense tasks' maps, DENSE_PER_SECOND a second, DENSE_SIDE px at most.
"""

from __future__ import annotations

import importlib.util
import os
import uuid
from pathlib import Path

import numpy as np

from ..results import NormalsResult, PointmapResult, PoseResult, SegmentationResult
from ..util import partial_path
from . import rerun_layout as layout

DENSE_PER_SECOND = 2.0  # dense maps a second of video: a 1280 x 720 map is ~1 MB uncompressed
DENSE_SIDE = 320  # px, their longest side
JPEG_QUALITY = 80  # frames logged as images (a video the viewer cannot decode)
PIXEL_STEP = 1 / 4  # px: 2D positions and boxes on this grid (the heatmaps' own step is 4 px or more)
METRE_STEP = 1 / 256  # m: 3D positions on this grid (~4 mm, under a monocular lift's own error)
ANGLE_DECIMALS = 2  # as joint_angles_<id>.csv writes them
OFF_NOTE = "Rerun recording: off (rerun-sdk is not installed; `pip install rerun-sdk==0.39.0` turns it on)."


def available() -> bool:
    return importlib.util.find_spec("rerun") is not None


def _focal_estimate(keypoints: np.ndarray, points: np.ndarray, available_: np.ndarray, hw) -> float | None:
    """The pinhole focal length (px) that best maps lifted camera-frame points onto their 2D keypoints."""
    ok = np.asarray(available_, bool) & np.isfinite(points).all(-1) & (points[..., 2] > 0.05)
    if ok.sum() < 6:
        return None
    ray = points[ok][:, :2] / points[ok][:, 2:3]
    offset = keypoints[ok] - np.array([hw[1] / 2.0, hw[0] / 2.0])
    denominator = float((ray * ray).sum())
    return float((offset * ray).sum() / denominator) if denominator > 0 else None


def _on_grid(values: np.ndarray, step: float) -> np.ndarray:
    return (np.round(np.asarray(values, np.float64) / step) * step).astype(np.float32)


def _shrunk(array: np.ndarray, side: int) -> np.ndarray:
    """Every k-th pixel so the longest side is at most `side` (nearest: labels stay labels)."""
    step = max(1, int(np.ceil(max(array.shape[:2]) / side)))
    return array[::step, ::step]


class VideoRecording:
    """`add(index, time, frame, results)` per processed frame ({task: its result}; read by the results' types),
    then `close(motion)` (the pose's MotionVideoExport after its close, or None) -> the files written, or
    `abort()`."""

    def __init__(self, folder: Path, *, video_info, fps: float, dense: bool, keypoint_threshold: float = 0.3):
        import rerun as rr

        self.rr, self.folder, self.info, self.fps = rr, Path(folder), video_info, float(fps)
        self.path = self.folder / "recording.rrd"
        self.keypoint_threshold = keypoint_threshold
        self.notes: list[str] = []
        self.rec = rr.RecordingStream("sapiens2_demo", recording_id=uuid.uuid4())
        self.rec.set_log_time_enabled(False)  # the video's own timelines only: the viewer opens on "time"
        self.rec.set_log_tick_enabled(False)
        self.rec.save(partial_path(self.path), default_blueprint=layout.blueprint(dense))
        self.rec.log("/", layout.skeleton_context(), static=True)
        self.rec.log("world", rr.ViewCoordinates.RDF, static=True)
        self.rec.log(f"{layout.MAPS}/body_parts", layout.body_parts_context(), static=True)
        self._frames: list[tuple[int, float]] = []  # (source index, time) per processed frame
        self._shown: set[str] = set()  # 2D people on the frame before (cleared when they leave)
        self._focals: list[float] = []
        self._video_hw: tuple[int, int] | None = None  # the logged video's pixel size
        self._scale = 1.0  # processed-frame pixels -> video pixels
        self._next_dense = 0.0
        self._written: list[Path] = []

    def add(self, index: int, time: float, frame: np.ndarray, results: dict) -> None:
        rr = self.rr
        if self._video_hw is None:
            self._start_video(frame.shape[:2])
        self._frames.append((int(index), float(time)))
        self.rec.set_time("frame", sequence=int(index))
        self.rec.set_time("time", duration=float(time))
        if self._scale == 0:  # frames as images
            self.rec.log(layout.IMAGE, rr.Image(frame).compress(jpeg_quality=JPEG_QUALITY))
        pose, *maps = (next((r for r in results.values() if isinstance(r, kind)), None)
                       for kind in (PoseResult, SegmentationResult, PointmapResult, NormalsResult))
        if pose is not None:
            self._log_people(pose)
        if time + 1e-9 >= self._next_dense and any(m is not None for m in maps):
            self._next_dense = time + 1.0 / DENSE_PER_SECOND
            self._log_maps(*maps)

    def _start_video(self, frame_hw) -> None:
        rr = self.rr
        why = layout.asset_refusal(self.info, frame_hw)
        if why is None:
            asset = rr.AssetVideo(path=self.info.path)
            self.rec.log(layout.IMAGE, asset, static=True)
            self._timestamps = asset.read_frame_timestamps_nanos()
            self._video_hw, self._scale = (self.info.height, self.info.width), self.info.width / frame_hw[1]
        else:
            self.notes.append(f"Rerun recording: the frames are JPEG images ({why}).")
            self._video_hw, self._scale = tuple(frame_hw), 0.0

    def _log_people(self, pose) -> None:
        rr = self.rr
        scale = self._scale or 1.0
        ids = pose.track_ids if pose.track_ids is not None else np.full(pose.num_people, -1)
        shown = set()
        for row, track_id in enumerate(np.asarray(ids).tolist()):
            path = f"{layout.PEOPLE_2D}/{track_id if track_id >= 0 else f'untracked_{row}'}"
            recorded = layout.RECORDED_KEYPOINTS
            sure = recorded[pose.keypoint_scores[row][recorded] >= self.keypoint_threshold]
            positions = _on_grid(pose.keypoints[row][sure] * scale, PIXEL_STEP)
            # no label on each point: 30 names over one small body hid it (a hover still names the keypoint)
            self.rec.log(f"{path}/keypoints", rr.Points2D(positions, keypoint_ids=sure, show_labels=False,
                                                          class_ids=layout.PERSON_CLASS, radii=-2.0))
            label = f"id {track_id}" if track_id >= 0 else "not tracked yet"
            self.rec.log(f"{path}/box", rr.Boxes2D(array=_on_grid(pose.boxes[row:row + 1] * scale, PIXEL_STEP),
                                                   array_format=rr.Box2DFormat.XYXY, labels=[label]))
            shown.add(path)
            lifted = getattr(pose, "lifted", None)
            if lifted is not None and len(self._focals) < 500 and lifted.num_people == pose.num_people:
                focal = _focal_estimate(pose.keypoints[row], lifted.points[row], lifted.available[row],
                                        pose.image_size)
                if focal is not None and focal > 0:
                    self._focals.append(focal * scale)
        for gone in self._shown - shown:
            self.rec.log(gone, rr.Clear(recursive=True))
        self._shown = shown

    def _log_maps(self, segment, pointmap, normals) -> None:
        rr = self.rr
        from ..render.normals import normals_to_rgb

        some = next(r for r in (segment, pointmap, normals) if r is not None)
        full_hw = (some.labels if some is segment else some.normals if some is normals else self._depth(some)).shape
        if segment is not None:
            self.rec.log(f"{layout.MAPS}/body_parts", rr.SegmentationImage(_shrunk(segment.labels, DENSE_SIDE)))
        if normals is not None:
            picture = normals_to_rgb(normals.normals)
            if normals.mask is not None:
                picture = np.where(normals.mask[..., None], picture, 0)
            self.rec.log(f"{layout.MAPS}/normals", rr.Image(_shrunk(picture, DENSE_SIDE)))
        if pointmap is not None:
            depth = _shrunk(self._depth(pointmap), DENSE_SIDE)
            self.rec.log(f"{layout.MAPS}/depth", rr.DepthImage(depth.astype(np.float32), meter=1.0))
        step = full_hw[0] / _shrunk(np.empty(full_hw[:2], bool), DENSE_SIDE).shape[0]
        focal = self._map_focal(pointmap, full_hw) if pointmap is not None else None
        if focal is not None:
            small = _shrunk(np.empty(full_hw[:2], bool), DENSE_SIDE).shape
            self.rec.log(layout.MAPS, rr.Pinhole(focal_length=focal / step, width=small[1], height=small[0]))

    @staticmethod
    def _depth(pointmap) -> np.ndarray:
        if pointmap.points is not None:
            depth = np.nan_to_num(pointmap.points[..., 2], nan=0.0)
        else:
            depth = pointmap.depth_mm.astype(np.float32) / 1000.0
        return depth if pointmap.mask is None else np.where(pointmap.mask, depth, 0.0)

    @staticmethod
    def _map_focal(pointmap, hw) -> float | None:
        if pointmap.points is None:
            return None
        rows, cols = np.mgrid[0:hw[0]:8, 0:hw[1]:8]
        points = pointmap.points[::8, ::8]
        pixels = np.stack([cols, rows], -1).astype(np.float64)
        ok = np.isfinite(points).all(-1) if pointmap.mask is None else pointmap.mask[::8, ::8]
        return _focal_estimate(pixels, points, ok, hw)

    def close(self, motion=None) -> list[Path]:
        """The 3D motion and the joint angles (from `motion`, a closed MotionVideoExport), the pinhole; the file
        renamed into place. Returns recording.rrd and each person's joint_angles_<id>.csv and .png."""
        rr = self.rr
        if self._video_hw is not None:
            if self._scale:
                self._send_frame_references()
            h, w = self._video_hw
            focal = float(np.median(self._focals)) if self._focals else None
            if focal is not None:
                self.rec.log(layout.CAMERA, rr.Pinhole(focal_length=focal, width=w, height=h), static=True)
        if motion is not None:
            self._log_motion(motion)
        self.rec.flush()
        self.rec.disconnect()
        os.replace(partial_path(self.path), self.path)
        return [self.path] + self._written

    def _send_frame_references(self) -> None:
        rr = self.rr
        frames = [(i, t) for i, t in self._frames if i < len(self._timestamps)]
        if not frames:
            return
        indices, times = map(np.asarray, zip(*frames))
        self.rec.send_columns(layout.IMAGE, indexes=[rr.TimeColumn("time", duration=times),
                                                     rr.TimeColumn("frame", sequence=indices)],
                              columns=rr.VideoFrameReference.columns_nanos(self._timestamps[indices]))

    def _log_motion(self, motion) -> None:
        from ..pose.joint_angles import CAMERA_UP, joint_angles
        from .joint_angles_files import write_angles_csv, write_angles_plot

        rr = self.rr
        tracks, world = getattr(motion, "fitted", []), getattr(motion, "world", None)
        frames = self._frames[:len(motion.recorder.times)]
        indices = np.array([i for i, _ in frames])
        times = np.array([t for _, t in frames], np.float64)
        if world is not None:  # the floor's frame: Y up, the floor at Y = 0 (the 3D view's grid), the camera placed
            self.rec.log("world", rr.ViewCoordinates.RIGHT_HAND_Y_UP, static=True)
            turning = getattr(world, "turns", None) is not None and len(frames)
            for camera in (layout.CAMERA, layout.MAPS):
                if not turning:
                    self.rec.log(camera, rr.Transform3D(translation=world.camera_position, mat3x3=world.rotation),
                                 static=True)
                    continue
                turns = world.camera_rotations(len(frames))  # a turning camera: each frame's rotation
                self.rec.send_columns(camera, indexes=[rr.TimeColumn("time", duration=times),
                                                       rr.TimeColumn("frame", sequence=indices)],
                                      columns=rr.Transform3D.columns(
                                          translation=np.repeat(world.camera_position[None], len(turns), 0),
                                          mat3x3=turns))
        place = world.to_world if world is not None else np.asarray
        for track in tracks:
            self._send_skeleton(track, place, times[track.present[: len(frames)]],
                                indices[track.present[: len(frames)]])
            up = world.up if world is not None else CAMERA_UP  # gravity's, else the camera's (camera frame)
            angles = joint_angles(track.points[: len(frames)], times, up=up)
            angles = {name: np.where(track.present[: len(frames)], values, np.nan) for name, values in angles.items()}
            self._send_angles(track.track_id, angles, times)
            self._written.append(write_angles_csv(angles, times, self.folder / f"joint_angles_{track.track_id}.csv"))
            self._written.append(write_angles_plot(angles, times, self.folder / f"joint_angles_{track.track_id}.png",
                                                   f"Joint angles, person {track.track_id}"))

    def _send_skeleton(self, track, place, times: np.ndarray, indices: np.ndarray) -> None:
        """The fitted keypoints on the frames the person is tracked, as columns: the ids the fit placed (the same on
        every frame: it fills the whole track) logged once, static; a frame away from the track clears them."""
        rr = self.rr
        path = f"{layout.PEOPLE_3D}/{track.track_id}/skeleton"
        points = track.points[: len(self._frames)][track.present[: len(self._frames)]]
        recorded = layout.RECORDED_KEYPOINTS
        placed = recorded[np.isfinite(points[:, recorded]).all(-1).all(0)]
        if not len(placed) or not len(times):
            return
        self.rec.log(path, rr.Points3D.from_fields(keypoint_ids=placed, class_ids=layout.PERSON_CLASS, radii=-2.0,
                                                   show_labels=False), static=True)
        positions = _on_grid(place(points[:, placed].reshape(-1, 3)), METRE_STEP)
        self.rec.send_columns(path, indexes=[rr.TimeColumn("time", duration=times),
                                             rr.TimeColumn("frame", sequence=indices)],
                              columns=rr.Points3D.columns(positions=positions).partition([len(placed)] * len(times)))
        present = track.present[: len(self._frames)]
        for (index, time), here, was in zip(self._frames[1:], present[1:], present[:-1]):
            if was and not here:  # the frame after a stretch the person was tracked: no skeleton there
                self.rec.set_time("frame", sequence=int(index))
                self.rec.set_time("time", duration=float(time))
                self.rec.log(path, rr.Points3D.from_fields(positions=np.zeros((0, 3), np.float32)))

    def _send_angles(self, track_id: int, angles: dict, times: np.ndarray) -> None:
        rr = self.rr
        for name, values in angles.items():
            side, _, rest = name.partition("_")
            group, side = (rest.split("_")[0], side) if side in ("left", "right") else (
                "trunk" if name.startswith("trunk") else "speed", None)
            known = np.isfinite(values)
            if not known.any():
                continue
            self.rec.send_columns(layout.angle_path(group, track_id, side),
                                  indexes=[rr.TimeColumn("time", duration=times[known])],  # "time" only: smaller
                                  columns=rr.Scalars.columns(scalars=np.round(values[known], ANGLE_DECIMALS)))

    def abort(self) -> None:
        try:
            self.rec.disconnect()
        finally:
            partial_path(self.path).unlink(missing_ok=True)
            for path in self._written:
                path.unlink(missing_ok=True)

"""A video's motion capture downloads (pose with "3D motion"): written frame by frame, finished at the end.

- pose_3d.jsonl: one JSON line per processed frame: `frame`, `time` (s), `camera` ({`rotation` (3 x 3, camera
  frame to world), `position` (metres, world)}, null where no floor was found), `people`: [{`track_id` (-1 = not
  tracked yet), `keypoints` (308 x [x, y, z] metres, camera frame, smoothed; null where never lifted), `scores`
  (308), `measured` (308 x 0/1: 1 = lifted in this frame, 0 = held from earlier frames, or null), `contacts`
  ([left, right] 0/1: the foot on the floor, from the clip's fit; null where not fitted or no floor)}];
- motion_<track id>.bvh: the person's skeleton and its rotations, one frame per processed frame (export/bvh.py);
- motion.glb: every person's skeleton with one animation each, the floor and the camera (export/motion_gltf.py).
The BVH and motion.glb are in the world frame the feet and the pointmap's floor beside them give (pose/world.py,
pose/floor_pixels.py: Y up, the floor at Y = 0), or in the camera's frame turned Y up where no floor was found; the
notes say which. The JSON lines are written frame by frame and their `camera` and `contacts` filled in at the end,
once the clip's fit has found them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..pose.camera_rotation import CameraRotation, RotationTracker, describe
from ..pose.motion import MIN_TRACK_FRAMES, MotionRecorder
from ..pose.world import find_world
from ..util import atomic_write
from .bvh import write_bvh
from .motion_gltf import write_motion_glb
from .video import JsonLinesWriter

DECIMALS = 5


def _values(array: np.ndarray, decimals: int) -> list:
    """Rounded floats as nested lists, None where not finite (JSON has no NaN)."""
    values = np.round(np.asarray(array, np.float64), decimals).astype(object)
    values[~np.isfinite(np.asarray(array, np.float64))] = None
    return values.tolist()


def person_document(person: dict) -> dict:
    points = np.asarray(person["points"], np.float64)
    return {"track_id": person["track_id"], "keypoints": _values(points, DECIMALS),
            "scores": _values(person["scores"], 4), "measured": np.asarray(person["measured"], np.int8).tolist()}


def chosen_people(text) -> frozenset[int] | None:
    """The track ids in a "1, 3" list (spaces or commas); None for an empty one (everyone). ValueError, in a
    sentence, for anything else."""
    words = str(text or "").replace(",", " ").split()
    if not words:
        return None
    if not all(word.isdigit() for word in words):
        raise ValueError(f"People to export must be track ids (the numbers drawn on the video) such as '1, 3', "
                         f"got {text!r}.")
    return frozenset(int(word) for word in words)


class MotionVideoExport:
    """add(index, time, pose_result) per processed frame (a PoseResult with `lifted` and `track_ids`), then close()
    -> the files written, or abort(). `notes` says what was written, for whom, and what was filled.
    `motion_people` ("1, 3"; empty: everyone) limits the BVH files and motion.glb to those track ids.
    `fit_start` (the harness's oracle: see MotionRecorder.tracks) starts each person's fit where it says."""

    def __init__(self, folder: Path, *, fps: float, smoothing: bool = True, min_cutoff: float | None = None,
                 beta: float | None = None, tracking: bool = True, motion_people: str = "", fit_start=None, **_):
        self.folder, self.fps, self.tracking = Path(folder), float(fps), tracking
        self.people = chosen_people(motion_people)
        self.fit_start = fit_start
        self.lines = JsonLinesWriter(self.folder / "pose_3d.jsonl")
        self.recorder = MotionRecorder(smoothing=smoothing, min_cutoff=min_cutoff, beta=beta)
        self.notes: list[str] = []
        self._written: list[Path] = []
        self._unlifted = 0  # frames with people but no lift at all (the pointmap model not run)
        self.fitted: list = []  # after close: each exported person's TrackMotion (the Rerun recording reads them)
        self.world = None  # after close: the World the feet gave (pose/world.py), or None
        self.turning = RotationTracker()  # the camera's own turning: the segmentation's background, else outside boxes
        self._focals: list[float] = []  # each frame's focal length (pixels) from its lifted keypoints
        self._floor: dict[int, np.ndarray] = {}  # frame number -> its floor pixels (pose/floor_pixels.py)

    @property
    def path(self) -> Path:
        return self.lines.path

    def add(self, index: int, time: float, frame, result) -> None:
        lifted = getattr(result, "lifted", None)
        if lifted is None and result.num_people:
            self._unlifted += 1
        keypoints = result.keypoints if lifted is not None and lifted.num_people == result.num_people else None
        if getattr(lifted, "floor", None) is not None:
            self._floor[len(self.recorder.times)] = np.asarray(lifted.floor, np.float32)
        people = self.recorder.add(time, lifted, keypoints)
        if frame is not None:
            self.turning.add(frame, background=getattr(lifted, "background", None), boxes=result.boxes)
            focal = getattr(lifted, "focal", None)
            if focal is not None:
                self._focals.append(focal)
        self.lines.add({"frame": int(index), "time": round(float(time), 6),
                        "people": [person_document(p) for p in people]})

    def close(self) -> list[Path]:
        self.lines.close()
        files = [self.lines.path]
        solved = []
        tracks = self.recorder.tracks(self.fit_start)
        turn = self._camera_turn()
        turns = turn.to_first if turn is not None and turn.turned else None  # (T, 3, 3), or None: a still camera
        if turns is not None:
            tracks = [replace(t, points=np.einsum("tij,tkj->tki", turns, t.points).astype(np.float32))
                      for t in tracks]  # each frame's points in the first frame's camera: the camera's turn taken out
        world, why = find_world([t.points for t in tracks], self.fps, [t.present for t in tracks],
                                self._floor_pixels(turns)) if tracks else (None, "")
        if world is not None:  # the second pass: the feet on that floor, held still in the world where planted
            tracks = self.recorder.on_floor(tracks, world, turns)
        if world is not None and turn is not None and turn.to_first is not None:
            world = replace(world, turns=turn.to_first if turn.turned else None, turning="still" if turn.still else
                            describe(world.rotation @ turn.to_first, np.array([0.0, 1.0, 0.0])))
        elif turn is not None and (world is None or turn.to_first is None):
            self.notes.append(f"3D motion: {turn.note}" + (" (taken out of the files)." if turn.turned else "."))
        self._fill_in(world, tracks)
        self.world = world
        if self.people is not None:
            found = [t.track_id for t in tracks]
            missing = sorted(self.people - set(found))
            tracks = [t for t in tracks if t.track_id in self.people]
            self.notes.append(f"3D motion: only the people asked for ({', '.join(map(str, sorted(self.people)))}) of "
                              f"{', '.join(map(str, found)) or 'nobody'}"
                              + (f"; no person {', '.join(map(str, missing))} in this clip." if missing else "."))
        self.fitted = tracks
        for track in tracks:
            seen = np.flatnonzero(track.present)
            self.notes.append(f"3D motion: id {track.track_id}: motion_{track.track_id}.bvh (and track_"
                              f"{track.track_id} in motion.glb), seen on {len(seen)} processed frames "
                              f"({seen[0]}-{seen[-1]}).")
            try:
                solved.append((track.track_id, track.solve(world)))
            except ValueError as error:
                self.notes.append(f"3D motion: no skeleton for person {track.track_id}: {error}.")
                continue
            if track.failed:
                self.notes.append(f"3D motion: person {track.track_id}'s lift failed on {track.failed} of "
                                  f"{int(track.present.sum())} frames; those frames are filled by the clip's fit "
                                  '(and have "measured" 0 in pose_3d.jsonl).')
        for track_id, motion in solved:
            self._written.append(write_bvh(motion, self.folder, f"motion_{track_id}.bvh", 1.0 / self.fps))
            missing = [name for name, seen in zip(motion.names, motion.seen) if not seen]
            if missing:
                self.notes.append(f"3D motion: person {track_id}: {', '.join(missing)} never placed in 3D "
                                  "(rest pose, default bone lengths).")
        if solved:
            self._written.append(write_motion_glb(solved, self.recorder.times, self.folder, world))
            people = "1 person" if len(solved) == 1 else f"{len(solved)} people"
            frame = "the world's frame: the floor at Y = 0" if world is not None else "positions in the camera's frame"
            self.notes.insert(0, f"3D motion: {people} in {len(self.recorder.times)} frames at "
                                 f"{self.fps:.2f} frames/s: motion_<id>.bvh each and motion.glb (metres, Y up; "
                                 f"{frame}).")
            self.notes.insert(1, world.note() if world is not None else f"3D motion: {why}.")
        else:
            why = ("tracking is off" if not self.tracking else
                   f"nobody was tracked on at least {MIN_TRACK_FRAMES} frames with hips and neck placed in 3D")
            self.notes.insert(0, f"3D motion: no BVH or motion.glb written: {why} (pose_3d.jsonl has every frame).")
        if self._unlifted:
            self.notes.append(f"3D motion: {self._unlifted} frames with people were not lifted.")
        return files + self._written

    def _fill_in(self, world, tracks) -> None:
        """pose_3d.jsonl's `camera` and `contacts`, once the clip's fit has found them: the file read back and
        written again (atomically, line by line)."""
        contacts = {}
        if world is not None:
            for track in tracks:  # the fit's: the spans its second pass held on the floor
                found = world.contacts(track.points, self.fps) if track.contacts is None else track.contacts
                contacts[track.track_id] = np.where(track.present[:, None], found, False).astype(int).tolist()
        position = None if world is None else _values(world.camera_position, DECIMALS)
        rotations = None if world is None else world.camera_rotations(len(self.recorder.times))
        path = self.lines.path
        with open(path, encoding="utf-8") as lines, atomic_write(path) as partial, \
                open(partial, "w", encoding="utf-8") as out:
            for number, line in enumerate(lines):
                document = json.loads(line)
                camera = None if world is None else {
                    "rotation": _values(rotations[min(number, len(rotations) - 1)], DECIMALS), "position": position}
                document = {"frame": document["frame"], "time": document["time"], "camera": camera,
                            "people": [{**person, "contacts": contacts[person["track_id"]][number]
                                        if person["track_id"] in contacts else None}
                                       for person in document["people"]]}
                out.write(json.dumps(document, allow_nan=False, separators=(",", ":")) + "\n")

    def _floor_pixels(self, turns: np.ndarray | None) -> np.ndarray | None:
        """Every frame's floor pixels in the first frame's camera (`turns`, a turning camera's, applied), or None."""
        if not self._floor:
            return None
        return np.concatenate([pixels if turns is None else pixels @ turns[frame].T
                               for frame, pixels in self._floor.items()])  # (added in frame order)

    def _camera_turn(self) -> CameraRotation | None:
        """The camera's rotation per frame (None where not every frame came with its picture, or no focal length:
        nobody lifted)."""
        if len(self.turning.links) != len(self.recorder.times) or not self._focals:
            return None
        return self.turning.solve(float(np.median(self._focals)))

    def abort(self) -> None:
        self.lines.abort()
        for path in self._written:
            path.unlink(missing_ok=True)


class PoseWithMotion:
    """The pose video downloads and, beside them, the motion capture's (one add / close / abort for both)."""

    def __init__(self, pose, motion: MotionVideoExport):
        self.pose, self.motion = pose, motion

    @property
    def notes(self) -> list[str]:
        return self.motion.notes

    def add(self, index: int, time: float, frame, result) -> None:
        self.pose.add(index, time, frame, result)
        self.motion.add(index, time, frame, result)

    def close(self) -> list[Path]:
        return self.pose.close() + self.motion.close()

    def abort(self) -> None:
        self.pose.abort()
        self.motion.abort()


def pose_video_export(folder, *, motion_3d: bool = False, **options):
    """The pose task's video downloads: the 2D JSON lines, and with `motion_3d` the mocap files too."""
    from .video import PoseVideoExport

    pose = PoseVideoExport(folder, **options)
    return PoseWithMotion(pose, MotionVideoExport(folder, **options)) if motion_3d else pose

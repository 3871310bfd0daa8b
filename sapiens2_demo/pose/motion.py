"""A video's 3D motion per tracked person: each frame's lifted keypoints smoothed over time in 3D, gaps filled,
then the skeleton solved (skeleton3d.py) for the mocap files.

`MotionRecorder.add(time, lifted)` takes every processed frame in order (a frame with nobody too: the files
keep one entry per frame) and returns that frame's smoothed people for `pose_3d.jsonl`; `tracks()` at the end
gives each track's keypoints over the whole video. Smoothing is the video's One Euro filter (smoothing.py)
per track, with the same min_cutoff and beta: beta is per pixel/s in the image, so positions are filtered in
pixel-equivalent units (metres times the person's pixels per metre, measured on their first lifted frame).
A keypoint the lift could not place in a frame is held by the filter in the JSON lines (marked not measured)
and, for the skeleton, filled by linear interpolation between the frames that measured it (held before the
first and after the last). Frames before a person appears and after they leave hold their first/last pose.

With `guards` (the default) the skeleton is not fed the One Euro output (a causal filter lags a moving limb and
stretches its bones) but the raw lifted keypoints smoothed over the whole clip with zero lag, swapped left/right
frames exchanged back, outliers dropped and short holes filled by the fit (clip_smoothing.py; with `smoothing` off
the kept samples stay as lifted); longer holes are filled relative to the mid-hip point, and the solver turns the
joints they drive between the frames around them; fingers too noisy to give a direction are left at rest.
`guards=False` is the path before those guards (kept to measure them: tests/motion_truth.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .clip_smoothing import rigid_groups, smooth_clip
from .meta import keypoint_meta, name_index
from .skeleton3d import BODY_KEYPOINTS, CAMERA_TO_SKELETON, SolvedMotion, hand_keypoints, solve
from .smoothing import MAX_AGE_S, OneEuroFilter

DEFAULT_PIXELS_PER_METRE = 400.0  # when a person's scale cannot be measured (a person ~3 m from a 720p camera)
MIN_TRACK_FRAMES = 3  # shorter tracks (a tracker's passing guess) get no skeleton
HAND_MEASURED = 0.5  # a hand joins the skeleton when at least half its keypoint samples were lifted
DERIVED_PELVIS = (9, 10)  # left_hip, right_hip: the mid-hip point that unseen keypoints are held relative to
FINGER_KEYPOINTS = [k for side in ("left", "right") for k in hand_keypoints(side)[:-1]]  # not the wrists
FINGER_NOISE_M = 0.008  # finger keypoints noisier than this (median, metres) leave the fingers at rest
# keypoints that move as one rigid body (the feet, the head): fitted as one (clip_smoothing.rigid_groups)
RIGID_GROUPS = [[name_index()[f"{side}_{k}"] for k in ("ankle", "heel", "big_toe", "small_toe")]
                for side in ("left", "right")] + [
    [name_index()[k] for k in ("nose", "left_eye", "right_eye", "left_ear", "right_ear")]]


@dataclass
class _Track:
    first_seen: float
    scale: float  # pixels per metre
    filter: OneEuroFilter | None
    last_seen: float
    rows: dict = field(default_factory=dict)  # frame number -> (points (70, 3) NaN = not measured, scores (70,))


@dataclass
class TrackMotion:
    track_id: int
    points: np.ndarray  # (T, 70, 3) camera frame, smoothed, gaps filled; NaN = never measured
    measured: np.ndarray  # (T, 70) bool: lifted in that frame (not filled)
    present: np.ndarray  # (T,) bool: the person was tracked in that frame
    failed: int  # frames where the person was tracked but not one body keypoint was lifted
    noise: np.ndarray | None = None  # (70,) metres: each keypoint's noise about the clip's fit (guards only)
    known: np.ndarray | None = None  # (T, 70) bool: placed by the clip's fit, not interpolated (guards only)
    fps: float = 24.0  # the clip's frame rate

    def solve(self) -> SolvedMotion:
        """The skeleton in the Y-up frame; hands whose keypoints were lifted often enough (at rest when too noisy).
        ValueError when the hips or neck were never lifted."""
        during = self.measured[self.present]
        hands = tuple(side for side in ("left", "right")
                      if during.size and during[:, hand_keypoints(side)].mean() >= HAND_MEASURED)
        if self.noise is None:
            return solve(self.points @ CAMERA_TO_SKELETON.T, self.measured, hands)
        noisy = tuple(side for side in hands if not np.nanmedian(self.noise[hand_keypoints(side)]) <= FINGER_NOISE_M)
        return solve(self.points @ CAMERA_TO_SKELETON.T, self.measured, hands, rest_hands=noisy, guarded=True,
                     placed=self.known & self.present[:, None], fps=self.fps)


def _pixels_per_metre(keypoints_2d: np.ndarray, points: np.ndarray, available: np.ndarray) -> float | None:
    """The ratio of the spreads of a person's 2D keypoints and their lifted x, y (RMS about the mean)."""
    if keypoints_2d is None or available.sum() < 3:
        return None
    flat, lifted = np.asarray(keypoints_2d, np.float64)[available], np.asarray(points, np.float64)[available, :2]
    spread_2d = np.sqrt(((flat - flat.mean(0)) ** 2).sum(1).mean())
    spread_3d = np.sqrt(((lifted - lifted.mean(0)) ** 2).sum(1).mean())
    ratio = spread_2d / spread_3d if spread_3d > 1e-6 else np.nan
    return float(ratio) if np.isfinite(ratio) and ratio > 0 else None


def _interpolate(values: np.ndarray, rows: np.ndarray, have: np.ndarray, total: int) -> np.ndarray:
    """(F, 3) values on frames `rows` -> (total, 3): linear between the frames in `have`, held beyond them."""
    frames, picked = np.arange(total), values[np.searchsorted(rows, have)]
    return np.stack([np.interp(frames, have, picked[:, a]) for a in range(3)], axis=1)


def _fill(sampled: np.ndarray, rows: np.ndarray, measured: np.ndarray, total: int, relative: bool) -> np.ndarray:
    """(total, 70, 3): each keypoint interpolated over the frames that did not measure it. `relative`: every
    keypoint but the hips as an offset from the mid-hip point (filled first), so a limb out of view for a while
    moves with the body rather than staying where it was last seen."""
    points = np.full((total, BODY_KEYPOINTS, 3), np.nan)
    hips = list(DERIVED_PELVIS)
    for k in range(BODY_KEYPOINTS):
        have = rows[measured[rows, k]]
        if have.size:
            points[:, k] = _interpolate(sampled[:, k], rows, have, total)
    if not relative or not np.isfinite(points[:, hips]).all():
        return points
    for k, other in (hips, hips[::-1]):  # one hip out of view, the other seen: it keeps its place beside it
        mine, theirs = rows[measured[rows, k]], rows[measured[rows, other]]
        both = np.intersect1d(mine, theirs)
        alone = np.setdiff1d(theirs, mine)
        if both.size and alone.size:
            across = _interpolate(sampled[:, k] - sampled[:, other], rows, both, total)
            points[alone, k] = points[alone, other] + across[alone]
    pelvis = points[:, hips].mean(1)
    offsets = sampled - pelvis[rows][:, None]
    for k in range(BODY_KEYPOINTS):
        have = rows[measured[rows, k]]
        if have.size and k not in hips:
            points[:, k] = pelvis + _interpolate(offsets[:, k], rows, have, total)
    return points


def _on_rays(track: _Track, rows: np.ndarray, total: int, kept: np.ndarray, fitted: np.ndarray,
             supported: np.ndarray) -> np.ndarray | None:
    """(total, 70, 3) the keypoints hidden behind someone else (the lift read the cover's depth on their ray, see
    Pose3DResult.covered) placed on their ray at the depth the clip's fit puts them at (the frames
    around, relative to the hips); NaN elsewhere. None when nothing of this person was covered. The 2D
    pose model still places a hidden joint; only its depth is lost."""
    covered = np.full((total, BODY_KEYPOINTS, 3), np.nan)
    for r in rows:
        if track.rows[r][2] is not None:
            covered[r] = track.rows[r][2]
    hidden = np.isfinite(covered).all(-1) & ~kept
    hidden[:, FINGER_KEYPOINTS] = False  # a hidden hand's fingers: too small for a guessed depth to aim them
    if not hidden.any():
        return None
    known = np.zeros_like(kept)
    known[rows] = supported[rows]
    prior = _fill(np.where(known[rows, :, None], fitted[rows], np.nan), rows, known, total, relative=True)
    with np.errstate(all="ignore"):  # the ray scaled to the depth the fit puts it at (its sideways place is the ray's)
        placed = covered * (prior[..., 2] / covered[..., 2])[..., None]
    return np.where((hidden & np.isfinite(placed).all(-1))[..., None], placed, np.nan)


class MotionRecorder:
    def __init__(self, smoothing: bool = True, min_cutoff: float | None = None, beta: float | None = None,
                 guards: bool = True):
        self.options = {k: v for k, v in (("min_cutoff", min_cutoff), ("beta", beta)) if v is not None}
        self.smoothing, self.guards = smoothing, guards
        self.times: list[float] = []
        self._tracks: dict[int, _Track] = {}

    def add(self, time: float, lifted, keypoints_2d: np.ndarray | None = None) -> list[dict]:
        """One frame: `lifted` a Pose3DResult with track ids (None or empty: nobody); `keypoints_2d` (N, K, 2) the
        same people's image keypoints (their pixel scale). Returns per person {track_id, points (K, 3) smoothed,
        NaN where never measured, measured (K,) bool, scores (K,)}."""
        frame = len(self.times)
        self.times.append(float(time))
        people = []
        if lifted is None or lifted.num_people == 0:
            return people
        ids = lifted.track_ids if lifted.track_ids is not None else np.full(lifted.num_people, -1)
        for person, track_id in enumerate(np.asarray(ids, np.int64).tolist()):
            points = np.asarray(lifted.points[person], np.float64)
            available = np.asarray(lifted.available[person], bool) & np.isfinite(points).all(1)
            scores = np.asarray(lifted.scores[person], np.float32)
            smoothed = np.where(available[:, None], points, np.nan)
            if track_id >= 0:
                track = self._track(track_id, time, points, available,
                                    None if keypoints_2d is None else keypoints_2d[person])
                if track.filter is not None and available.any():
                    out = track.filter(points * track.scale, time, available[:, None]) / track.scale
                    ever = track.filter.seen.all(axis=1)
                    smoothed = np.where(ever[:, None], out, np.nan)
                source = points if self.guards else smoothed  # guards: the clip is smoothed at the end
                body = np.where(available[:BODY_KEYPOINTS, None], source[:BODY_KEYPOINTS], np.nan)
                covered = getattr(lifted, "covered", None)
                covered = None if covered is None else np.asarray(covered[person][:BODY_KEYPOINTS], np.float32)
                track.rows[frame] = (body.astype(np.float32), scores[:BODY_KEYPOINTS], covered)
                track.last_seen = float(time)
            people.append({"track_id": int(track_id), "points": smoothed, "measured": available, "scores": scores})
        return people

    def _track(self, track_id: int, time: float, points, available, keypoints_2d) -> _Track:
        track = self._tracks.get(track_id)
        if track is not None and time - track.last_seen > MAX_AGE_S and track.filter is not None:
            track.filter = OneEuroFilter(**self.options)  # back after a while: start the filter afresh
        if track is None:
            scale = _pixels_per_metre(keypoints_2d, points, available) or DEFAULT_PIXELS_PER_METRE
            track = self._tracks[track_id] = _Track(float(time), scale,
                                                    OneEuroFilter(**self.options) if self.smoothing else None,
                                                    float(time))
        return track

    def tracks(self) -> list[TrackMotion]:
        """Every track seen on at least MIN_TRACK_FRAMES frames, over the whole video (see the module docstring)."""
        total = len(self.times)
        found = []
        for track_id, track in sorted(self._tracks.items()):
            if len(track.rows) < MIN_TRACK_FRAMES:
                continue
            rows = np.asarray(sorted(track.rows))
            sampled = np.stack([track.rows[r][0] for r in rows]).astype(np.float64)  # (F, 70, 3)
            measured = np.zeros((total, BODY_KEYPOINTS), bool)
            measured[rows] = np.isfinite(sampled).all(axis=2)
            noise = known = None
            if self.guards:
                raw = np.full((total, BODY_KEYPOINTS, 3), np.nan)
                raw[rows] = sampled
                flip = np.asarray(keypoint_meta()["flip_indices"][:BODY_KEYPOINTS], np.int64)
                fitted, kept, noise, supported = smooth_clip(raw, measured, self._fps(), flip)
                on_rays = _on_rays(track, rows, total, kept, fitted, supported)
                if on_rays is not None:  # keypoints hidden behind someone, placed on their rays: fitted again
                    along = np.isfinite(on_rays).all(-1)
                    raw = np.where(along[..., None], on_rays, raw)
                    fitted, kept, noise, supported = smooth_clip(raw, measured | along, self._fps(), flip)
                    kept &= ~along  # kept for the fit, not measured: no bone length is read off a guessed depth
                if not self.smoothing:  # the faults still go (swaps exchanged, outliers filled), the noise stays
                    fitted = np.where(kept[..., None], raw, fitted)
                else:
                    fitted = rigid_groups(fitted, supported, RIGID_GROUPS)
                sampled = np.where(supported[rows, :, None], fitted[rows], np.nan)
                measured[rows] = kept[rows]
                known = np.zeros_like(measured)
                known[rows] = supported[rows]
            points = _fill(sampled, rows, known if self.guards else measured, total, relative=self.guards)
            present = np.zeros(total, bool)
            present[rows] = True
            failed = int((~measured[rows].any(axis=1)).sum())
            found.append(TrackMotion(track_id, points.astype(np.float32), measured, present, failed, noise, known,
                                     self._fps()))
        return found

    def _fps(self) -> float:
        steps = np.diff(self.times)
        steps = steps[steps > 0]
        return float(1.0 / np.median(steps)) if steps.size else 24.0

"""A video's 3D motion per tracked person: each frame's lifted keypoints smoothed over time for the JSON lines,
and, at the end, one fit of the person's skeleton over the whole clip (clip_fit.py) for the mocap files.

`MotionRecorder.add(time, lifted)` takes every processed frame in order (a frame with nobody too: the files
keep one entry per frame) and returns that frame's smoothed people for `pose_3d.jsonl`; `tracks()` at the end
fits each track over the whole video. The JSON lines' smoothing is the video's One Euro filter (smoothing.py) per
track, with the same min_cutoff and beta: beta is per pixel/s in the image, so positions are filtered in
pixel-equivalent units (metres times the person's pixels per metre, measured on their first lifted frame); a
keypoint the lift could not place in a frame is held by the filter there (marked not measured).
The skeleton is not fed the One Euro output (a causal filter lags a moving limb and stretches its bones) but the
raw lifted keypoints (and the rays of those hidden behind someone), fitted once from the person's first frame to
their last: the gaps between are filled by the fit's motion prior; frames before a person appears and after
they leave hold their first/last pose. Fingers whose 2D keypoints stray more than FINGER_NOISE_M from the fit
(too small in the image to give a direction) are left at rest.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from .clip_fit import fit_clip, fit_on_floor
from .skeleton3d import BODY_KEYPOINTS, CAMERA_TO_SKELETON, SolvedMotion, hand_keypoints, solve
from .smoothing import MAX_AGE_S, OneEuroFilter
from .world import World

DEFAULT_PIXELS_PER_METRE = 400.0  # when a person's scale cannot be measured (a person ~3 m from a 720p camera)
MIN_TRACK_FRAMES = 3  # shorter tracks (a tracker's passing guess) get no skeleton
HAND_MEASURED = 0.5  # a hand joins the skeleton when at least half its keypoint samples were lifted
FINGER_KEYPOINTS = [k for side in ("left", "right") for k in hand_keypoints(side)[:-1]]  # not the wrists
FINGER_NOISE_M = 0.008  # finger keypoints noisier than this (median, metres) leave the fingers at rest


@dataclass
class _Track:
    first_seen: float
    scale: float  # pixels per metre on the first frame
    focal: float  # pixels per unit of x/z (the scale times the person's depth)
    filter: OneEuroFilter | None
    last_seen: float
    rows: dict = field(default_factory=dict)  # frame number -> (points (70, 3) NaN = not lifted, scores, covered)


@dataclass
class TrackMotion:
    track_id: int
    points: np.ndarray  # (T, 70, 3) camera frame, the fitted skeleton's keypoints; NaN = never seen
    measured: np.ndarray  # (T, 70) bool: lifted in that frame
    present: np.ndarray  # (T,) bool: the person was tracked in that frame
    failed: int  # frames where the person was tracked but not one body keypoint was lifted
    noise: np.ndarray  # (70,) metres: each keypoint's median 2D distance from the fit, at its depth
    fps: float = 24.0  # the clip's frame rate
    contacts: np.ndarray | None = None  # (T, 2) bool: each foot (left, right) held on the floor by the fit; None: no floor

    def solve(self, world: World | None = None) -> SolvedMotion:
        """The skeleton in the world's frame (world.py), or the camera's turned Y up where no floor was found; hands
        whose keypoints were lifted often enough (at rest when too noisy). ValueError when the hips or neck were
        never lifted."""
        during = self.measured[self.present]
        hands = tuple(side for side in ("left", "right")
                      if during.size and during[:, hand_keypoints(side)].mean() >= HAND_MEASURED)
        finger_noise = {side: self.noise[hand_keypoints(side)] for side in hands}
        noisy = tuple(side for side, noise in finger_noise.items()
                      if not (np.isfinite(noise).any() and np.nanmedian(noise) <= FINGER_NOISE_M))
        points = self.points @ CAMERA_TO_SKELETON.T if world is None else world.to_world(self.points)
        return solve(points, None, hands, rest_hands=noisy)


def _pixels_per_metre(keypoints_2d: np.ndarray, points: np.ndarray, available: np.ndarray) -> float | None:
    """The ratio of the spreads of a person's 2D keypoints and their lifted x, y (RMS about the mean)."""
    if keypoints_2d is None or available.sum() < 3:
        return None
    flat, lifted = np.asarray(keypoints_2d, np.float64)[available], np.asarray(points, np.float64)[available, :2]
    spread_2d = np.sqrt(((flat - flat.mean(0)) ** 2).sum(1).mean())
    spread_3d = np.sqrt(((lifted - lifted.mean(0)) ** 2).sum(1).mean())
    ratio = spread_2d / spread_3d if spread_3d > 1e-6 else np.nan
    return float(ratio) if np.isfinite(ratio) and ratio > 0 else None


class MotionRecorder:
    def __init__(self, smoothing: bool = True, min_cutoff: float | None = None, beta: float | None = None):
        self.options = {k: v for k, v in (("min_cutoff", min_cutoff), ("beta", beta)) if v is not None}
        self.smoothing = smoothing
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
                body = np.where(available[:BODY_KEYPOINTS, None], points[:BODY_KEYPOINTS], np.nan)
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
            depth = np.median(points[available, 2]) if available.any() else 1.0
            track = self._tracks[track_id] = _Track(float(time), scale, scale * float(max(depth, 0.1)),
                                                    OneEuroFilter(**self.options) if self.smoothing else None,
                                                    float(time))
        return track

    def tracks(self, fit_start=None) -> list[TrackMotion]:
        """Every track seen on at least MIN_TRACK_FRAMES frames, fitted over the whole video (see the module
        docstring). A track whose hips or neck were never lifted is left out. `fit_start(track_id, first, last)`,
        where given, returns where that track's fit over frames first..last - 1 starts ((frames, 70, 3) camera
        frame, or None: from its lifted points): the harness's oracle, the fit started from the truth."""
        total = len(self.times)
        found = []
        for track_id, track in sorted(self._tracks.items()):
            if len(track.rows) < MIN_TRACK_FRAMES:
                continue
            first, last, points, available, rays, scores = self._inputs(track)
            measured = np.zeros((total, BODY_KEYPOINTS), bool)
            measured[first:last] = available
            present = np.zeros(total, bool)
            present[sorted(track.rows)] = True
            failed = int((~measured[present].any(axis=1)).sum())
            try:
                start = None if fit_start is None else fit_start(track_id, first, last)
                fitted, noise = fit_clip(points, available, rays, scores, track.focal, self._fps(), start=start)
            except ValueError:
                fitted, noise = np.full_like(points, np.nan), np.full(BODY_KEYPOINTS, np.nan)
            found.append(TrackMotion(track_id, self._whole(fitted, first, last), measured, present, failed, noise,
                                     self._fps()))
        return found

    def on_floor(self, tracks: list[TrackMotion], world: World, turns: np.ndarray | None = None
                 ) -> list[TrackMotion]:
        """Each fitted track fitted again on the world's floor (clip_fit.fit_on_floor: started from its first fit,
        no foot below the floor, a foot held still over each contact span the first fit shows, World.contacts);
        `contacts` (T, 2) is then the fit's: the spans it held. The tracks' points are in the first frame's camera;
        `turns` (T, 3, 3), a turning camera's (frame t's camera -> the first's), where the observations are each
        frame's own."""
        out = []
        for motion in tracks:
            first, last, points, available, rays, scores = self._inputs(self._tracks[motion.track_id])
            fitted = motion.points[first:last].astype(np.float64)
            contacts = world.contacts(fitted, motion.fps) & motion.present[first:last, None] & world.holds_feet
            if not np.isfinite(fitted[:, :BODY_KEYPOINTS]).any():  # the first fit failed: nothing to start from
                out.append(motion)
                continue
            turn = None if turns is None else np.asarray(turns[first:last], np.float64)
            start = fitted if turn is None else np.einsum("tji,tkj->tki", turn, fitted)  # into each frame's camera
            try:
                refitted, noise = fit_on_floor(points, available, rays, scores, self._tracks[motion.track_id].focal,
                                               motion.fps, start, (world.up, world.height), contacts, turn)
                if turn is not None:
                    refitted = np.einsum("tij,tkj->tki", turn, refitted)  # back into the first frame's camera
            except ValueError:
                refitted, noise = fitted, motion.noise
            held = np.zeros((len(motion.present), 2), bool)
            held[first:last] = contacts
            out.append(replace(motion, points=self._whole(refitted, first, last), noise=noise, contacts=held))
        return out

    def _inputs(self, track: _Track) -> tuple:
        """(first, last + 1, points, available, rays, scores) of a track's fit: its frames from the first it was
        seen on to the last, NaN (not available) where it was not lifted."""
        rows = np.asarray(sorted(track.rows))
        first, last = int(rows[0]), int(rows[-1]) + 1
        span = last - first
        points = np.full((span, BODY_KEYPOINTS, 3), np.nan)
        rays = np.full_like(points, np.nan)
        scores = np.zeros((span, BODY_KEYPOINTS))
        for r in rows:
            lifted, score, covered = track.rows[r]
            points[r - first], scores[r - first] = lifted, score
            if covered is not None:
                rays[r - first] = covered
        return first, last, points, np.isfinite(points).all(-1), rays, scores

    def _whole(self, fitted: np.ndarray, first: int, last: int) -> np.ndarray:
        """A fit over frames first..last - 1 spread over the whole video: its first and last pose held."""
        total = len(self.times)
        return np.concatenate([np.repeat(fitted[:1], first, 0), fitted,
                               np.repeat(fitted[-1:], total - last, 0)]).astype(np.float32)

    def _fps(self) -> float:
        steps = np.diff(self.times)
        steps = steps[steps > 0]
        return float(1.0 / np.median(steps)) if steps.size else 24.0

"""The camera's own turning over a clip, from its background: a rotation per frame, or why there is none.

While the video runs, `RotationTracker.add(frame, background)` follows the background's corners: each frame is
cut to WORK_WIDTH pixels across in gray (a 720p frame in about a millisecond), corners are found on a keyframe
(cv2.goodFeaturesToTrack, only where the body-part segmentation says background, or outside the people's boxes
where no segmentation ran, the mask shrunk by a few pixels so no corner sits on a person's edge) and followed frame
to frame with pyramidal Lucas-Kanade, kept where the track backwards lands within FB_ERROR of where it started.
Each frame keeps its corners' places on the keyframe and on itself; a new keyframe is taken when fewer than half
the corners (or MIN_TRACKS) remain. Long tracks against one keyframe drift far less than chaining every pair.

At the end `solve(focal)` (the pointmap's focal length, in the frame's pixels; the principal point at the image's
centre) turns each frame's corners into bearing vectors (K^-1 x) and fits the rotation between the keyframe and the
frame: a rotation-only homography H = K R K^-1, fitted as R directly (Kabsch on the bearings, RANSAC over pairs,
then least squares on the inliers, INLIER_PX), chained keyframe to keyframe over the clip. A camera whose every
frame is within STILL_DEGREES of the first is still: its rotations are exactly the identity (nothing is added to
a tripod's clip). The clip is refused, and says why, when too many frames keep too few corners (too little
background, or too little texture) or the background does not move as one rotation moves it (a camera carried
along: near and far things part; or a moving scene): fewer than MIN_INLIERS of the corners agree with the best
rotation on more than MAX_BAD of the frames.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

WORK_WIDTH = 320  # pixels across: 720p cut 4x (a pixel there is ~0.2 degrees at a 60 degree field of view)
MAX_CORNERS = 150
MIN_TRACKS = 40  # fewer followed corners and a new keyframe is taken
MIN_PAIRS = 12  # fewer and a frame is not related to its keyframe (it holds the last rotation)
FB_ERROR = 0.5  # work pixels: a corner tracked forwards and back this far from where it began is dropped
EDGE = 5  # work pixels: the background mask shrunk by this much (no corner on a person's edge)
BOX_MARGIN = 0.1  # a person's box widened by this share of its size each way (a detector's box hugs the body)
INLIER_PX = 1.0  # work pixels: a corner this near the rotation's prediction agrees with it
MIN_INLIERS = 0.7  # fraction of a frame's corners that agree with its rotation
MAX_BAD = 0.1  # fraction of the frames allowed below MIN_INLIERS, or held for want of corners
STILL_DEGREES = 0.2  # no frame turned further than this from the first: a still camera
HYPOTHESES = 32  # RANSAC draws of two bearing pairs (at 30 % outliers all miss once in 10^9)
LK = {"winSize": (11, 11), "maxLevel": 3, "criteria": (cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 20, 0.03)}


@dataclass(frozen=True)
class CameraRotation:
    to_first: np.ndarray | None  # (T, 3, 3): camera frame t -> the first frame's camera frame; None when refused
    still: bool
    note: str  # what was found, or why the clip keeps the still camera's road
    inliers: np.ndarray  # (T,) fraction of each frame's corners agreeing with its rotation (1 on keyframe 0)

    @property
    def turned(self) -> bool:
        return self.to_first is not None and not self.still


class RotationTracker:
    """add(frame, background=None, boxes=None) per frame in order, then solve(focal) -> CameraRotation."""

    def __init__(self):
        self.size: tuple[int, int] | None = None  # (height, width) of the frames
        self.work: tuple[int, int] | None = None  # (height, width) of the work images
        self.links: list = []  # per frame: (keyframe index, its corners there (N, 2), here (N, 2)) or None
        self._prev = None
        self._key = (0, np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32), 0)  # index, there, here, count

    def add(self, frame: np.ndarray, background: np.ndarray | None = None, boxes: np.ndarray | None = None) -> None:
        """One frame (H, W, 3) RGB or (H, W) gray; `background` bool where the segmentation saw no person (the
        frame's shape, at any size), else `boxes` (N, 4) x1 y1 x2 y2, the people's, left out; neither: the whole frame."""
        frame = np.asarray(frame)
        if self.size is None:
            self.size = frame.shape[:2]
            scale = WORK_WIDTH / self.size[1]
            self.work = (max(1, round(self.size[0] * scale)), WORK_WIDTH)
        elif frame.shape[:2] != self.size:
            raise ValueError(f"frame {frame.shape[:2]} differs from the clip's {self.size}")
        gray = frame if frame.ndim == 2 else cv2.cvtColor(frame, cv2.COLOR_RGB2GRAY)
        gray = cv2.resize(gray, self.work[::-1], interpolation=cv2.INTER_AREA)
        mask = self._mask(background, boxes)
        index = len(self.links)
        if self._prev is None:
            self.links.append(None)
            self._keyframe(index, gray, mask)
            self._prev = gray
            return
        key, there, here, count = self._key
        if len(here):
            ahead, ok, _ = cv2.calcOpticalFlowPyrLK(self._prev, gray, here, None, **LK)
            back, ok_back, _ = cv2.calcOpticalFlowPyrLK(gray, self._prev, ahead, None, **LK)
            keep = (ok[:, 0] == 1) & (ok_back[:, 0] == 1) & (np.linalg.norm(back - here, axis=1) < FB_ERROR)
            keep &= self._inside(ahead, mask)
            there, here = there[keep], ahead[keep]
        self.links.append((key, there, here) if len(here) >= MIN_PAIRS else None)
        self._key = (key, there, here, count)
        if len(here) < max(MIN_TRACKS, count // 2):
            self._keyframe(index, gray, mask)
        self._prev = gray

    def _keyframe(self, index: int, gray: np.ndarray, mask: np.ndarray | None) -> None:
        found = cv2.goodFeaturesToTrack(gray, MAX_CORNERS, 0.01, 7, mask=mask, blockSize=7)
        corners = np.zeros((0, 2), np.float32) if found is None else found.reshape(-1, 2).astype(np.float32)
        self._key = (index, corners, corners.copy(), len(corners))

    def _mask(self, background, boxes) -> np.ndarray | None:
        """The work image's uint8 mask (255: background) shrunk by EDGE, or None for the whole frame."""
        if background is None and boxes is None:
            return None
        if background is not None:
            keep = np.asarray(background)
            keep = keep.view(np.uint8) if keep.dtype == bool else (keep > 0).astype(np.uint8)
            if keep.ndim != 2 or abs(keep.shape[0] * self.size[1] / (keep.shape[1] * self.size[0]) - 1) > 0.02:
                raise ValueError(f"background {keep.shape} is not the shape of the frame's {self.size}")
            keep = cv2.resize(keep, self.work[::-1], interpolation=cv2.INTER_NEAREST)
        else:
            keep = np.ones(self.work, np.uint8)
            scale = self.work[1] / self.size[1]
            for x1, y1, x2, y2 in np.asarray(boxes, np.float64).reshape(-1, 4) * scale:
                x1, x2 = x1 - BOX_MARGIN * (x2 - x1), x2 + BOX_MARGIN * (x2 - x1)
                y1, y2 = y1 - BOX_MARGIN * (y2 - y1), y2 + BOX_MARGIN * (y2 - y1)
                keep[max(0, int(y1)):max(0, int(np.ceil(y2)) + 1), max(0, int(x1)):max(0, int(np.ceil(x2)) + 1)] = 0
        keep = cv2.erode(keep, np.ones((2 * EDGE + 1, 2 * EDGE + 1), np.uint8))
        return keep * np.uint8(255)

    def _inside(self, points: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
        height, width = self.work
        x, y = np.rint(points[:, 0]).astype(int), np.rint(points[:, 1]).astype(int)
        inside = (x >= 0) & (x < width) & (y >= 0) & (y < height)
        if mask is not None:
            inside[inside] = mask[y[inside], x[inside]] > 0
        return inside

    def solve(self, focal: float) -> CameraRotation:
        """Each frame's rotation with `focal` (pixels of the frames as given), chained over the clip."""
        frames = len(self.links)
        if frames < 2:
            return CameraRotation(np.eye(3)[None].repeat(frames, 0), True, "camera still (one frame)", np.ones(frames))
        if not np.isfinite(focal) or focal <= 0:
            raise ValueError(f"the focal length must be a positive number of pixels, got {focal}")
        scale = self.work[1] / self.size[1]
        f, centre = focal * scale, (np.array(self.work[::-1], np.float64) - 1) / 2
        to_camera = np.repeat(np.eye(3)[None], frames, 0)  # the first frame's camera -> frame t's
        inliers, held = np.ones(frames), 0
        for t, link in enumerate(self.links[1:], 1):
            if link is None:
                to_camera[t], inliers[t], held = to_camera[t - 1], 0.0, held + 1
                continue
            key, there, here = link
            turn, inliers[t] = fit_rotation(_bearings(there, f, centre), _bearings(here, f, centre), INLIER_PX / f,
                                            np.random.default_rng(t))
            to_camera[t] = turn @ to_camera[key]
        to_first = np.transpose(to_camera, (0, 2, 1))
        if held > MAX_BAD * frames:
            return CameraRotation(None, False, f"camera's turning not found: {held} of {frames} frames kept fewer "
                                  f"than {MIN_PAIRS} background corners to follow (too little background or texture, "
                                  "or a turn too fast to follow); a still camera assumed", inliers)
        bad = int((inliers[1:] < MIN_INLIERS).sum()) + held
        if bad > MAX_BAD * frames:
            return CameraRotation(None, False, f"camera's turning not found: the background does not move as a turning "
                                  f"camera's on {bad} of {frames} frames (a camera carried along, a zoom, or a moving scene); a "
                                  "still camera assumed", inliers)
        if rotation_degrees(to_first).max() < STILL_DEGREES:
            return CameraRotation(np.repeat(np.eye(3)[None], frames, 0), True, "camera still", inliers)
        return CameraRotation(to_first, False, f"camera {describe(to_first, np.array([0.0, -1.0, 0.0]))}", inliers)


def _bearings(points: np.ndarray, focal: float, centre: np.ndarray) -> np.ndarray:
    rays = np.concatenate([(points - centre) / focal, np.ones((len(points), 1))], axis=1)
    return rays / np.linalg.norm(rays, axis=1, keepdims=True)


def kabsch(pairs: np.ndarray) -> np.ndarray:
    """(..., 3, 3) rotations Q minimising sum |b - Q a|^2 from (..., 3, 3) sums of b a^T."""
    u, _, vt = np.linalg.svd(pairs)
    flip = np.ones(pairs.shape[:-1])
    flip[..., -1] = np.sign(np.linalg.det(u @ vt))
    return (u * flip[..., None, :]) @ vt


def fit_rotation(a: np.ndarray, b: np.ndarray, threshold: float, rng) -> tuple[np.ndarray, float]:
    """The rotation Q with b ~ Q a for (N, 3) unit bearings (RANSAC over pairs, then least squares on the inliers,
    twice) and the fraction of the pairs within `threshold` (radians) of it."""
    picks = rng.integers(0, len(a), (HYPOTHESES, 2))
    turns = kabsch(np.einsum("hki,hkj->hij", b[picks], a[picks]))
    counts = (np.linalg.norm(b[None] - a[None] @ np.transpose(turns, (0, 2, 1)), axis=-1) < threshold).sum(1)
    turn = turns[counts.argmax()]
    for _ in range(2):
        near = np.linalg.norm(b - a @ turn.T, axis=1) < threshold
        if near.sum() < 2:
            break
        turn = kabsch(b[near].T @ a[near])
    return turn, float((np.linalg.norm(b - a @ turn.T, axis=1) < threshold).mean())


def describe(to_world: np.ndarray, up: np.ndarray) -> str:
    """How (T, 3, 3) camera -> world rotations turned from the first, about `up` (the world's): "panned 35 degrees
    to the right", "tilted 10 degrees down", "rolled 5 degrees clockwise" (the largest of each, those of a degree
    or more, joined), or "turned up to 0.6 degrees" (a small shake)."""
    forward, right = to_world[:, :, 2], to_world[0, :, 0]
    flat = forward - (forward @ up)[:, None] * up
    ahead, aside = flat[0] / np.linalg.norm(flat[0]), right - (right @ up) * up
    aside /= np.linalg.norm(aside)
    pan = np.degrees(np.arctan2(flat @ aside, flat @ ahead))
    tilt = np.degrees(np.arcsin(np.clip(forward @ up, -1, 1)))
    roll = -np.degrees(np.arcsin(np.clip(to_world[:, :, 0] @ up, -1, 1)))  # the image's x dipping: clockwise
    parts = []
    for angle, (verb, more, less) in ((pan, ("panned", "to the right", "to the left")), (tilt - tilt[0], (
            "tilted", "up", "down")), (roll - roll[0], ("rolled", "clockwise", "anticlockwise"))):
        largest = angle[np.abs(angle).argmax()]
        if abs(largest) >= 1:
            parts.append(f"{verb} {abs(largest):.0f} degree{'' if round(abs(largest)) == 1 else 's'} "
                         f"{more if largest > 0 else less}")
    first = np.transpose(to_world[:1], (0, 2, 1))
    if not parts:
        return f"turned up to {rotation_degrees(first @ to_world).max():.1f} degrees"
    return " and ".join([", ".join(parts[:-1]), parts[-1]] if len(parts) > 1 else parts)


def rotation_degrees(rotations: np.ndarray) -> np.ndarray:
    """(...) angle of each (..., 3, 3) rotation, degrees."""
    trace = np.trace(rotations, axis1=-2, axis2=-1)
    return np.degrees(np.arccos(np.clip((trace - 1) / 2, -1.0, 1.0)))

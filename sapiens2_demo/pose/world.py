"""The world a still camera looks at, from the people's fitted feet: gravity and the floor, the camera's height,
pitch and roll, each foot's contacts, and the map from the camera's frame to the files' world frame.

The floor is the plane through the feet's lowest keypoint (heel or toes) on the frames that foot is planted: slower
than CONTACT_SPEED, over the whole clip and every person. A robust fit (RANSAC over those points, then least
squares on the plane's inliers, FLOOR_INLIER): a foot in flight, a swing or a fault is no contact, and where the
contacts lie on two levels (a step, stairs) the plane most of them agree on is kept and the note says how many
disagree. Gravity is the plane's normal, from the feet towards the heads. Contacts that span less than
MIN_SPREAD across (one foot, or a person standing still on the spot: two heels) leave the floor's tilt to a few
millimetres of depth noise, and a degree of tilt is 8 cm of height 4.5 m away. The pointmap's floor pixels beside
the feet (floor_pixels.py), where the video has them, settle it: when the plane most of them lie on agrees with
the feet's (within AGREE_DEGREES, and the contacts within AGREE_HEIGHT of it), the floor is fitted to both, each
half the weight; with contacts spread too little, it is the pixels' plane if the contacts stand on it. Without
either, no floor is claimed, and the files keep the camera's frame.

The world frame: Y up along gravity, the floor at Y = 0, the first person's first facing along +Z (their left at
+X), their root starting above the origin. `World.to_world` maps camera-frame points (x right, y down, z forward,
metres) into it; the camera sits at `World.camera_position`, turned by `World.rotation` (camera to world).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .meta import name_index
from .skeleton3d import CAMERA_TO_SKELETON

CONTACT_SPEED = 0.25  # m/s: a foot slower than this is planted (a run's stance too: its foot is still for 5-7 frames)
FLOOR_INLIER = 0.02  # m: a contact this near the plane agrees with it
CONTACT_HEIGHT = 0.04  # m: a planted foot's lowest keypoint this near the floor is in contact
HOLD_SPEED, HUG_HEIGHT = 0.5, 0.01  # m/s, m: a contact goes on while its foot is slower and this near the floor
LANDED_DEPTH = 0.002  # m: a slow foot this far under the floor has landed (a clean fit's feet rest on it, at 0)
REST_S = 0.25  # s: a foot still this long off the floor rests on something (a jump's top is still for a frame)
CONTACT_WINDOW_S = 0.08  # s: a contact's speed is measured over this either side (2 frames at 24 frames/s)
MIN_SPREAD = 0.25  # m: the contacts' spread along their narrower direction needed for the floor's tilt
MIN_CONTACTS = 12  # foot-frames
SUNK = 0.05  # m: a foot this far below the floor has gone through it
MAX_BELOW_SHARE = 0.05  # of the frames: more feet through the floor than this, and it is no floor
MAX_TILT = 60.0  # degrees: a floor further than this from the image's up is not a floor the feet stand on
FOOT_KEYPOINTS = ("heel", "big_toe", "small_toe")
AGREE_DEGREES, AGREE_HEIGHT = 10.0, 0.05  # the floor pixels' plane and the feet's agree within these
MAX_FLOOR_PIXELS = 6000  # a clip's floor pixels, spread evenly over it


@dataclass(frozen=True)
class World:
    rotation: np.ndarray  # (3, 3) camera frame -> world
    origin: np.ndarray  # (3,) the world's origin in the camera frame (on the floor, below the first root)
    up: np.ndarray  # (3,) gravity's up in the camera frame
    height: float  # metres: the camera above the floor
    pitch: float  # degrees: the camera's view below the horizon
    roll: float  # degrees: the image's horizontal against the floor's (positive: turned clockwise)
    on_floor: int  # planted foot-frames on the floor
    off_floor: int  # planted foot-frames the floor disagrees with (a step, stairs, a fault)
    # a turning camera (camera_rotation.py): (T, 3, 3) the camera at frame t -> the first frame's camera, whose frame
    # everything above is in; None: the camera taken as still. `turning` says how it turned ("" not estimated).
    turns: np.ndarray | None = None
    turning: str = ""
    floor_pixels: int = 0  # the pointmap's floor pixels the floor was fitted to as well (floor_pixels.py)
    # whether the fit on the floor holds planted feet still: not where the feet stayed on the spot (the floor's tilt
    # from its pixels alone), where a foot under CONTACT_SPEED may be pivoting (a turn in place: held whole, the
    # turn was stopped, 0.4 -> 11 mm on clean input)
    holds_feet: bool = True

    def to_world(self, points: np.ndarray) -> np.ndarray:
        return (np.asarray(points, np.float64) - self.origin) @ self.rotation.T

    @property
    def camera_position(self) -> np.ndarray:
        return self.to_world(np.zeros(3))

    def camera_rotations(self, frames: int) -> np.ndarray:
        """(T, 3, 3): the camera at each frame -> world."""
        return self.rotation @ (np.repeat(np.eye(3)[None], frames, 0) if self.turns is None else self.turns[:frames])

    def contacts(self, points: np.ndarray, fps: float) -> np.ndarray:
        """(T, 2) bool: each foot (left, right) in contact on a person's (T, K, 3) fitted camera-frame keypoints:
        slower than CONTACT_SPEED over CONTACT_WINDOW_S either side (frame to frame, the noise a fit under 2 cm of
        depth noise keeps broke a stance into pieces), its lowest keypoint within CONTACT_HEIGHT of the floor, or
        off it for REST_S (a step, a stair); a gap of up to that window closed, a contact shorter than 3 frames
        dropped but at the clip's ends. The window eats about a frame off each end of a contact (clip_fit holds the
        step into and out of it too)."""
        level = np.nan_to_num(lowest(points, self.up) @ self.up + self.height, nan=np.inf)  # (T, 2) above the floor
        near = np.abs(level) < CONTACT_HEIGHT
        h = max(1, int(round(CONTACT_WINDOW_S * fps)))
        feet = np.stack([points[:, cols].mean(1) for cols in foot_columns().values()], 1)  # (T, 2, 3)
        padded = np.concatenate([np.repeat(feet[:1], h, 0), feet, np.repeat(feet[-1:], h, 0)])
        speed = np.nan_to_num(np.linalg.norm(padded[2 * h:] - padded[:-2 * h], axis=-1) * fps / (2 * h), nan=np.inf)
        still, slow = speed < CONTACT_SPEED, speed < HOLD_SPEED
        out = still & near
        rest, ends = max(3, int(round(REST_S * fps))), (0, len(out))
        for side in range(out.shape[1]):  # off the floor: still for REST_S, or slow for 3 frames the clip cuts
            for a, b in _runs(still[:, side] & ~near[:, side]):
                out[a:b, side] |= b - a >= rest
            for a, b in _runs(slow[:, side] & ~near[:, side]):
                out[a:b, side] |= (a in ends or b in ends) and b - a >= 3
        # a contact goes on while its foot stays slow and, where the clip cuts the stance, hugs the floor: with no
        # frames before it the fit's acceleration prior starts its lift-off a frame or two early (its last still
        # frames read 0.3-0.4 m/s, and a foot left free there slid 2 cm); a landing starts early while the foot is
        # sunk under the floor: a junk frame beside it drags the first fit's foot down and on, and the contact
        # began two frames late (the foot slid 17 mm). Elsewhere a stance's edges are its own (a lift-off grown so
        # held feet a drifting depth had sunk: 9.8 -> 11.1 mm of slide under the heavy model)
        hugging, landed = slow & (np.abs(level) < HUG_HEIGHT), slow & (level < -LANDED_DEPTH)
        for side in range(out.shape[1]):
            for a, b in _runs(out[:, side]):
                while a == 0 and b < len(out) and hugging[b, side]:  # cut by the clip's first frame: on after it
                    out[b, side], b = True, b + 1
                before = (hugging | landed) if b == len(out) else landed  # cut by its last, or a landing
                while a > 0 and before[a - 1, side]:
                    out[a - 1, side], a = True, a - 1
            for a, b in _runs(~out[:, side]):  # a gap inside a contact, no longer than the window: noise
                if a > 0 and b < len(out) and b - a <= h:
                    out[a:b, side] = True
            for a, b in _runs(out[:, side]):  # a blip, but at the clip's ends (a stance the clip cuts)
                if b - a < 3 and a > 0 and b < len(out):
                    out[a:b, side] = False
        return out

    def note(self) -> str:
        tilt = f"tilted {abs(self.pitch):.0f} degrees {'down' if self.pitch >= 0 else 'up'}"
        roll = f", rolled {abs(self.roll):.0f} degrees" if round(abs(self.roll)) else ""
        disagree = (f"; {self.off_floor} of {self.on_floor + self.off_floor} planted foot-frames lie off that floor "
                    "(a step or stairs?)" if self.off_floor > 0.2 * (self.on_floor + self.off_floor) else "")
        turning = f", {self.turning}" if self.turning else " (a still camera assumed)"
        pixels = f" and {self.floor_pixels} floor pixels beside them" if self.floor_pixels else ""
        return (f"3D motion: the floor found under {self.on_floor} foot contacts{pixels}: camera {self.height:.1f} m above "
                f"it, {tilt}{roll}{turning}{disagree}; the files are in the world frame (Y up, the "
                "floor at Y = 0, the first person facing +Z).")


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    """(first, end) of each run of True in a (T,) mask."""
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(int), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def foot_columns() -> dict[str, list[int]]:
    index = name_index()
    return {side: [index[f"{side}_{k}"] for k in FOOT_KEYPOINTS] for side in ("left", "right")}


def planted(points: np.ndarray, fps: float) -> np.ndarray:
    """(T, 2) bool: each foot (left, right) slower than CONTACT_SPEED (the mean of its keypoints, over the frame
    before and after) on the (T, K, 3) fitted points."""
    feet = np.stack([points[:, cols].mean(1) for cols in foot_columns().values()], 1)  # (T, 2, 3)
    if len(feet) < 3:
        return np.zeros(feet.shape[:2], bool)
    speed = np.linalg.norm(np.gradient(feet, axis=0), axis=-1) * fps
    return np.isfinite(speed) & (speed < CONTACT_SPEED)


def lowest(points: np.ndarray, up: np.ndarray) -> np.ndarray:
    """(T, 2, 3): each foot's keypoint lowest along `up`, per frame."""
    out = []
    for cols in foot_columns().values():
        foot = points[:, cols]  # (T, 3, 3)
        heights = np.nan_to_num(foot @ up, nan=np.inf)
        out.append(np.take_along_axis(foot, heights.argmin(1)[:, None, None], 1)[:, 0])
    return np.stack(out, 1)


def plane(samples: np.ndarray, rng, image_up: np.ndarray, inlier: float = FLOOR_INLIER, allowed=None
          ) -> tuple[np.ndarray, float, np.ndarray] | None:
    """(normal, offset, inliers) of the plane n.x + d = 0 most samples lie within `inlier` of (RANSAC, then
    least squares on the inliers, twice), n within MAX_TILT of `image_up` and pointing its way; `allowed(normal,
    offset)`, where given, rules candidates out (where it allows none, the best of all)."""
    best, count, fallback = None, 0, None
    cos_tilt = np.cos(np.radians(MAX_TILT))
    for _ in range(300):
        a, b, c = samples[rng.choice(len(samples), 3, replace=False)]
        normal = np.cross(b - a, c - a)
        if np.linalg.norm(normal) < 1e-6:
            continue
        normal /= np.linalg.norm(normal)
        normal *= np.sign(normal @ image_up) or 1.0
        if normal @ image_up < cos_tilt:
            continue
        inliers = np.abs((samples - a) @ normal) < inlier
        if inliers.sum() > count:
            candidate = normal, -float(a @ normal)
            if allowed is None or allowed(*candidate):
                best, count = candidate, int(inliers.sum())
            elif fallback is None or inliers.sum() > fallback[1]:
                fallback = candidate, int(inliers.sum())
    best = best if best is not None else (fallback[0] if fallback is not None else None)
    if best is None:
        return None
    normal, offset = best
    for _ in range(2):
        inliers = np.abs(samples @ normal + offset) < inlier
        centre = samples[inliers].mean(0)
        normal = np.linalg.svd(samples[inliers] - centre)[2][-1]
        normal *= np.sign(normal @ image_up) or 1.0
        offset = -float(centre @ normal)
    return normal, offset, np.abs(samples @ normal + offset) < inlier


def _with_pixels(contacts: np.ndarray, found, pixels: np.ndarray | None, image_up: np.ndarray):
    """(normal, offset, contact inliers, floor pixels used) from the feet's plane `found` (or None) and the clip's
    floor pixels (see the module docstring); `found` as it was (0 pixels) where the pixels give no plane, or one
    that disagrees and holds under MIN_CONTACTS of the contacts."""
    from .floor_pixels import PIXEL_INLIER, floor_plane

    seen = floor_plane(pixels, image_up)
    if seen is None:
        return None if found is None else (*found, 0)
    normal, offset, _ = seen
    heights = contacts @ normal + offset
    on = np.abs(heights) < FLOOR_INLIER if found is None else found[2]
    if found is not None and np.degrees(np.arccos(np.clip(found[0] @ normal, -1, 1))) > AGREE_DEGREES:
        if (np.abs(heights) < FLOOR_INLIER).sum() < MIN_CONTACTS:  # a wall, furniture: the feet's plane stands
            return (*found, 0)
        # enough contacts on the floor seen: the feet's plane was a ramp through a step's two levels under a
        # drifting depth (the step clip, level camera, heavy model: 20 degrees off gravity, the floor 1.7 m off)
        on = np.abs(heights) < FLOOR_INLIER
    if not on.any() or abs(float(np.median(heights[on]))) > AGREE_HEIGHT:
        return None if found is None else (*found, 0)
    for _ in range(2):  # both, each half the weight (the pixels are many more)
        feet = contacts[np.abs(contacts @ normal + offset) < FLOOR_INLIER]
        floor = pixels[np.abs(pixels @ normal + offset) < PIXEL_INLIER]
        points = np.concatenate([feet, floor])
        weights = np.concatenate([np.full(len(feet), 0.5 / max(len(feet), 1)), np.full(len(floor), 0.5 / len(floor))])
        weights /= weights.sum()
        centre = weights @ points
        spread = (points - centre).T @ ((points - centre) * weights[:, None])
        normal = np.linalg.eigh(spread)[1][:, 0]
        normal *= np.sign(normal @ image_up) or 1.0
        offset = -float(centre @ normal)
    inliers = np.abs(contacts @ normal + offset) < FLOOR_INLIER
    return normal, offset, inliers, len(floor)


def _spread(samples: np.ndarray) -> float:
    """The samples' extent along their narrower direction in the plane they span (twice its standard deviation)."""
    return float(2 * np.linalg.svd(samples - samples.mean(0), compute_uv=False)[1] / np.sqrt(len(samples)))


def _below_share(people: list[np.ndarray], present, up: np.ndarray, offset: float) -> float:
    """The share of the people's frames whose lowest foot keypoint lies more than SUNK below the plane: a floor
    drawn through the slow moments of sliding feet lies above where they pass (real feet seldom sink into theirs)."""
    sunk, frames = 0, 0
    for k, points in enumerate(people):
        here = np.ones(len(points), bool) if present is None else np.asarray(present[k], bool)
        heights = (lowest(points, up) @ up + offset).min(axis=1)[here]  # (frames,) the lower foot, above the plane
        heights = heights[np.isfinite(heights)]
        sunk, frames = sunk + int((heights < -SUNK).sum()), frames + len(heights)
    return sunk / frames if frames else 0.0


def find_world(people: list[np.ndarray], fps: float, present: list[np.ndarray] | None = None,
               floor_pixels: np.ndarray | None = None) -> tuple[World | None, str]:
    """The world from each person's (T, K, 3) fitted camera-frame keypoints (the first person sets the facing)
    and the clip's floor pixels ((M, 3) in the same frame, or None), or None and why not."""
    image_up = np.array([0.0, -1.0, 0.0])  # the camera frame's y points down
    samples = []
    for k, points in enumerate(people):
        still = planted(points, fps)
        if present is not None:
            still &= np.asarray(present[k], bool)[:, None]
        feet = lowest(points, image_up)
        samples.append(feet[still])
    samples = np.concatenate(samples) if samples else np.zeros((0, 3))
    samples = samples[np.isfinite(samples).all(1)]
    if floor_pixels is not None and len(floor_pixels) > MAX_FLOOR_PIXELS:
        floor_pixels = floor_pixels[np.linspace(0, len(floor_pixels) - 1, MAX_FLOOR_PIXELS).round().astype(int)]
    if len(samples) < MIN_CONTACTS:
        return None, (f"no floor found: the feet were planted on {len(samples)} frames (at least {MIN_CONTACTS} "
                      "needed; feet out of view, or always moving); the camera's frame kept")
    spread = _spread(samples)
    if spread < MIN_SPREAD:
        found = _with_pixels(samples, None, floor_pixels, image_up)
        if found is None:
            return None, (f"no floor found: the planted feet covered {100 * spread:.0f} cm across (at least "
                          f"{100 * MIN_SPREAD:.0f} cm needed for the floor's tilt: a person standing still on the "
                          "spot does not give it) and no floor pixels beside them settled it; the camera's frame kept")
    else:
        # the plane most contacts agree on that the feet do not pass through: steps or stairs give two levels of
        # contacts, and a ramp through both had more than either (the step clip: 62 of 83, 22 degrees off gravity)
        found = plane(samples, np.random.default_rng(0), image_up,
                      allowed=lambda up, offset: _below_share(people, present, up, offset) <= MAX_BELOW_SHARE)
        if found is None or found[2].sum() < MIN_CONTACTS:
            return None, "no floor found: the planted feet agree on no plane; the camera's frame kept"
        found = _with_pixels(samples, found, floor_pixels, image_up)
    up, offset, inliers, pixels = found
    holds_feet = spread >= MIN_SPREAD
    below = _below_share(people, present, up, offset)
    if below > MAX_BELOW_SHARE:
        return None, (f"no floor found: the feet pass {100 * SUNK:.0f} cm below the plane their still frames suggest "
                      f"on {100 * below:.0f} % of the frames (feet that slide, not stand); the camera's frame kept")
    first = people[0]
    index = name_index()
    seen = np.flatnonzero(np.isfinite(first[:, [index["left_hip"], index["right_hip"]]]).all((1, 2)))
    f = int(seen[0]) if seen.size else 0
    root = (first[f, index["left_hip"]] + first[f, index["right_hip"]]) / 2
    across = first[f, index["left_hip"]] - first[f, index["right_hip"]]  # the person's left
    forward = np.cross(across, up)
    forward -= (forward @ up) * up
    if not np.isfinite(forward).all() or np.linalg.norm(forward) < 1e-6:
        forward = np.cross(CAMERA_TO_SKELETON[0], up)  # facing the camera
    forward /= np.linalg.norm(forward)
    rotation = np.stack([np.cross(up, forward), up, forward])  # rows: world X, Y, Z in the camera frame
    origin = root - (root @ up + offset) * up
    pitch = float(np.degrees(np.arcsin(np.clip(-up[2], -1, 1))))
    roll = float(np.degrees(np.arctan2(up[0], -up[1])))
    world = World(rotation, origin, up, float(offset), pitch, roll, int(inliers.sum()), int((~inliers).sum()),
                  floor_pixels=int(pixels), holds_feet=holds_feet)
    return world, world.note()

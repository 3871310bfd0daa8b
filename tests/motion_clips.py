"""Synthetic ground truth for motion capture, below the models: a known skeleton (1.75 m, rigid segments) moving
through six clips, seen by a pinhole camera, with what a real pose + pointmap model adds on top.

`make_clip(name, noise=..., faults=..., seed=...)` -> Clip: per person the true 308 keypoints in 3D (camera
frame: x right, y down, z forward, metres; NaN for the face) and what the models would hand the video job per
frame: a box (None when the detector would miss the person), 2D keypoints, scores and lifted 3D points.
Clips (24 frames/s by default; `fps` 30 or 60 samples the same motion faster): walk, turn (180 degrees in
place), arms (raised overhead and down), sit (sitting down), cross (two people crossing, the far one hidden by the
near one for 11 frames at 24 frames/s, drawn as capsules to find who hides whom: a hidden keypoint is still placed
in 2D, less surely, and lifted at the depth of whoever covers it, as the pointmap lift does), leave_return (out of
the frame for 1.7 s, back turned round), and the fast moves of tests/motion_moves.py: run, jump, spin, dance.
Noise: 2 px (sigma) on the 2D keypoints, 2 cm (sigma) on depth along the camera ray. `heavy`: errors shaped like a
model's instead: Student t (3 degrees of freedom, scale 1.2 px) in 2D, and per keypoint a depth offset that
persists and drifts (2 cm constant + 2 cm swinging over 1.5-4 s, sigmas) plus 1 cm white depth noise. Faults: three single-frame
left/right swaps, three frames with 40 % junk keypoints (anywhere in the box, confident), three low-confidence
frames (60 % of the keypoints under the lift's 0.3), and in `cross` a frame where the far person's keypoints land
on the near one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sapiens2_demo.pose.meta import NUM_KEYPOINTS, keypoint_meta, name_index
from tests import camera_frames

FPS = 24.0
FOCAL, SIZE = 500.0, (360, 640)  # pixels; (height, width)
CENTRE = np.array([SIZE[1] / 2, SIZE[0] / 2])
CAMERA_HEIGHT = 1.0  # metres above the floor, looking level
CLIPS = ("walk", "turn", "arms", "sit", "cross", "leave_return", "run", "jump", "spin", "dance", "sprint", "kick",
         "punch", "flip", "curve", "step")
LEVEL = (CAMERA_HEIGHT, 0.0, 0.0)  # the camera: metres above the floor, degrees tilted down, degrees rolled
SECONDS = {"cross": 4.0, "leave_return": 5.0}  # the others 3 s, the moves as tests/motion_moves.py says
TO_CAMERA = np.diag([1.0, -1.0, -1.0])  # the skeleton's Y-up frame (facing +Z) <-> the camera frame
PIXEL_NOISE, DEPTH_NOISE = 2.0, 0.02
STEP_UP = 0.18  # m: the `step` clip's platform (a stair's rise)
# per finger: knuckle offset in the hand frame (x toward the thumb side for the left hand), direction, phalanges
FINGERS = {"thumb": ((-0.015, -0.035, 0.035), (-0.3, -1.0, 0.6), (0.035, 0.030, 0.025)),
           "forefinger": ((0.0, -0.085, 0.025), (0.0, -1.0, 0.0), (0.040, 0.025, 0.020)),
           "middle_finger": ((0.0, -0.090, 0.005), (0.0, -1.0, 0.0), (0.045, 0.028, 0.022)),
           "ring_finger": ((0.0, -0.085, -0.015), (0.0, -1.0, 0.0), (0.042, 0.026, 0.021)),
           "pinky_finger": ((0.0, -0.078, -0.033), (0.0, -1.0, 0.0), (0.033, 0.020, 0.018))}


def rot(axis: str, angle) -> np.ndarray:
    """(T, 3, 3) rotations about a principal axis by angle (T,) radians."""
    angle = np.asarray(angle, float)
    c, s = np.cos(angle), np.sin(angle)
    one, zero = np.ones_like(angle), np.zeros_like(angle)
    rows = {"x": [[one, zero, zero], [zero, c, -s], [zero, s, c]],
            "y": [[c, zero, s], [zero, one, zero], [-s, zero, c]],
            "z": [[c, -s, zero], [s, c, zero], [zero, zero, one]]}[axis]
    return np.moveaxis(np.array(rows), [0, 1], [-2, -1])


def apply(rotation, vector):
    """(T, 3) vectors: each frame's rotation applied to one vector."""
    return np.einsum("tij,j->ti", rotation, np.asarray(vector, float))


def _ramp(t, start, end):
    """0 before start, 1 after end, a smooth step between."""
    u = np.clip((t - start) / (end - start), 0, 1)
    return u * u * (3 - 2 * u)


def body(p: dict, frames: int) -> np.ndarray:
    """(T, 308, 3) keypoints in the Y-up frame for joint angles `p` (arrays of T, radians; see `_standing`)."""
    index = name_index()
    out = np.full((frames, NUM_KEYPOINTS, 3), np.nan)

    def put(name, value):
        out[:, index[name]] = value

    yaw = rot("y", p["yaw"])
    if "pitch" in p:  # the whole body turned about the hips' axis (a flip)
        yaw = yaw @ rot("x", p["pitch"])
    torso = yaw @ rot("x", p["lean"]) @ rot("y", p["twist"])
    pelvis = p["root"]
    neck = pelvis + apply(torso, [0, 0.53, 0])
    put("neck", neck)
    head = torso @ rot("x", p["nod"])
    for name, offset in (("left_ear", [0.075, 0.15, -0.01]), ("right_ear", [-0.075, 0.15, -0.01]),
                         ("nose", [0, 0.13, 0.10]), ("left_eye", [0.032, 0.17, 0.085]),
                         ("right_eye", [-0.032, 0.17, 0.085])):
        put(name, neck + apply(head, offset))
    for sign, s in ((1, "left"), (-1, "right")):
        shoulder = neck + apply(torso, [sign * 0.18, -0.03, 0])
        put(f"{s}_shoulder", shoulder)
        upper = torso @ rot("z", sign * p[f"{s}_abduct"]) @ rot("x", -p[f"{s}_flex"])
        elbow = shoulder + apply(upper, [0, -0.29, 0])
        fore = upper @ rot("x", -p[f"{s}_elbow"]) @ rot("y", sign * p[f"{s}_pronate"])
        wrist = elbow + apply(fore, [0, -0.26, 0])
        put(f"{s}_elbow", elbow)
        put(f"{s}_wrist", wrist)
        for finger, (knuckle, direction, lengths) in FINGERS.items():
            point = wrist + apply(fore, [sign * knuckle[0], knuckle[1], knuckle[2]])
            put(f"{s}_{finger}_third_joint", point)
            direction = np.asarray(direction) * [sign, 1, 1] / np.linalg.norm(direction)
            bend = fore
            for joint, length in zip(("2", "3", "4"), lengths):
                bend = bend @ rot("z", -sign * p["curl"])
                point = point + apply(bend, direction * length)
                put(f"{s}_{finger}{joint}", point)
        hips = yaw
        hip = pelvis + apply(hips, [sign * 0.09, 0, 0])
        put(f"{s}_hip", hip)
        thigh = hips @ rot("x", -p[f"{s}_hip_flex"])
        knee = hip + apply(thigh, [0, -0.43, 0])
        shin = thigh @ rot("x", p[f"{s}_knee"])
        ankle = knee + apply(shin, [0, -0.42, 0])
        put(f"{s}_knee", knee)
        put(f"{s}_ankle", ankle)
        foot = shin @ rot("x", -0.2)
        put(f"{s}_big_toe", ankle + apply(foot, [0.02 * sign, -0.06, 0.15]))
        put(f"{s}_small_toe", ankle + apply(foot, [0.06 * sign, -0.06, 0.12]))
        put(f"{s}_heel", ankle + apply(foot, [0, -0.07, -0.05]))
    return out


def _standing(t: np.ndarray, root) -> dict:
    zero = np.zeros_like(t)
    p = {"root": np.broadcast_to(np.asarray(root, float), (len(t), 3)).copy(), "yaw": zero.copy(),
         "lean": zero + 0.05, "twist": zero.copy(), "nod": zero.copy(), "curl": 0.25 + 0.1 * np.sin(2 * t)}
    for s in ("left", "right"):
        p.update({f"{s}_abduct": zero + 0.15, f"{s}_flex": zero.copy(), f"{s}_elbow": zero + 0.3,
                  f"{s}_pronate": zero.copy(), f"{s}_hip_flex": zero.copy(), f"{s}_knee": zero + 0.05})
    return p


def _walking(t: np.ndarray, start, velocity, phase0=0.0) -> dict:
    velocity = np.asarray(velocity, float)
    p = _standing(t, start)
    phase = 2 * np.pi * 0.9 * t + phase0
    p["root"] = np.asarray(start, float) + t[:, None] * velocity
    p["root"][:, 1] += 0.025 * np.sin(2 * phase)
    p["yaw"] = np.arctan2(velocity[0], velocity[2]) + 0.08 * np.sin(phase)
    p["twist"] = -0.12 * np.sin(phase)
    for sign, s in ((1, "left"), (-1, "right")):
        p[f"{s}_hip_flex"] = 0.4 * sign * np.sin(phase)
        p[f"{s}_knee"] = 0.4 + 0.35 * np.sin(phase + sign * np.pi / 2 + 1.0)
        p[f"{s}_flex"] = -0.35 * sign * np.sin(phase)
        p[f"{s}_elbow"] = 0.35 + 0.15 * sign * np.sin(phase)
        p[f"{s}_pronate"] = 0.3 + 0.1 * np.sin(phase)
    return p


def camera_rotation(camera: tuple = LEVEL) -> np.ndarray:
    """(3, 3) the Y-up world (facing the camera along +Z) -> the camera frame of a camera (height, pitch down, roll)."""
    pitch, roll = camera[1], camera[2]
    return rot("z", np.radians([roll]))[0] @ rot("x", np.radians([pitch]))[0] @ TO_CAMERA


def to_world(points: np.ndarray, camera: tuple = LEVEL) -> np.ndarray:
    """(T, K, 3) camera-frame points -> the clip's world (Y up, the floor at Y = 0, facing the camera along +Z)."""
    return points @ camera_rotation(camera) + [0.0, camera[0], 0.0]


def motion(name: str, fps: float = FPS, seconds: float | None = None, camera: tuple = LEVEL) -> list[np.ndarray]:
    """The true keypoints of each person in the clip, (T, 308, 3) camera frame; `seconds`: only its first ones;
    `camera` (height m, pitch down and roll in degrees) where it looks from."""
    from tests.motion_moves import MOVES
    from tests.motion_walk import curve_walk

    length = MOVES[name][1] if name in MOVES else SECONDS.get(name, 3.0)
    to_camera = camera_rotation(camera)
    seconds = length if seconds is None else min(seconds, length)
    t = np.arange(int(round(seconds * fps))) / fps
    frames = len(t)
    if name in ("curve", "step"):  # keypoints, not angles: its feet stand still (tests/motion_walk.py)
        return [(curve_walk(t, body, _standing, STEP_UP if name == "step" else 0.0) - [0, camera[0], 0]) @ to_camera.T]
    if name in MOVES:
        people = [MOVES[name][0](t, _standing)]
    elif name == "walk":
        people = [_walking(t, [-1.6, 0.95, -5.0], [1.1, 0, 0.15])]
    elif name == "turn":
        p = _standing(t, [0.2, 0.95, -4.5])
        p["yaw"] = np.pi * _ramp(t, 0.4, 2.6)
        for s in ("left", "right"):
            p[f"{s}_flex"] = 0.2 * np.sin(2 * np.pi * 0.5 * t)
        people = [p]
    elif name == "arms":
        p = _standing(t, [0.0, 0.95, -4.5])
        up = _ramp(t, 0.2, 1.4) - _ramp(t, 1.8, 2.9)
        for sign, s in ((1, "left"), (-1, "right")):
            p[f"{s}_abduct"] = 0.15 + 2.75 * up
            p[f"{s}_elbow"] = 0.3 - 0.2 * up
            p[f"{s}_pronate"] = 1.2 * up
            p[f"{s}_flex"] = 0.3 * up
        people = [p]
    elif name == "sit":
        p = _standing(t, [0.0, 0.95, -4.5])
        down = _ramp(t, 0.3, 2.2)
        p["root"] = p["root"] + down[:, None] * [0, -0.42, -0.3]
        p["lean"] = 0.05 + 0.45 * np.sin(np.pi * np.clip((t - 0.3) / 1.9, 0, 1)) + 0.1 * down
        for s in ("left", "right"):
            p[f"{s}_hip_flex"] = 1.55 * down
            p[f"{s}_knee"] = 0.05 + 1.5 * down
            p[f"{s}_flex"] = 0.5 * down
            p[f"{s}_elbow"] = 0.3 + 0.8 * down
        people = [p]
    elif name == "cross":
        people = [_walking(t, [-0.5, 0.95, -4.0], [0.25, 0, 0]),  # 0.8 m apart in depth: the boxes overlap
                  _walking(t, [0.6, 0.95, -4.8], [-0.3, 0, 0], phase0=1.3)]
    elif name == "leave_return":  # out past the right edge and back in
        p = _walking(t, [1.3, 0.95, -4.5], [1.3, 0, 0])
        p["root"][:, 0] = 1.3 + 1.3 * np.minimum(t, 4.1 - t)  # turns back at 2.05 s, 1.5 s after leaving
        p["yaw"] = np.where(t < 2.05, np.pi / 2, -np.pi / 2) + 0.08 * np.sin(2 * np.pi * 0.9 * t)
        people = [p]
    else:
        raise ValueError(f"unknown clip {name!r}; one of {', '.join(CLIPS)}")
    return [(body(p, frames) - [0, camera[0], 0]) @ to_camera.T for p in people]


def project(points: np.ndarray) -> np.ndarray:
    """(..., 3) camera-frame points -> (..., 2) pixels."""
    return FOCAL * points[..., :2] / points[..., 2:3] + CENTRE


def back_project(pixels: np.ndarray, depth: np.ndarray) -> np.ndarray:
    return np.concatenate([(pixels - CENTRE) * depth[..., None] / FOCAL, depth[..., None]], axis=-1)


@dataclass
class Clip:
    name: str
    fps: float
    truth: list[np.ndarray]  # per person (T, 308, 3), camera frame
    boxes: list[list]  # per person per frame: (4,) x1 y1 x2 y2, or None where the detector misses them
    keypoints: list[np.ndarray]  # per person (T, 308, 2) what the pose model hands over
    scores: list[np.ndarray]  # per person (T, 308)
    lifted: list[np.ndarray]  # per person (T, 308, 3) lifted points (NaN = not lifted)
    swaps: list[list[int]] = field(default_factory=list)  # per person, frames with left and right swapped
    faulty: list[set] = field(default_factory=list)  # per person, every frame with a fault of any kind
    camera: tuple = LEVEL  # (height m, pitch down and roll in degrees[, a turning camera's kind: TURNING])
    turns: np.ndarray | None = None  # (T, 3, 3) a turning camera's: frame t's camera -> the first's (truth's frame)
    # the pointmap's floor (floor_map): (T,) metres of depth error every floor pixel of a frame shares, and the
    # white noise's sigma on top; `seed` the white noise's
    floor_offset: np.ndarray | None = None
    floor_sigma: float = 0.0
    floor_y: float = 0.0  # world Y of the floor the feet stand on (floor_height)
    seed: int = 0

    @property
    def frames(self) -> int:
        return len(self.truth[0])


PLANTED_M_S = 0.1  # a true foot slower than this (ankle and toes) is planted


def floor_height(world: np.ndarray, fps: float, present: np.ndarray | None = None) -> float:
    """The floor the true feet stand on, world Y (m), from (T, K, 3) world keypoints: the median height of each
    planted foot's lowest sole keypoint (heel or toes; the clips' kinematics put some soles a few centimetres above
    Y = 0, and not all flat)."""
    index = name_index()
    feet = np.stack([world[:, [index[f"{s}_{k}"] for k in ("heel", "big_toe", "small_toe")]]
                     for s in ("left", "right")], 1)  # (T, 2, 3, 3)
    speed = np.linalg.norm(np.gradient(feet.mean(2), axis=0), axis=-1) * fps  # (T, 2)
    still = speed < PLANTED_M_S
    if present is not None:
        still &= np.asarray(present, bool)[:, None]
    lowest = np.nanmin(feet[..., 1], axis=2)  # (T, 2)
    return float(np.median(lowest[still])) if still.any() else float(np.nanmin(lowest))


def floor_map(clip: Clip, frame: int) -> np.ndarray:
    """(H, W, 3) the pointmap of the floor alone as frame `frame`'s camera sees it (NaN above the horizon), with the
    clip's floor error (Clip.floor_offset, floor_sigma) along each pixel's depth."""
    up = camera_rotation(clip.camera) @ [0.0, 1.0, 0.0]  # the world's up in the first frame's camera
    if clip.turns is not None:
        up = clip.turns[frame].T @ up
    v, u = np.mgrid[0:SIZE[0], 0:SIZE[1]].astype(np.float64)
    rays = np.stack([(u - CENTRE[0]) / FOCAL, (v - CENTRE[1]) / FOCAL, np.ones_like(u)], -1)
    along = rays @ up
    above = clip.camera[0] - clip.floor_y  # the camera above the floor the first person's feet stand on
    with np.errstate(divide="ignore", invalid="ignore"):
        reach = np.where(along < -1e-3, -above / along, np.nan)  # the floor: up . x + height = 0
    rng = np.random.default_rng([clip.seed, frame, 11])
    error = clip.floor_offset[frame] + (rng.normal(0, clip.floor_sigma, reach.shape) if clip.floor_sigma else 0.0)
    return (rays * (reach + error)[..., None]).astype(np.float32)  # z = reach: the depth's error scales the ray


def _flip() -> np.ndarray:
    return np.asarray(keypoint_meta()["flip_indices"], np.int64)


# capsules (marker a, marker b, radius in metres) the people are drawn with, to find who hides whom: each pixel
# carries the depth of the nearest bone's axis under it
CAPSULES = [("pelvis", "neck", 0.14), ("left_hip", "right_hip", 0.08), ("left_shoulder", "right_shoulder", 0.07),
            ("neck", "head", 0.06), ("head", "head", 0.11)]
for _s in ("left", "right"):
    CAPSULES += [(f"{_s}_shoulder", f"{_s}_elbow", 0.05), (f"{_s}_elbow", f"{_s}_wrist", 0.04),
                 (f"{_s}_wrist", f"{_s}_middle_finger_third_joint", 0.04), (f"{_s}_hip", f"{_s}_knee", 0.08),
                 (f"{_s}_knee", f"{_s}_ankle", 0.055), (f"{_s}_ankle", f"{_s}_big_toe", 0.04)]


def _marker(points: np.ndarray, name: str) -> np.ndarray:
    index = name_index()
    if name == "pelvis":
        return (points[index["left_hip"]] + points[index["right_hip"]]) / 2
    if name == "head":
        return (points[index["left_ear"]] + points[index["right_ear"]]) / 2
    return points[index[name]]


def occlusion(truth: list[np.ndarray]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per person (T, 308): the keypoint is behind another person (bool), and the depth a pointmap shows there
    (the occluder's: what the lift would read; the keypoint's own depth where not hidden)."""
    frames, (height, width) = len(truth[0]), SIZE
    rows, cols = np.mgrid[0:height, 0:width]
    hidden = [np.zeros(p.shape[:2], bool) for p in truth]
    seen_depth = [p[..., 2].copy() for p in truth]
    for f in range(frames):
        depth, owner = np.full(SIZE, np.inf), np.full(SIZE, -1)
        for who, points in enumerate(truth):
            for a, b, radius in CAPSULES:
                pa, pb = _marker(points[f], a), _marker(points[f], b)
                (xa, ya), (xb, yb) = project(pa), project(pb)
                r = FOCAL * radius / ((pa[2] + pb[2]) / 2)
                x0, x1 = int(max(min(xa, xb) - r, 0)), int(min(max(xa, xb) + r + 1, width))
                y0, y1 = int(max(min(ya, yb) - r, 0)), int(min(max(ya, yb) + r + 1, height))
                if x0 >= x1 or y0 >= y1:
                    continue
                px, py = cols[y0:y1, x0:x1], rows[y0:y1, x0:x1]
                dx, dy = xb - xa, yb - ya
                u = np.clip(((px - xa) * dx + (py - ya) * dy) / max(dx * dx + dy * dy, 1e-9), 0, 1)
                inside = (px - xa - u * dx) ** 2 + (py - ya - u * dy) ** 2 <= r * r
                z = pa[2] + u * (pb[2] - pa[2])
                nearer = inside & (z < depth[y0:y1, x0:x1])
                depth[y0:y1, x0:x1][nearer] = z[nearer]
                owner[y0:y1, x0:x1][nearer] = who
        for who, points in enumerate(truth):
            pixels = np.rint(np.nan_to_num(project(points[f]), nan=-1.0)).astype(int)
            ok = np.isfinite(points[f]).all(1) & (pixels >= 0).all(1) & (pixels < [width, height]).all(1)
            hit = np.full(len(pixels), -1)
            hit[ok] = owner[pixels[ok, 1], pixels[ok, 0]]
            cover = np.full(len(pixels), np.inf)
            cover[ok] = depth[pixels[ok, 1], pixels[ok, 0]]
            hidden[who][f] = ok & (hit >= 0) & (hit != who) & (cover < points[f, :, 2])  # someone in front
            under = hidden[who][f]
            seen_depth[who][f, under] = depth[pixels[under, 1], pixels[under, 0]]
    return hidden, seen_depth


def _heavy_depth(rng, frames: int, fps: float) -> np.ndarray:
    """(T, 308) metres: per keypoint a constant offset and a slow swing, plus white noise (a model's error at a
    keypoint is not independent from frame to frame)."""
    t = np.arange(frames)[:, None] / fps
    period, phase = rng.uniform(1.5, 4.0, NUM_KEYPOINTS), rng.uniform(0, 2 * np.pi, NUM_KEYPOINTS)
    swing = 0.02 * np.sqrt(2) * np.sin(2 * np.pi * t / period + phase)
    return rng.normal(0, 0.02, NUM_KEYPOINTS) + swing + rng.normal(0, 0.01, (frames, NUM_KEYPOINTS))


# a turning camera (tests/camera_frames.py), about its place, on top of the clip's (height, pitch, roll): a pan
# to the right over the clip (the walks and the curve move right: the person stays in view), a tilt down and back,
# a hand-held phone's shake
TURNING = {"pan": lambda frames, fps: camera_frames.pan(frames, 30.0),
           "tilt": lambda frames, fps: camera_frames.tilt(frames, 8.0),
           "shake": lambda frames, fps: camera_frames.shake(frames, fps, 2.0, 2.0)}


def turns_of(camera: tuple, frames: int, fps: float) -> np.ndarray | None:
    """(T, 3, 3) frame t's camera -> the first's for a camera with a fourth field (TURNING's), else None."""
    if len(camera) < 4 or not camera[3]:
        return None
    if camera[3] not in TURNING:
        raise ValueError(f"unknown turning camera {camera[3]!r}; one of {', '.join(TURNING)}")
    return TURNING[camera[3]](frames, fps)


def make_clip(name: str, *, noise: bool = True, faults: bool = True, seed: int = 0, fps: float = FPS,
              heavy: bool = False, seconds: float | None = None, camera: tuple = LEVEL) -> Clip:
    """The clip `name` as the models would hand it over (see the module docstring); `seconds`: only its first ones
    (the tests' shorter runs); `camera` (height, pitch, roll[, turning]) where it is seen from. With a turning
    camera the truth stays in the first frame's camera and everything observed is in each frame's own."""
    rng = np.random.default_rng([seed, CLIPS.index(name)] + ([int(fps)] if fps != FPS else []))
    truth = motion(name, fps, seconds, camera)
    frames = len(truth[0])
    turns = turns_of(camera, frames, fps)
    observed = truth if turns is None else [np.einsum("tji,tkj->tki", turns, p) for p in truth]  # R_t^T x
    body_points = np.isfinite(truth[0][0]).all(1)
    hidden, seen_depth = occlusion(observed) if name == "cross" else (None, None)
    clip = Clip(name, float(fps), truth, [], [], [], [], camera=tuple(camera), turns=turns, seed=seed)
    # the floor's error: a generator of its own (the keypoints' draws, and so every figure before, stay as they were);
    # heavy: a slowly drifting offset shared by a frame's floor pixels, as a model's depth error near the feet
    floor_rng = np.random.default_rng([seed, CLIPS.index(name), 7])
    clip.floor_y = floor_height(to_world(truth[0], camera), fps)
    clip.floor_offset = (_heavy_depth(floor_rng, frames, fps)[:, 0] if noise and heavy else np.zeros(frames))
    clip.floor_sigma = 0.01 if noise and heavy else DEPTH_NOISE if noise else 0.0
    flip = _flip()
    for who, points in enumerate(observed):
        pixels = project(points)
        depth = (points[..., 2] if seen_depth is None else seen_depth[who]).copy()  # hidden: the occluder's
        scores = np.where(body_points, 0.9, 0.0) * np.ones((frames, 1))
        if noise and heavy:
            pixels = pixels + 1.2 * rng.standard_t(3, pixels.shape)
            depth = depth + _heavy_depth(rng, frames, fps)
        elif noise:
            pixels = pixels + rng.normal(0, PIXEL_NOISE, pixels.shape)
            depth = depth + rng.normal(0, DEPTH_NOISE, depth.shape)
        inside = ((pixels >= 0) & (pixels < [SIZE[1], SIZE[0]])).all(-1)
        scores = np.where(inside, scores, 0.0)
        if hidden is not None:  # hidden keypoints: placed less surely, still above the lift's threshold
            scores = np.where(hidden[who] & body_points, 0.4, scores)
            if noise:
                pixels = pixels + np.where(hidden[who][..., None], rng.normal(0, 2.0, pixels.shape), 0)
        box_pixels, box_scores = pixels.copy(), scores.copy()  # the detector's boxes know nothing of pose faults
        swaps, faulty = [], set()
        if faults:
            busy = [f for f in range(2, frames - 2) if inside[f][body_points].mean() > 0.6
                    and (hidden is None or not hidden[who][f].any())]
            picks = []  # nine frames at least three apart: every fault a single frame between sound ones
            for f in rng.permutation(busy):
                if len(picks) < 9 and all(abs(f - g) >= 3 for g in picks):
                    picks.append(int(f))
            swaps = sorted(int(f) for f in picks[:3])
            for f in swaps:
                pixels[f], depth[f], scores[f] = pixels[f, flip], depth[f, flip], scores[f, flip]
            for f in picks[3:6]:  # 40 % junk: confident keypoints anywhere in the person's box
                junk = rng.random(NUM_KEYPOINTS) < 0.4
                low, high = np.nanmin(pixels[f][body_points], 0), np.nanmax(pixels[f][body_points], 0)
                pixels[f][junk] = rng.uniform(low, high, (junk.sum(), 2))
                depth[f][junk] = np.nanmedian(depth[f][body_points]) + rng.normal(0, 0.3, junk.sum())
            for f in picks[6:9]:  # a blurred frame: most keypoints under the lift's threshold
                scores[f][rng.random(NUM_KEYPOINTS) < 0.6] = 0.15
            faulty = {int(f) for f in picks}
            if name == "cross" and who == 1:  # the far person's keypoints land on the near one
                near = [f for f in range(frames) if hidden[1][f].mean() == 0 and hidden[0][f].mean() == 0
                        and abs(f - frames // 2) < 16]
                f = near[-1] if near else frames // 2 - 10
                pixels[f] = project(observed[0][f]) + rng.normal(0, PIXEL_NOISE, (NUM_KEYPOINTS, 2))
                depth[f] = observed[0][f][:, 2]
                faulty.add(f)
        trunk = np.zeros(NUM_KEYPOINTS, bool)
        trunk[list(range(21)) + list(range(62, 70))] = True  # body, feet, neck: not the 42 hand keypoints
        detected = inside[:, trunk].mean(1) > 0.4
        if hidden is not None:
            detected &= (hidden[who] & body_points).sum(1) < 0.5 * body_points.sum()
        boxes = []
        for f in range(frames):
            seen = (box_scores[f] > 0.3) & np.isfinite(box_pixels[f]).all(1)
            if not detected[f] or seen.sum() < 3:
                boxes.append(None)
                continue
            low, high = box_pixels[f][seen].min(0), box_pixels[f][seen].max(0)
            pad = 0.1 * (high - low)
            boxes.append(np.clip(np.concatenate([low - pad, high + pad]), 0, [SIZE[1], SIZE[0]] * 2))
        pixels = np.where(body_points[None, :, None], pixels, np.nan)
        clip.boxes.append(boxes)
        clip.keypoints.append(np.where(np.isfinite(pixels), pixels, 0.0))
        clip.scores.append(scores.astype(np.float32))
        lifted = back_project(pixels, depth)
        clip.lifted.append(np.where((scores >= 0.3)[..., None], lifted, np.nan))
        clip.swaps.append(swaps)
        clip.faulty.append(faulty)
    return clip

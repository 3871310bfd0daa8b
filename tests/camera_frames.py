"""Rendered frames for the camera's rotation (pose/camera_rotation.py): a textured panorama seen through each
frame's rotation (cv2.remap of an equirectangular noise texture), a person stand-in (an ellipse of its own texture
moving across the view, with its mask), and a camera carried through a textured room (near and far walls part).

Rotations are `to_first`: camera frame t -> the first frame's (x right, y down, z forward); `turn(yaw, pitch, roll)`
in degrees: yaw to the right, pitch up, roll clockwise as seen from behind the camera.
"""

from __future__ import annotations

import functools

import cv2
import numpy as np

TEXTURE = (2048, 4096)  # the panorama's (height, width): 0.09 degrees a pixel
FOV = 60.0  # degrees across


@functools.lru_cache(maxsize=4)
def texture(seed: int = 0, size: tuple[int, int] = TEXTURE) -> np.ndarray:
    """(H, W) uint8 noise over several scales (blobs whose crossings are corners), read-only (made once)."""
    rng = np.random.default_rng(seed)
    out = np.zeros(size, np.float32)
    for cell, weight in ((64, 1.0), (24, 0.8), (8, 0.6), (3, 0.3)):
        small = rng.normal(size=(size[0] // cell, size[1] // cell)).astype(np.float32)
        out += weight * cv2.resize(small, size[::-1], interpolation=cv2.INTER_CUBIC)
    out = (out - out.mean()) / out.std()
    out = np.clip(128 + 50 * out, 0, 255).astype(np.uint8)
    out.flags.writeable = False
    return out


def focal(width: int) -> float:
    return width / 2 / np.tan(np.radians(FOV / 2))


def turn(yaw: float, pitch: float = 0.0, roll: float = 0.0) -> np.ndarray:
    y, p, r = np.radians([yaw, pitch, roll])
    about_y = np.array([[np.cos(y), 0, np.sin(y)], [0, 1, 0], [-np.sin(y), 0, np.cos(y)]])
    about_x = np.array([[1, 0, 0], [0, np.cos(p), -np.sin(p)], [0, np.sin(p), np.cos(p)]])
    about_z = np.array([[np.cos(r), -np.sin(r), 0], [np.sin(r), np.cos(r), 0], [0, 0, 1]])
    return about_y @ about_x @ about_z


def pan(frames: int, degrees: float = 45.0) -> np.ndarray:
    """Turning right by `degrees` over the clip, easing in and out."""
    ease = (1 - np.cos(np.linspace(0, np.pi, frames))) / 2
    return np.stack([turn(degrees * e) for e in ease])


def tilt(frames: int, degrees: float = 20.0) -> np.ndarray:
    """Tilting down by `degrees` and back up."""
    return np.stack([turn(0, -degrees * np.sin(np.pi * t)) for t in np.linspace(0, 1, frames)])


def shake(frames: int, fps: float, degrees: float = 2.0, hertz: float = 2.0, seed: int = 0) -> np.ndarray:
    """A hand-held phone's shake: each axis a sum of two sines near `hertz` swinging `degrees` either side of its
    middle (so up to twice that from the first frame's view)."""
    rng = np.random.default_rng(seed)
    time = np.arange(frames) / fps
    angles = []
    for _ in range(3):
        phases, rates = rng.uniform(0, 2 * np.pi, 2), hertz * rng.uniform(0.5, 1.5, 2)
        wave = np.sin(2 * np.pi * rates[0] * time + phases[0]) + 0.5 * np.sin(2 * np.pi * rates[1] * time + phases[1])
        angles.append(degrees * (wave - wave[0]) / 1.5)
    return np.stack([turn(*a) for a in zip(*angles)])


def still(frames: int) -> np.ndarray:
    return np.repeat(np.eye(3)[None], frames, 0)


def _pixels(width: int, height: int, focal_px: float | None = None) -> np.ndarray:
    """(H*W, 3) rays through each pixel's centre, the principal point at the image's centre. (Turned column by
    column: a (H*W, 3) @ (3, 3) product through BLAS took 0.4 s on a busy 2-core machine.)"""
    u, v = np.meshgrid(np.arange(width, dtype=np.float32), np.arange(height, dtype=np.float32))
    f = focal(width) if focal_px is None else focal_px
    return np.stack([(u - (width - 1) / 2) / f, (v - (height - 1) / 2) / f, np.ones_like(u)], -1).reshape(-1, 3)


def render_turning(to_first: np.ndarray, width: int = 480, height: int = 270, person: bool = True, seed: int = 0,
                   noise: float = 2.0, panorama: np.ndarray | None = None, person_size: float = 1.0,
                   focal_px: float | None = None):
    """Yields (frame (H, W, 3) uint8 RGB, background (H, W) bool) per rotation: the panorama as the camera turned
    sees it, an ellipse of another texture drifting across it (the person, `person_size` times a standing adult's
    share of the view: background False there), pixel noise; `focal_px`: the focal length (default: FOV's)."""
    panorama = texture(seed) if panorama is None else panorama
    rays = _pixels(width, height, focal_px)
    cv2.setRNGSeed(seed + 1)  # the pixel noise (cv2.randn: a tenth of numpy's time)
    v, u = np.mgrid[0:height, 0:width].astype(np.float32)
    for t, rotation in enumerate(to_first):
        x, y, z = (sum(float(rotation[i, j]) * rays[:, j] for j in range(3)) for i in range(3))  # not BLAS: see _pixels
        azimuth = np.arctan2(x, z)
        elevation = np.arctan2(-y, np.sqrt(x * x + z * z))
        map_x = ((azimuth / (2 * np.pi) + 0.5) * panorama.shape[1]).reshape(height, width).astype(np.float32)
        map_y = ((0.5 - elevation / np.pi) * panorama.shape[0]).reshape(height, width).astype(np.float32)
        gray = cv2.remap(panorama, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_WRAP).astype(np.float32)
        background = np.ones((height, width), bool)
        if person:
            centre_x = width * (0.25 + 0.5 * t / max(1, len(to_first) - 1))
            across, up = 0.12 * width * person_size, 0.38 * height * person_size
            inside = ((u - centre_x) / across) ** 2 + ((v - 0.55 * height) / up) ** 2 < 1
            body = cv2.remap(panorama, u + 3.0 * t + 1000, v + 700, cv2.INTER_LINEAR, borderMode=cv2.BORDER_WRAP)
            gray[inside], background = body[inside], ~inside
        gray += cv2.randn(np.empty_like(gray), 0.0, noise)
        yield np.repeat(np.clip(gray, 0, 255).astype(np.uint8)[..., None], 3, -1), background


def render_walking(frames: int, fps: float, velocity=(1.0, 0.0, 0.5), width: int = 480, height: int = 270,
                   seed: int = 0):
    """(frame, background) per frame of a camera carried at `velocity` (m/s) through a textured room 6 m wide,
    3 m high, its far wall 6 m ahead and a pillar 2 m ahead: near and far things part as it moves."""
    panorama, rays = texture(seed), _pixels(width, height)
    low, high = np.array([-3.0, -1.5, -3.0]), np.array([3.0, 1.5, 6.0])
    for t in range(frames):
        origin = np.asarray(velocity) * t / fps
        with np.errstate(divide="ignore", invalid="ignore"):
            step = np.where(rays > 0, (high - origin) / rays, np.where(rays < 0, (low - origin) / rays, np.inf))
        axis, reach = step.argmin(1), step.min(1)
        hit = origin + reach[:, None] * rays
        pillar = (2.0 - origin[2]) / rays[:, 2]  # a plane 2 m ahead, 1 m wide, in front of the far wall
        on_pillar = (pillar > 0) & (pillar < reach) & (np.abs(origin[0] + pillar * rays[:, 0] - 0.5) < 0.5)
        hit[on_pillar] = origin + pillar[on_pillar, None] * rays[on_pillar]
        axis[on_pillar] = 2
        rows = np.arange(len(hit))
        across, down = hit[rows, np.array([2, 0, 0])[axis]], hit[rows, np.array([1, 2, 1])[axis]]  # on each wall
        map_x = (200 * across + 900 * axis + 1500 * on_pillar).reshape(height, width).astype(np.float32)
        map_y = (200 * down + 600).reshape(height, width).astype(np.float32)
        gray = cv2.remap(panorama, map_x, map_y, cv2.INTER_LINEAR, borderMode=cv2.BORDER_WRAP)
        yield np.repeat(gray[..., None], 3, -1), np.ones((height, width), bool)


def errors(estimated: np.ndarray, truth: np.ndarray) -> dict[str, float]:
    """Degrees: the worst error of a frame's turn from the frame before (`per_frame`), and the worst of a frame's
    rotation from the first over the clip (`drift`), of (T, 3, 3) camera -> first frame rotations."""
    from sapiens2_demo.pose.camera_rotation import rotation_degrees

    step_estimated = np.transpose(estimated[:-1], (0, 2, 1)) @ estimated[1:]
    step_truth = np.transpose(truth[:-1], (0, 2, 1)) @ truth[1:]
    per_frame = rotation_degrees(np.transpose(step_estimated, (0, 2, 1)) @ step_truth)
    drift = rotation_degrees(np.transpose(estimated, (0, 2, 1)) @ truth)
    return {"per_frame": float(per_frame.max()), "drift": float(drift.max())}


def estimate(frames, mask: bool = True):
    """Every rendered (frame, background) through a RotationTracker, solved with the renderer's focal length."""
    from sapiens2_demo.pose.camera_rotation import RotationTracker

    tracker = RotationTracker()
    width = None
    for frame, background in frames:
        width = frame.shape[1]
        tracker.add(frame, background if mask else None)
    return tracker.solve(focal(width))

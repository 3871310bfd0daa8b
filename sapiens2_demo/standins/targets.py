"""Synthetic training targets for the stand-in checkpoints (standins/train.py), from the three bundled photos.

Each photo has a hand-drawn person layout (ellipses and polygons, in the photo's pixels) from which we compute,
all deterministically: a person mask, body parts (regions of the layout), a smooth depth (a bulge inside the
mask in front of a far background), normals from that depth, an alpha matte (the mask softened) and 308
keypoints (17 body anchors; hand, foot and face points on small fixed patterns around their anchor). These
are not labels of the photos, only shapes with the structure real outputs have.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

ASSETS = Path(__file__).resolve().parents[2] / "assets"
PHOTOS = ("astronaut", "grace_hopper", "camera")  # public domain: NASA; US Navy; skimage's cameraman

# Layouts, painted in order (later shapes win): ("ellipse", part, (cx, cy, rx, ry)) or ("poly", part, points).
_LAYOUTS = {
    "astronaut": [
        ("poly", "Upper_Clothing", [(120, 180), (300, 170), (350, 280), (365, 512), (30, 512), (45, 300)]),
        ("poly", "Right_Upper_Arm", [(45, 290), (110, 300), (115, 420), (25, 420)]),
        ("poly", "Right_Lower_Arm", [(25, 420), (115, 420), (130, 512), (20, 512)]),
        ("poly", "Left_Upper_Arm", [(300, 260), (355, 290), (362, 420), (305, 420)]),
        ("ellipse", "Hair", (228, 95, 74, 88)),
        ("ellipse", "Face_Neck", (228, 125, 54, 62)),
        ("poly", "Face_Neck", [(195, 160), (262, 160), (268, 205), (190, 205)]),
    ],
    "grace_hopper": [
        ("poly", "Upper_Clothing", [(200, 330), (320, 330), (440, 390), (512, 450), (512, 600), (20, 600),
                                    (40, 420), (110, 370)]),
        ("ellipse", "Apparel", (262, 95, 105, 65)),
        ("ellipse", "Face_Neck", (258, 228, 95, 112)),
        ("poly", "Face_Neck", [(212, 300), (305, 300), (310, 365), (208, 365)]),
    ],
    "camera": [
        ("poly", "Upper_Clothing", [(130, 110), (180, 170), (240, 205), (300, 195), (330, 235), (250, 285),
                                    (200, 330), (150, 400), (150, 512), (0, 512), (0, 200), (60, 150)]),
        ("poly", "Lower_Clothing", [(95, 430), (150, 420), (150, 512), (95, 512)]),
        ("poly", "Left_Lower_Arm", [(170, 205), (255, 215), (255, 275), (170, 268)]),
        ("ellipse", "Left_Hand", (300, 205, 34, 30)),
        ("ellipse", "Hair", (210, 100, 52, 42)),
        ("ellipse", "Face_Neck", (225, 152, 40, 52)),
    ],
}

# 17 body anchors per photo (x, y) in the photo's pixels; points outside the photo are allowed (legs).
_ANCHOR_NAMES = ("nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
                 "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee",
                 "right_knee", "left_ankle", "right_ankle")
_ANCHORS = {
    "astronaut": [(228, 128), (252, 105), (205, 105), (292, 118), (164, 118), (330, 262), (92, 262), (360, 420),
                  (55, 430), (300, 495), (150, 500), (300, 620), (130, 620), (300, 800), (140, 800), (300, 980),
                  (140, 980)],
    "grace_hopper": [(255, 248), (308, 198), (210, 198), (352, 228), (163, 228), (430, 392), (95, 396),
                     (500, 590), (30, 590), (480, 750), (50, 750), (400, 800), (130, 800), (400, 1000),
                     (130, 1000), (400, 1200), (130, 1200)],
    "camera": [(262, 162), (247, 142), (256, 140), (195, 142), (232, 140), (165, 178), (110, 188), (190, 282),
               (150, 300), (285, 228), (300, 200), (130, 420), (90, 430), (130, 560), (95, 570), (130, 690),
               (95, 700)],
}
BACKGROUND_DEPTH = (3.0, 2.8)  # metres at the photo's top and bottom: a plane behind the person (at 2 m)
_FACE_START = 70  # keypoints 70-307 are the face
_KEYPOINTS_FILE = Path(__file__).resolve().parents[1] / "data" / "keypoints308.json"


@dataclass
class Scene:
    """One photo and its synthetic targets, all at the photo's resolution (H, W)."""

    image: np.ndarray  # (H, W, 3) uint8 RGB
    parts: np.ndarray  # (H, W) uint8 seg29 class ids, 0 = background
    depth: np.ndarray  # (H, W) float32 metres
    normals: np.ndarray  # (H, W, 3) float32 unit vectors, (0, 0, 1) faces the camera
    alpha: np.ndarray  # (H, W) float32 in [0, 1]
    keypoints: np.ndarray  # (308, 2) float32 x y in the photo's pixels


def seg_classes() -> list[str]:
    return json.loads((Path(__file__).resolve().parents[1] / "data" / "seg29.json").read_text())["classes"]


def load_photo(name: str) -> np.ndarray:
    from PIL import Image

    return np.asarray(Image.open(ASSETS / f"{name}.jpg").convert("RGB"))


def build_scene(name: str) -> Scene:
    import cv2

    image = load_photo(name)
    h, w = image.shape[:2]
    classes = seg_classes()
    parts = np.zeros((h, w), np.uint8)
    for kind, part, shape in _LAYOUTS[name]:
        value = classes.index(part)
        if kind == "ellipse":
            cx, cy, rx, ry = shape
            cv2.ellipse(parts, (cx, cy), (rx, ry), 0, 0, 360, value, thickness=-1)
        else:
            cv2.fillPoly(parts, [np.asarray(shape, np.int32)], value)
    mask = parts > 0
    bulge = _bulge(mask)
    background = np.linspace(*BACKGROUND_DEPTH, h, dtype=np.float32)[:, None].repeat(w, 1)
    depth = np.where(mask, 2.0 - 0.3 * bulge, background).astype(np.float32)
    alpha = cv2.GaussianBlur(mask.astype(np.float32), (0, 0), 2.0)
    # Normals of the person's surface alone: the jump to the far background is an edge, not a slope.
    return Scene(image, parts, depth, normals_from_depth(2.0 - 0.3 * bulge), alpha, _keypoints308(name))


def _bulge(mask: np.ndarray) -> np.ndarray:
    """0 outside the person, rising smoothly to 1 in their middle (a smoothed distance to the mask's edge):
    the person stands at 2 m and bulges 0.3 m towards the camera; the background is far (4 to 3.5 m)."""
    import cv2

    inside = cv2.distanceTransform(mask.astype(np.uint8), cv2.DIST_L2, 5)
    bulge = np.sqrt(np.clip(inside / max(float(inside.max()), 1.0), 0, 1))
    return cv2.GaussianBlur(bulge.astype(np.float32), (0, 0), 6.0)


def normals_from_depth(depth: np.ndarray) -> np.ndarray:
    """Unit normals (-dz/dx, -dz/dy, 1) of the smoothed depth, per pixel in units of the image's width."""
    import cv2

    smooth = cv2.GaussianBlur(depth, (0, 0), 3.0)
    gy, gx = np.gradient(smooth * depth.shape[1] / 4.0)
    normals = np.stack([-gx, -gy, np.ones_like(gx)], axis=-1)
    return (normals / np.linalg.norm(normals, axis=-1, keepdims=True)).astype(np.float32)


def flip_indices() -> np.ndarray:
    return np.asarray(json.loads(_KEYPOINTS_FILE.read_text())["flip_indices"], np.int64)


def _keypoints308(name: str) -> np.ndarray:
    """Each of the 308 keypoints at its body anchor, or on a small fixed pattern around one: hands around the
    wrists, feet around the ankles, the face's 238 points on a spiral around the nose sized by the eyes."""
    names = json.loads(_KEYPOINTS_FILE.read_text())["names"]
    anchors = dict(zip(_ANCHOR_NAMES, np.asarray(_ANCHORS[name], np.float32)))
    eye_gap = float(np.linalg.norm(anchors["left_eye"] - anchors["right_eye"])) + 4.0
    points = np.zeros((len(names), 2), np.float32)
    flip = flip_indices()
    for i, key in enumerate(names):
        side = "left" if key.startswith(("left", "l_")) else "right" if key.startswith(("right", "r_")) else ""
        if key in anchors:
            points[i] = anchors[key]
        elif any(part in key for part in ("thumb", "finger", "wrist")):
            points[i] = anchors[f"{side}_wrist"] + _offset(i, flip, 0.6 * eye_gap)
        elif any(part in key for part in ("toe", "heel")):
            points[i] = anchors[f"{side}_ankle"] + _offset(i, flip, 0.6 * eye_gap)
        elif "olecranon" in key or "cubital" in key:
            points[i] = anchors[f"{side}_elbow"]
        elif "acromion" in key:
            points[i] = anchors[f"{side}_shoulder"]
        elif key == "neck":
            points[i] = 0.5 * (anchors["left_shoulder"] + anchors["right_shoulder"])
        else:  # the face: left-side points nearer the left eye, right-side nearer the right eye
            centre = anchors[f"{side}_eye"] if side else anchors["nose"]
            points[i] = 0.5 * (centre + anchors["nose"]) + _offset(i, flip, 0.9 * eye_gap)
    return points


def keypoint_weights() -> np.ndarray:
    """Per keypoint map, its weight in the loss: the face's 238 maps would otherwise outweigh the body's few
    (a 3D lift needs the hips and neck); each group (body, hands and feet, face) weighs the same in all."""
    names = json.loads(_KEYPOINTS_FILE.read_text())["names"]
    hands_feet = [any(part in name for part in ("thumb", "finger", "toe", "heel")) for name in names]
    group = np.where(np.arange(len(names)) >= _FACE_START, 2, np.where(hands_feet, 1, 0))
    counts = np.bincount(group, minlength=3)
    weights = len(names) / (3 * counts[group])
    return (weights / weights.mean()).astype(np.float32)


def _offset(i: int, flip: np.ndarray, radius: float) -> np.ndarray:
    """A point of a golden-angle spiral of `radius`, mirrored between left/right partners (so a flipped photo's
    targets are the flipped targets), on the midline for points that are their own partner."""
    base = min(i, int(flip[i]))
    r, angle = radius * np.sqrt((base * 0.618) % 1.0), base * np.pi * (3 - np.sqrt(5))
    x = 0.0 if flip[i] == i else r * np.cos(angle) * (-1 if i > flip[i] else 1)
    return np.array([x, r * np.sin(angle)], np.float32)


# -- augmented samples at the model input size ----------------------------------------------------

def dense_samples(scenes, input_hw, count, rng) -> dict[str, np.ndarray]:
    """Augmented whole-image samples at the model input size: a random crop (area and aspect), a mirror,
    colour jitter, then either stretched to the input (seg/matting pre-processing) or letterboxed into it
    (normal/pointmap's keep-aspect padding; the padding is marked invalid)."""
    import cv2

    in_h, in_w = input_hw
    mirror = _mirrored_classes()
    out = {key: [] for key in ("pixels", "parts", "unit_normals", "points", "matte", "valid", "boxed")}
    for index in range(count):
        scene = scenes[index % len(scenes)]
        h, w = scene.parts.shape
        area, aspect = rng.uniform(0.6, 1.0), rng.uniform(0.7, 1.3)
        cw, ch = min(w, int(w * np.sqrt(area * aspect))), min(h, int(h * np.sqrt(area / aspect)))
        x0, y0 = int(rng.integers(0, w - cw + 1)), int(rng.integers(0, h - ch + 1))
        crop = (slice(y0, y0 + ch), slice(x0, x0 + cw))
        image, parts = scene.image[crop], scene.parts[crop]
        normals, depth, alpha = scene.normals[crop], scene.depth[crop], scene.alpha[crop]
        if rng.random() < 0.5:
            image, parts, depth, alpha = image[:, ::-1], mirror[parts[:, ::-1]], depth[:, ::-1], alpha[:, ::-1]
            normals = normals[:, ::-1] * np.float32([-1, 1, 1])
        image = _jitter(image, rng)
        boxed = rng.random() >= 0.5
        if not boxed:  # stretch
            top, left, new_h, new_w = 0, 0, in_h, in_w
        else:  # letterbox, centred
            scale = min(in_h / ch, in_w / cw)
            new_h, new_w = int(ch * scale), int(cw * scale)
            top, left = (in_h - new_h) // 2, (in_w - new_w) // 2
        box = (slice(top, top + new_h), slice(left, left + new_w))

        def place(values, fill, interpolation=cv2.INTER_LINEAR, box=box, size=(new_w, new_h)):
            canvas = np.full((in_h, in_w, *values.shape[2:]), fill, values.dtype)
            canvas[box] = cv2.resize(np.ascontiguousarray(values), size, interpolation=interpolation)
            return canvas

        pixels = place(image, 0)
        z = place(depth, 4.0)
        vv, uu = np.mgrid[0:in_h, 0:in_w].astype(np.float32)
        focal = float(max(new_w, new_h))
        points = np.stack([(uu - in_w / 2) / focal * z, (vv - in_h / 2) / focal * z, z])
        alpha_in = place(alpha, 0.0)
        foreground = pixels.astype(np.float32) / 255 * alpha_in[..., None]
        out["pixels"].append(_normalise(pixels))
        out["parts"].append(place(parts, 255, cv2.INTER_NEAREST))
        out["unit_normals"].append(place(normals, 0.0).transpose(2, 0, 1))
        out["points"].append(points)
        out["matte"].append(np.concatenate([foreground.transpose(2, 0, 1), alpha_in[None]]))
        out["valid"].append(place(np.ones((ch, cw), np.float32), 0.0))
        out["boxed"].append(np.float32(boxed))
    return {key: np.ascontiguousarray(np.stack(values)) for key, values in out.items()}


def _mirrored_classes() -> np.ndarray:
    """Class id -> the id of its mirror image (Left_X <-> Right_X), as a look-up table (255 stays 255)."""
    classes = seg_classes()
    table = np.arange(256, dtype=np.uint8)
    for i, name in enumerate(classes):
        for a, b in (("Left_", "Right_"), ("Right_", "Left_")):
            if name.startswith(a):
                table[i] = classes.index(b + name[len(a):])
    return table


def _jitter(image: np.ndarray, rng) -> np.ndarray:
    """Brightness, contrast and saturation each scaled by up to +-25 %."""
    values = image.astype(np.float32)
    grey = values.mean(axis=2, keepdims=True)
    values = grey + (values - grey) * rng.uniform(0.75, 1.25)
    values = (values - values.mean()) * rng.uniform(0.75, 1.25) + values.mean() * rng.uniform(0.75, 1.25)
    return np.clip(values, 0, 255).astype(np.uint8)


def _normalise(pixels: np.ndarray) -> np.ndarray:
    """uint8 (h, w, 3) -> (3, h, w) float32 as the processor's rescale and ImageNet normalisation."""
    from transformers.image_utils import IMAGENET_DEFAULT_MEAN, IMAGENET_DEFAULT_STD

    values = pixels.astype(np.float32) / 255
    values = (values - np.float32(IMAGENET_DEFAULT_MEAN)) / np.float32(IMAGENET_DEFAULT_STD)
    return values.transpose(2, 0, 1)


def pose_samples(scenes, input_hw, count, sigma, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Person crops as the processor makes them (transformers' crop_and_resize: box padded 1.25, input
    aspect) around jittered boxes of the person, mirrored half the time (keypoints swap sides),
    colour-jittered; UDP Gaussian heatmap targets, and which keypoints are in the crop (the others have none)."""
    import torch
    from transformers.models.sapiens2.image_processing_sapiens2 import (
        boxes_to_crop_params,
        crop_and_resize,
        generate_udp_gaussian_heatmaps,
    )

    flip = flip_indices()
    pixels, targets, seen = [], [], []
    for index in range(count):
        scene = scenes[index % len(scenes)]
        h, w = scene.parts.shape
        ys, xs = np.nonzero(scene.parts)
        image, keypoints = scene.image, scene.keypoints.copy()
        x0, y0, x1, y1 = xs.min(), ys.min(), xs.max() + 1, ys.max() + 1
        if rng.random() < 0.5:
            image, keypoints = image[:, ::-1], keypoints[flip] * np.float32([-1, 1]) + np.float32([w - 1, 0])
            x0, x1 = w - x1, w - x0
        size = np.array([x1 - x0, y1 - y0], np.float32) * rng.uniform(0.8, 1.15)
        centre = np.array([x0 + x1, y0 + y1], np.float32) / 2 + rng.uniform(-0.08, 0.08, 2) * size
        box = [*(centre - size / 2).tolist(), *size.tolist()]  # x y w h
        cxcywh = torch.tensor([[*centre.tolist(), *size.tolist()]])
        crop_centre, crop_size = (t[0].numpy() for t in boxes_to_crop_params(cxcywh, output_size=input_hw))
        # Keypoints outside the photo or the crop have no target (as unlabelled ones in real training): the
        # legs below the frame must not teach the hips' maps to peak at the crop's edge.
        low = np.maximum(crop_centre - crop_size / 2, 0)
        high = np.minimum(crop_centre + crop_size / 2, np.float32([w, h]))
        seen.append(((keypoints >= low) & (keypoints < high)).all(axis=1))
        tensor = torch.from_numpy(np.ascontiguousarray(image).transpose(2, 0, 1).astype(np.float32))
        crop = crop_and_resize(tensor, cxcywh, output_size=input_hw)[0].clamp(0, 255)
        pixels.append(_normalise(_jitter(crop.permute(1, 2, 0).numpy().round().astype(np.uint8), rng)))
        heatmaps, _ = generate_udp_gaussian_heatmaps([[box]], [[keypoints.tolist()]], output_size=input_hw,
                                                     downscale_factor=4, sigma=sigma)
        targets.append(heatmaps[0].numpy())
    return (np.stack(pixels).astype(np.float32), np.stack(targets).astype(np.float32),
            np.stack(seen).astype(np.float32))

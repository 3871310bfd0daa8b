"""Stand-in checkpoints: the tiny Sapiens2 configs (standins/tiny.py) trained for a short while (a few CPU
minutes) on synthetic targets, so their outputs have the structure of real ones. THEY ARE STAND-INS, NOT MODELS: their answers
are shapes learnt from three photos (standins/targets.py), not estimates of anything.

Why: random weights make every map noise, the worst case of every content-dependent cost (the slow pose
decode path, PNGs of noise, label upsampling, video encoding). Stand-ins give body parts as a few large
regions, smooth normals and depth, a matte that follows the person, one clear peak per keypoint and
smoothly varying features, so speed figures measured on them resemble real ones.

    python -m sapiens2_demo.standins DIR --trained [--detector]

Training is deterministic (fixed seeds, deterministic torch algorithms, no download; bit-for-bit only with
the same torch build and thread count): one shared backbone with the four dense heads (segmentation,
normals, pointmap, matting) on whole-image samples, its backbone also saved as the pretrain checkpoint; the
pose model on person crops, its body maps weighing as much as the face's (so the hips and neck land near their
targets and a video's 3D motion can be lifted on the stand-ins). Same layout and loading path as the
random-weight tiny checkpoints.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from ..models.registry import BACKBONE_FAMILY, DENSE_FAMILIES, POSE_FAMILY, TASKS
from .targets import PHOTOS, build_scene, flip_indices, keypoint_weights, seg_classes

DENSE_TASKS = DENSE_FAMILIES  # trained on one shared backbone, in the registry's order: seg, normal, pointmap, matting
SEED = 0
DENSE_STEPS, POSE_STEPS, BATCH = 250, 800, 4
SAMPLES_PER_PHOTO = 24
POSE_LR = 5e-3
HEATMAP_SIGMA = 3.0  # at the tiny 64x48 heatmaps (the released 256x192 ones use 6): wide, so learnt fast


def standin_key() -> str:
    """A hash of everything that decides the stand-ins' weights: this package's code (as syntax trees without
    docstrings, so editing a comment or a docstring keeps the cached ones), the photos and the torch version."""
    import torch

    here = Path(__file__).resolve().parent
    digest = hashlib.sha256(torch.__version__.encode())
    for name in ("train.py", "targets.py", "tiny.py"):
        digest.update(_code_only(here / name).encode())
    for name in PHOTOS:
        digest.update((here.parents[1] / "assets" / f"{name}.jpg").read_bytes())
    return digest.hexdigest()[:16]


def _code_only(path: Path) -> str:
    import ast

    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(body, list) and body and isinstance(body[0], ast.Expr)
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    return ast.dump(tree)


def write_standins(root: Path, log=print) -> Path:
    """Train and write every task's stand-in checkpoint (the smallest size, as write_all) under root."""
    import torch

    from .tiny import TINY_INPUT, save_checkpoint

    root = Path(root)
    deterministic = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        scenes = [build_scene(name) for name in PHOTOS]
        dense_models, backbone = _train_dense(scenes, TINY_INPUT, log)
        for task, model in dense_models.items():
            save_checkpoint(model, task, root)
        save_checkpoint(backbone, BACKBONE_FAMILY, root)
        save_checkpoint(_train_pose(scenes, TINY_INPUT, log), POSE_FAMILY, root)
    finally:
        torch.use_deterministic_algorithms(deterministic)
    (root / "STANDINS.txt").write_text("Stand-in checkpoints (sapiens2_demo/standins): tiny Sapiens2 configs trained "
                                       "a few CPU minutes on synthetic targets. Not models: their outputs are "
                                       f"shapes, not estimates.\nkey {standin_key()}\n")
    return root


def cached_standins(base: Path | str = "/tmp", detector: bool = True, log=print) -> Path:
    """The stand-ins (and a random-weight YOLOv8n at yolov8n-random.pt) under base/sapiens2-standins-<key>,
    trained only when that folder is missing: the key changes with the training code, so a rerun is free."""
    import os
    import shutil

    from .tiny import write_tiny_detector

    final = Path(base) / f"sapiens2-standins-{standin_key()}"
    if (final / "STANDINS.txt").exists():
        return final
    building = Path(base) / f"{final.name}.building-{os.getpid()}"
    shutil.rmtree(building, ignore_errors=True)
    write_standins(building, log=log)
    if detector:
        write_tiny_detector(building / "yolov8n-random.pt")
    try:
        building.rename(final)
    except OSError:  # another process finished first: theirs is the same
        shutil.rmtree(building, ignore_errors=True)
    return final


# -- dense tasks: one backbone, four heads --------------------------------------------------------

def _train_dense(scenes, input_hw, log):
    import torch
    import torch.nn.functional as F
    import transformers

    from .tiny import tiny_config

    torch.manual_seed(SEED)
    models = {task: getattr(transformers, TASKS[task].auto_class).from_config(tiny_config(task))
              for task in DENSE_TASKS}
    seg, normal, pointmap, matting = models.values()
    backbone = seg.model
    for model in models.values():
        model.model = backbone  # one shared backbone: trained once, saved into every checkpoint
    samples = _dense_samples(scenes, input_hw, np.random.default_rng(SEED))
    with torch.no_grad():  # instance norms leave the absolute depth to the last bias: start it at the mean
        valid = samples["valid"][:, None]
        mean = (samples["points"] * valid).sum(axis=(0, 2, 3)) / valid.sum()
        pointmap.decode_head.predictor.bias.copy_(torch.from_numpy(mean.astype(np.float32)))
    params = list({id(p): p for m in models.values() for p in m.parameters()}.values())
    optimiser = torch.optim.AdamW(params, lr=3e-3, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=3e-3, total_steps=DENSE_STEPS)
    rng = np.random.default_rng(SEED + 1)
    config = seg.config
    patches = (input_hw[0] // config.patch_size, input_hw[1] // config.patch_size)
    for model in models.values():
        model.train()
    for step in range(DENSE_STEPS):
        pick = rng.choice(len(samples["pixels"]), BATCH, replace=False)
        batch = {key: torch.from_numpy(value[pick]) for key, value in samples.items()}
        tokens = backbone(pixel_values=batch["pixels"]).last_hidden_state[:, 1 + config.num_register_tokens:]
        features = tokens.transpose(1, 2).reshape(BATCH, -1, *patches)
        logits = seg.decode_head(features)
        labels = batch["parts"][:, 2::4, 2::4].long()  # the label at each logit's centre (ignore: 255)
        seg_loss = F.cross_entropy(logits, labels, ignore_index=255)
        # The full-resolution heads dominate a step's cost: each sees one sample of the batch, a different one,
        # whole (a window would be cheaper, but their instance norms would then learn a window's statistics and
        # be off on the whole image they see at inference).
        one, target, valid = _whole(features, batch, 0, "normals")
        normals = normal.decode_head(one)
        # Smooth unit targets: steps between neighbouring pixels cost too (the pixel shuffle leaves a grid),
        # and so does a length far from 1 (near 0, normalising would turn noise into directions).
        length = normals.pow(2).sum(dim=1).sqrt()
        normal_loss = _masked_mse(normals, target, valid) + 40 * _steps(normals) + (length - 1).pow(2).mean()
        one, target, valid = _whole(features, batch, 1, "points")
        scales = pointmap.scale_head(features)
        # Depth smooth on the person, as the 3D lift needs it (its median window refuses a spread depth).
        points = pointmap.decode_head(one)
        point_loss = (_masked_mse(points, target, valid) + _steps(points)
                      + F.mse_loss(scales, torch.ones_like(scales)))
        one, target, valid = _whole(features, batch, 2, "matte")
        matte_loss = _masked_mse(matting.decode_head(one).sigmoid(), target, valid) * 4
        # The first feature channel follows the matte, and neighbouring patches stay alike.
        guide = F.adaptive_avg_pool2d(batch["matte"][:, 3:] * 2 - 1, patches)
        feature_loss = F.mse_loss(features[:, :1], guide) + _roughness(features)
        loss = seg_loss + normal_loss + point_loss + matte_loss + 0.1 * feature_loss
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        if step % 50 == 0 or step == DENSE_STEPS - 1:
            log(f"dense step {step:4d}: loss {loss.item():.3f} (seg {seg_loss.item():.3f}, normals "
                f"{normal_loss.item():.3f}, pointmap {point_loss.item():.3f}, matting {matte_loss.item():.3f})")
    pretrain = getattr(transformers, TASKS[BACKBONE_FAMILY].auto_class).from_config(tiny_config(BACKBONE_FAMILY))
    pretrain.load_state_dict(backbone.state_dict())
    return {task: model.eval() for task, model in models.items()}, pretrain.eval()


def _whole(features, batch, i, key):
    """Sample i's features, its `key` target and valid pixels, each as a batch of one."""
    return features[i:i + 1], batch[key][i:i + 1], batch["valid"][i:i + 1, None]


def _masked_mse(prediction, target, valid):
    return (((prediction - target) ** 2) * valid).sum() / (valid.sum() * prediction.shape[1]).clamp_min(1)


def _steps(maps):
    """Mean squared difference between neighbouring pixels."""
    return (maps[..., 1:] - maps[..., :-1]).pow(2).mean() + (maps[..., 1:, :] - maps[..., :-1, :]).pow(2).mean()


def _roughness(features):
    """Mean squared difference between neighbouring patches, relative to the features' spread."""
    dx = (features[..., 1:] - features[..., :-1]).pow(2).mean()
    dy = (features[..., 1:, :] - features[..., :-1, :]).pow(2).mean()
    return (dx + dy) / features.var().clamp_min(1e-6)


def _dense_samples(scenes, input_hw, rng) -> dict[str, np.ndarray]:
    """Augmented whole-image samples at the model input size: a random crop (area and aspect), a mirror,
    colour jitter, then either stretched to the input (seg/matting pre-processing) or letterboxed into it
    (normal/pointmap's keep-aspect padding; the padding is marked invalid)."""
    import cv2

    in_h, in_w = input_hw
    mirror = _mirrored_classes()
    out = {key: [] for key in ("pixels", "parts", "normals", "points", "matte", "valid")}
    for index in range(SAMPLES_PER_PHOTO * len(scenes)):
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
        if rng.random() < 0.5:  # stretch
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
        out["normals"].append(place(normals, 0.0).transpose(2, 0, 1))
        out["points"].append(points)
        out["matte"].append(np.concatenate([foreground.transpose(2, 0, 1), alpha_in[None]]))
        out["valid"].append(place(np.ones((ch, cw), np.float32), 0.0))
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


# -- pose: person crops ----------------------------------------------------------------------------

def _train_pose(scenes, input_hw, log):
    import torch
    import transformers

    from .tiny import tiny_config

    torch.manual_seed(SEED)
    model = getattr(transformers, TASKS[POSE_FAMILY].auto_class).from_config(tiny_config(POSE_FAMILY))
    pixels, heatmaps, seen = _pose_samples(scenes, input_hw, np.random.default_rng(SEED + 2))
    optimiser = torch.optim.AdamW(model.parameters(), lr=POSE_LR, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=POSE_LR, total_steps=POSE_STEPS)
    rng = np.random.default_rng(SEED + 3)
    weights = torch.from_numpy(keypoint_weights())[None, :, None, None]
    model.train()
    for step in range(POSE_STEPS):
        pick = rng.choice(len(pixels), BATCH, replace=False)
        target = torch.from_numpy(heatmaps[pick])
        mask = weights * torch.from_numpy(seen[pick])[:, :, None, None]
        predicted = model(pixel_values=torch.from_numpy(pixels[pick])).heatmaps
        # The peaks weigh more than the empty rest, or the maps would learn to be flat; keypoints outside the
        # crop weigh nothing, and each group of maps (body, hands and feet, face) weighs the same.
        loss = (((predicted - target) ** 2) * (1 + 20 * target) * mask).mean() * 100
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        if step % 50 == 0 or step == POSE_STEPS - 1:
            log(f"pose step {step:4d}: loss {loss.item():.4f}")
    return model.eval()


def _pose_samples(scenes, input_hw, rng) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
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
    for index in range(SAMPLES_PER_PHOTO * len(scenes)):
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
                                                     downscale_factor=4, sigma=HEATMAP_SIGMA)
        targets.append(heatmaps[0].numpy())
    return (np.stack(pixels).astype(np.float32), np.stack(targets).astype(np.float32),
            np.stack(seen).astype(np.float32))

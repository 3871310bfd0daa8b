"""Stand-in checkpoints: the tiny Sapiens2 configs (standins/tiny.py) trained for a short while (about two CPU
minutes) on synthetic targets, so their outputs have the structure of real ones. THEY ARE STAND-INS, NOT MODELS:
their answers are shapes learnt from three photos (standins/targets.py), not estimates of anything.

Why: random weights make every map noise, the worst case of every content-dependent cost (the slow pose
decode path, PNGs of noise, label upsampling, video encoding), and their 3D is no shape at all. Stand-ins give
body parts as a few large regions, smooth normals, a pointmap shaped like the person (a smooth body surface in
front of a background), a matte that follows the person, one clear peak per keypoint and smoothly varying
features, so speed figures measured on them resemble real ones and the 3D views show a person.

    python -m sapiens2_demo.standins --trained [--detector]       # built once into the user's cache, reused

Training is deterministic (fixed seeds, deterministic torch algorithms, no download; bit-for-bit only with
the same torch build and thread count): one shared backbone with the four dense heads (segmentation,
normals, pointmap, matting) on whole-image samples, its backbone also saved as the pretrain checkpoint; the
pose model on person crops, its body maps weighing as much as the face's (so the hips and neck land near their
targets and a video's 3D motion can be lifted on the stand-ins). Same layout and loading path as the
random-weight tiny checkpoints.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import sys
import threading
from pathlib import Path

import numpy as np

from ..models.registry import BACKBONE_FAMILY, DENSE_FAMILIES, POSE_FAMILY, TASKS
from .targets import PHOTOS, build_scene, dense_samples, keypoint_weights, pose_samples

DENSE_TASKS = DENSE_FAMILIES  # trained on one shared backbone, in the registry's order: seg, normal, pointmap, matting
SEED = 0
DENSE_STEPS, POSE_STEPS, BATCH = 250, 650, 4
SAMPLES_PER_PHOTO = 24
POSE_LR = 1e-2
POINT_XYZ_WEIGHTS, POSITION_WEIGHT, Z_GAIN = (3.0, 3.0, 3.0), 5.0, -0.3  # see _train_dense, _position_path
HEATMAP_SIGMA = 3.0  # at the tiny 64x48 heatmaps (the released 256x192 ones use 6): wide, so learnt fast
BUILD_MINUTES = 2  # what a build takes on 2 idle cores (docs/standins.md has the figures), for the notice
MARKER = "STANDINS.txt"  # the app reads it: these checkpoints are stand-ins


_KEY_LOCK = threading.Lock()


def standin_key() -> str:
    """A hash of everything that decides the stand-ins' weights: this package's code (as syntax trees without
    docstrings, so editing a comment or a docstring keeps the cached ones), the photos and the torch version.
    Worked out once per process, under a lock: CPython 3.11's ast.parse is not safe in two threads at once
    (SystemError "AST constructor recursion depth mismatch", as when two first requests build stand-ins)."""
    with _KEY_LOCK:
        return _standin_key()


@functools.cache
def _standin_key() -> str:
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


def cache_dir() -> Path:
    """The user's cache for built stand-ins: $XDG_CACHE_HOME/sapiens2-demo, else ~/.cache/sapiens2-demo."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sapiens2-demo"


def cached_standins(base: Path | str | None = None, detector: bool = True, log=None, progress: bool = True) -> Path:
    """The stand-ins (and a random-weight YOLOv8n at yolov8n-random.pt) in base/standins-<key> (base: the user's
    cache_dir()), built only when missing: the key changes with the training code, so a rerun is free. `log` gets
    what is about to happen (default: stderr). One builder at a time (a lock file): the others wait for its set.
    A set appears whole or not at all (built in a temporary folder beside it, then renamed)."""
    import shutil
    import tempfile

    from .tiny import write_tiny_detector

    say = log or (lambda message: print(message, file=sys.stderr, flush=True))
    if base is None:
        base = cache_dir()
        with contextlib.suppress(OSError):  # a home without a writable cache: the temporary folder instead
            base.mkdir(parents=True, exist_ok=True)
        if not os.access(base, os.W_OK):
            base = Path(tempfile.gettempdir()) / "sapiens2-demo"
    base = Path(base)
    final = base / f"standins-{standin_key()}"
    if (final / MARKER).exists():
        say(f"Stand-in checkpoints: reusing {final}")
        return final
    base.mkdir(parents=True, exist_ok=True)
    with _exclusive(base / f"{final.name}.lock", say):
        if (final / MARKER).exists():  # built by the process we waited for
            say(f"Stand-in checkpoints: reusing {final}")
            return final
        say(f"Stand-in checkpoints: none built yet for this version of their training code. Training them now, once "
            f"(tiny Sapiens2 configs on synthetic targets; stand-ins, not models; about {BUILD_MINUTES} minutes on 2 "
            f"idle cores), then kept in {final} and reused.")
        building = Path(tempfile.mkdtemp(prefix=f"{final.name}.building-", dir=base))
        try:
            write_standins(building, progress=progress)
            if detector:
                write_tiny_detector(building / "yolov8n-random.pt")
            building.rename(final)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
    return final


@contextlib.contextmanager
def _exclusive(path: Path, say):
    """An exclusive lock on `path` while inside (none where fcntl is missing: then two builders both train, and
    the rename lets one set win)."""
    try:
        import fcntl
    except ImportError:  # not POSIX
        yield
        return
    with open(path, "w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say(f"Stand-in checkpoints: another process is building them; waiting for it ({path})")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def write_standins(root: Path, progress: bool = True) -> Path:
    """Train and write every task's stand-in checkpoint (the smallest size, as write_all) under root, with the
    STANDINS.txt marker; progress: a line per phase, steps out of their total and the time left (stderr)."""
    import torch
    from transformers.utils import logging

    from .tiny import TINY_INPUT, save_checkpoint

    root = Path(root)
    deterministic, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    bars = logging.is_progress_bar_enabled()
    logging.disable_progress_bar()  # transformers' own per-file bars would bury ours
    torch.use_deterministic_algorithms(True, warn_only=True)
    # One thread: these tiny ops gain little from a second, and on a busy machine (a test worker beside the build,
    # other jobs) threads that wait on each other lose many times that (2 threads took 21 minutes there); and
    # one thread's sums are the same on every machine with this torch build (bit-for-bit reruns).
    torch.set_num_threads(1)
    try:
        scenes = [build_scene(name) for name in PHOTOS]
        dense_models, backbone = _train_dense(scenes, TINY_INPUT, progress)
        for task, model in dense_models.items():
            save_checkpoint(model, task, root)
        save_checkpoint(backbone, BACKBONE_FAMILY, root)
        save_checkpoint(_train_pose(scenes, TINY_INPUT, progress), POSE_FAMILY, root)
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)
        if bars:
            logging.enable_progress_bar()
    (root / MARKER).write_text("Stand-in checkpoints (sapiens2_demo/standins): tiny Sapiens2 configs trained "
                               "a few CPU minutes on synthetic targets. Not models: their outputs are "
                               f"shapes, not estimates.\nkey {standin_key()}\n")
    return root


def _progress(phase: str, total: int, progress: bool):
    """range(total) with a progress line on stderr: "stand-ins, pose: step 300/600, 00:40 left"."""
    from tqdm import tqdm

    return tqdm(range(total), desc=f"stand-ins, {phase}", disable=not progress, file=sys.stderr,
                mininterval=1.0 if sys.stderr.isatty() else 20.0,  # a log file gets a line every 20 s
                bar_format="{desc}: step {n_fmt}/{total_fmt}, {remaining} left{postfix}")


# -- dense tasks: one backbone, four heads --------------------------------------------------------

def _train_dense(scenes, input_hw, progress):
    import torch
    import torch.nn.functional as F
    import transformers

    from .tiny import tiny_config

    torch.manual_seed(SEED)
    models = {task: getattr(transformers, TASKS[task].auto_class).from_config(tiny_config(task)).eval()
              for task in DENSE_TASKS}
    seg, normal, pointmap, matting = models.values()
    backbone = seg.model
    for model in models.values():
        model.model = backbone  # one shared backbone: trained once, saved into every checkpoint
    samples = dense_samples(scenes, input_hw, SAMPLES_PER_PHOTO * len(scenes), np.random.default_rng(SEED))
    with torch.no_grad():  # instance norms leave the absolute depth to the last bias: start it at the mean
        valid = samples["valid"][:, None]
        mean = (samples["points"] * valid).sum(axis=(0, 2, 3)) / valid.sum()
        pointmap.decode_head.predictor.bias.copy_(torch.from_numpy(mean.astype(np.float32)))
        _position_path(pointmap.decode_head)
    params = list({id(p): p for m in models.values() for p in m.parameters()}.values())
    optimiser = torch.optim.AdamW(params, lr=3e-3, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=3e-3, total_steps=DENSE_STEPS)
    rng = np.random.default_rng(SEED + 1)
    config = seg.config
    patches = (input_hw[0] // config.patch_size, input_hw[1] // config.patch_size)
    # The models stay in eval mode: nothing in them trains differently but RoPE, which in train mode rescales the
    # patch coordinates at random (pos_embed_rescale); that hides the absolute position a pointmap's x and y are
    # made of, which this backbone (RoPE, no position embedding) can learn only from a fixed grid. Without it the
    # stand-ins' pointmaps were a streak: x, y and z one function of the colour.
    position = _patch_grid(patches)
    point_weights = torch.tensor(POINT_XYZ_WEIGHTS)[None, :, None, None]
    steps = _progress("1/2 dense tasks", DENSE_STEPS, progress)
    for step in steps:
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
        one, target, valid = _whole(features, batch, 0, "unit_normals")
        normals = normal.decode_head(one)
        # Smooth unit targets: steps between neighbouring pixels cost too (the pixel shuffle leaves a grid),
        # and so does a length far from 1 (near 0, normalising would turn noise into directions).
        length = normals.pow(2).sum(dim=1).sqrt()
        normal_loss = _masked_mse(normals, target, valid) + 40 * _steps(normals) + (length - 1).pow(2).mean()
        # The pointmap runs on letterboxed images only (the processor pads it): it learns from one of those.
        boxed = np.flatnonzero(samples["boxed"][pick])
        one, target, valid = _whole(features, batch, int(boxed[0]) if boxed.size else 1, "points")
        scales = pointmap.scale_head(features)
        # x and y weigh more than z: they are ramps across the image, learnt slower than z's near and far, and
        # left alone they copy z's pattern (a streak in 3D). Depth smooth on the person, as the 3D lift needs it
        # (its median window refuses a spread depth).
        points = pointmap.decode_head(one) * point_weights
        point_loss = (_masked_mse(points, target * point_weights, valid) + _steps(points)
                      + F.mse_loss(scales, torch.ones_like(scales)))
        one, target, valid = _whole(features, batch, 2, "matte")
        matte_loss = _masked_mse(matting.decode_head(one).sigmoid(), target, valid) * 4
        # The first feature channel follows the matte, and neighbouring patches stay alike; the next two are the
        # patch's place in the image, which the pointmap's x and y are made of (else they collapse onto z).
        guide = F.adaptive_avg_pool2d(batch["matte"][:, 3:] * 2 - 1, patches)
        feature_loss = F.mse_loss(features[:, :1], guide) + _roughness(features)
        position_loss = F.mse_loss(features[:, 1:3], position.expand(BATCH, -1, -1, -1))
        loss = seg_loss + normal_loss + point_loss + matte_loss + 0.1 * feature_loss + POSITION_WEIGHT * position_loss
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        if step % 10 == 0 or step == DENSE_STEPS - 1:
            steps.set_postfix_str(f"loss: body parts {seg_loss.item():.2f}, normals {normal_loss.item():.2f}, "
                                  f"pointmap {point_loss.item():.2f}, matting {matte_loss.item():.2f}, position "
                                  f"{position_loss.item():.2f}", refresh=False)
    pretrain = getattr(transformers, TASKS[BACKBONE_FAMILY].auto_class).from_config(tiny_config(BACKBONE_FAMILY))
    pretrain.load_state_dict(backbone.state_dict())
    return {task: model.eval() for task, model in models.items()}, pretrain.eval()


def _position_path(head) -> None:
    """Start the pointmap head with feature channels 1 and 2 (taught the patch's x and y) passed straight through
    every layer to its x and y outputs: learnt from scratch, a decoder of instance norms did not find that path in
    the steps we can afford, and its x and y copied z's pattern (a streak in 3D). Each ramp r travels as a pair of
    channels (r, -r): after the layer's SiLU, silu(r) - silu(-r) = r, so the next layer gets r back exactly."""
    import torch

    pairs = ((1, 3), (2, 4), (0, 5))  # (plus, minus) channels of x, y and z; features 1, 2, 0 feed the first layer
    layers = [head.input_conv, *head.upsample_layers, *head.conv_layers]
    for depth, layer in enumerate(layers):
        conv = layer.convolution
        repeat = conv.out_channels // layer.norm.num_features  # the pixel shuffle's sub-pixels per channel
        centre = (conv.kernel_size[0] // 2, conv.kernel_size[1] // 2)
        for plus, minus in pairs:
            for out, sign in ((plus, 1.0), (minus, -1.0)):
                rows = slice(out * repeat, (out + 1) * repeat)
                conv.weight[rows] = 0
                if conv.bias is not None:
                    conv.bias[rows] = 0
                conv.weight[rows, plus, centre[0], centre[1]] = sign
                if depth:  # the first layer reads the features' single ramp
                    conv.weight[rows, minus, centre[0], centre[1]] = -sign
    predictor = head.predictor.weight  # (3, C, 1, 1): x and y from their pairs, ~1.5 m across the image; z nearer
    predictor[:] = 0                    # where feature 0 (taught the matte) says person
    for output, (plus, minus) in enumerate(pairs):
        gain = Z_GAIN if output == 2 else 0.75
        predictor[output, plus], predictor[output, minus] = torch.tensor(gain), torch.tensor(-gain)


def _patch_grid(patches):
    """(1, 2, h, w): each patch's centre, x then y, from -1 to 1 across the image."""
    import torch

    y, x = torch.meshgrid(torch.linspace(-1, 1, patches[0]), torch.linspace(-1, 1, patches[1]), indexing="ij")
    return torch.stack([x, y])[None]


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


# -- pose: person crops ----------------------------------------------------------------------------

def _train_pose(scenes, input_hw, progress):
    import torch
    import transformers

    from .tiny import tiny_config

    torch.manual_seed(SEED)
    model = getattr(transformers, TASKS[POSE_FAMILY].auto_class).from_config(tiny_config(POSE_FAMILY)).eval()
    pixels, heatmaps, seen = pose_samples(scenes, input_hw, SAMPLES_PER_PHOTO * len(scenes), HEATMAP_SIGMA,
                                          np.random.default_rng(SEED + 2))
    optimiser = torch.optim.AdamW(model.parameters(), lr=POSE_LR, weight_decay=1e-4)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimiser, max_lr=POSE_LR, total_steps=POSE_STEPS)
    rng = np.random.default_rng(SEED + 3)
    weights = torch.from_numpy(keypoint_weights())[None, :, None, None]
    steps = _progress("2/2 pose", POSE_STEPS, progress)
    for step in steps:  # eval mode, as the dense tasks: no dropout to turn off, and RoPE's coordinates as used
        pick = rng.choice(len(pixels), BATCH, replace=False)
        # A keypoint outside the photo or the crop is taught an empty map (a real model's low score there), not
        # its Gaussian past the picture's edge: the legs below the frame must not teach the hips to peak at the
        # crop's edge, nor go untaught and peak anywhere (then drawn to the picture's corners).
        target = torch.from_numpy(heatmaps[pick] * seen[pick][:, :, None, None])
        predicted = model(pixel_values=torch.from_numpy(pixels[pick])).heatmaps
        # The peaks weigh more than the empty rest, or the maps would learn to be flat; each group of maps (body,
        # hands and feet, face) weighs the same.
        loss = (((predicted - target) ** 2) * (1 + 20 * target) * weights).mean() * 100
        optimiser.zero_grad(set_to_none=True)
        loss.backward()
        optimiser.step()
        schedule.step()
        if step % 10 == 0 or step == POSE_STEPS - 1:
            steps.set_postfix_str(f"loss {loss.item():.3f}", refresh=False)
    return model.eval()

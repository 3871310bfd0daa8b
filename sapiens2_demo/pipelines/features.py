"""Sapiens2's pretrained backbone as a feature extractor: a CLS embedding and a grid of patch features.

frames -> processor (its defaults: a plain stretch to the model input, no padding) -> Sapiens2Model
    -> pooler_output (the CLS token) and the patch tokens of last_hidden_state

Patch grid -> image pixels. The processor's default for this checkpoint is a stretch (`do_pad=False`,
bilinear) of the whole image to the input size (1024x768 for the released models), and the model cuts
that input into 16x16 patches, an h x w = 64x48 grid. With the image H x W pixels, patch (i, j) (row i,
column j) therefore covers

    rows    i * H/h  <= y < (i + 1) * H/h
    columns j * W/w  <= x < (j + 1) * W/w

in continuous pixel coordinates (pixel (y, x) spans [y, y+1) x [x, x+1)): the grid tiles the whole image
evenly, each patch H/h x W/w pixels (not square unless the image is 4:3), and no patch sees padding.
Where a whole pixel must belong to one patch (the person mask, the PCA picture), it goes to the patch its
centre falls in: i = floor((y + 0.5) * h / H), j = floor((x + 0.5) * w / W) (`pixel_cells`).
"""

from __future__ import annotations

import numpy as np

from ..models.inference import forward, preprocess
from ..models.manager import ModelManager
from ..models.registry import checkpoint
from ..results import FeaturesResult, pixel_cells


def extract_features(frames: list[np.ndarray], manager: ModelManager, size: str = "0.4b") -> list[FeaturesResult]:
    """RGB uint8 images (any sizes) -> one FeaturesResult each, all in a single forward pass.

    The caller picks the batch: every frame of `frames` goes through the model at once.
    """
    if not frames:
        return []
    loaded = manager.get(checkpoint("pretrain", size))
    pixel_values = preprocess(loaded, list(frames), "pretrain")
    outputs = forward(loaded, pixel_values)
    config = loaded.model.config
    patch_h, patch_w = (config.patch_size,) * 2 if isinstance(config.patch_size, int) else config.patch_size
    height, width = pixel_values.shape[2:]
    prefix = 1 + config.num_register_tokens  # CLS, then the register tokens, then the patches
    patches = outputs["last_hidden_state"][:, prefix:].numpy().reshape(len(frames), height // patch_h,
                                                                         width // patch_w, -1)
    embeddings = outputs["pooler_output"].numpy()
    return [FeaturesResult(embedding=embeddings[k], patches=patches[k], input_hw=(int(height), int(width)),
                           image_hw=tuple(frames[k].shape[:2])) for k in range(len(frames))]


def patch_mask(mask: np.ndarray, grid_hw: tuple[int, int]) -> np.ndarray:
    """An (H, W) pixel mask -> (h, w) patch mask: a patch is in when more than half of the pixels whose
    centres fall in it are in (patches with no pixel centre, on images smaller than the grid, are out)."""
    mask = np.asarray(mask, dtype=bool)
    rows, cols = pixel_cells(mask.shape, grid_hw)
    cells = (rows[:, None] * grid_hw[1] + cols[None, :]).ravel()
    inside = np.bincount(cells, weights=mask.ravel(), minlength=grid_hw[0] * grid_hw[1])
    total = np.bincount(cells, minlength=grid_hw[0] * grid_hw[1])
    return (inside > 0.5 * total).reshape(grid_hw)

"""Downloadable files for the Features tab (Sapiens2's pretrained backbone). Each writer takes an output
folder (created if missing) and a file-name prefix (`features`, or e.g. `features2` for a second image or
an image's stem in a batch), and returns the Path it wrote.

| writer | file | contents |
|---|---|---|
| write_embedding_npy | <prefix>_cls_embedding.npy | float32 (C,): the CLS token (`pooler_output`), whole-image embedding |
| write_patches_npy | <prefix>_patch_features.npy | float16 (h, w, C): the patch tokens on the patch grid, row-major |
| write_pca_png | <prefix>_pca.png | RGB at the image size: the first 3 PCA components of the patches as colours |

C is the backbone width (1024, 1280, 1536, 2432 for 0.4b, 0.8b, 1b, 5b). The patch grid is h x w = 64 x 48
for the released models (input 1024x768, patches of 16 px). The pre-processing stretches the whole image to
the input (no padding, aspect not kept), so for an image of H x W pixels, entry [i, j] of the patch features
covers image rows i*H/h <= y < (i+1)*H/h and columns j*W/w <= x < (j+1)*W/w (continuous pixel coordinates;
the PNG gives each pixel the colour of the patch its centre falls in). The values are the backbone's final
RMS-normalised hidden states (`last_hidden_state` after the CLS and the 8 register tokens), the same as
`Sapiens2Backbone(...).feature_maps[-1]` transposed to (h, w, C); float16 keeps them to about 3 significant
digits. Load with `np.load(path)`.

The PCA picture: the first three principal components of the patch features as R, G, B, each stretched
between its 1st and 99th percentile; fitted on the person's patches (body-part segmentation, a patch being
"person" when most of its pixels are) when the mask is on, the other patches black; for two images one joint
PCA, so the same colour means similar features in both. `render.features.features_picture` makes it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..results import FeaturesResult
from ..util import target, write_png


def write_embedding_npy(result: FeaturesResult, folder, prefix: str = "features") -> Path:
    path = target(folder, f"{prefix}_cls_embedding.npy")
    np.save(path, np.asarray(result.embedding, dtype=np.float32))
    return path


def write_patches_npy(result: FeaturesResult, folder, prefix: str = "features") -> Path:
    path = target(folder, f"{prefix}_patch_features.npy")
    np.save(path, np.asarray(result.patches, dtype=np.float16))
    return path


def write_pca_png(pca_image: np.ndarray, folder, prefix: str = "features") -> Path:
    path = target(folder, f"{prefix}_pca.png")
    return write_png(path, np.asarray(pca_image, dtype=np.uint8))


def write_features(result: FeaturesResult, pca_image: np.ndarray | None, folder,
                   prefix: str = "features") -> list[Path]:
    """All of an image's files: embedding, patch features and (when given) the PCA picture."""
    files = [write_embedding_npy(result, folder, prefix), write_patches_npy(result, folder, prefix)]
    if pca_image is not None:
        files.append(write_pca_png(pca_image, folder, prefix))
    return files

"""Patch features as colours: PCA to 3 components mapped to RGB, and the cosine similarity of embeddings.

- The PCA is fitted on the masked patches only (the person's, when a mask is given), so the background
  neither steers the components nor stretches the colour range; masked-out patches are drawn black.
- Each component is mapped to 0..255 between the 1st and 99th percentile of the fitted patches'
  projections (clipped beyond), so a few extreme patches do not wash the rest out.
- A principal direction's sign is arbitrary (SVD may return either); it is fixed so that its
  largest-magnitude coordinate is positive, so the same features always give the same colours.
- The joint PCA fits one PCA on the patches of two images together: the same colour then means
  similar features in both, e.g. matching body parts.
- Upsampling to the image is nearest-patch: every pixel takes the colour of the patch its centre falls in
  (the mapping of `pipelines.features`), so the picture shows the real patch resolution.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..results import pixel_cells

LOW_PERCENTILE, HIGH_PERCENTILE = 1.0, 99.0


@dataclass
class PatchPCA:
    mean: np.ndarray  # (C,)
    components: np.ndarray  # (n, C) unit rows, strongest first; zero rows when the data has fewer
    low: np.ndarray  # (n,) projection mapped to 0
    high: np.ndarray  # (n,) projection mapped to 255

    def colours(self, features: np.ndarray) -> np.ndarray:
        """(N, C) features -> (N, n) uint8."""
        projected = (np.asarray(features, np.float64) - self.mean) @ self.components.T
        span = np.where(self.high > self.low, self.high - self.low, 1.0)
        scaled = np.where(self.high > self.low, (projected - self.low) / span, 0.5)  # flat component: mid grey
        scaled = np.nan_to_num(scaled, nan=0.5)  # a NaN feature: mid grey (a NaN cast to uint8 is undefined)
        return np.round(np.clip(scaled, 0.0, 1.0) * 255).astype(np.uint8)


def fit_pca(features: np.ndarray, n: int = 3) -> PatchPCA:
    """PCA of (N, C) features with deterministic signs and robust per-component colour bounds."""
    features = np.asarray(features, np.float64)
    if features.ndim != 2 or len(features) < 2:
        raise ValueError("Need at least two patches to fit a PCA (is the person mask empty?).")
    mean = features.mean(axis=0)
    centred = features - mean
    variances, directions = _top_eigenvectors(centred.T @ centred, n)
    directions = directions[variances > 1e-12 * max(variances.max(), 1e-300)]  # no null directions
    largest = np.argmax(np.abs(directions), axis=1)
    directions *= np.where(directions[np.arange(len(directions)), largest] < 0, -1.0, 1.0)[:, None]
    components = np.zeros((n, features.shape[1]))
    components[: len(directions)] = directions
    projected = centred @ components.T
    low, high = np.percentile(projected, [LOW_PERCENTILE, HIGH_PERCENTILE], axis=0)
    return PatchPCA(mean=mean, components=components, low=low, high=high)


def _top_eigenvectors(scatter: np.ndarray, n: int, iterations: int = 60, oversample: int = 8):
    """The n largest eigenvalues (descending) and eigenvectors (rows) of a symmetric PSD matrix, by subspace
    iteration and a Rayleigh-Ritz step: a full `eigh` of the C x C matrix costs seconds at C = 1024-2432 and
    we need three vectors. A fixed start keeps the result deterministic; when C <= n + oversample the
    subspace is the whole space and the answer exact."""
    size = scatter.shape[0]
    basis = np.linalg.qr(np.random.default_rng(0).standard_normal((size, min(size, n + oversample))))[0]
    if basis.shape[1] < size:
        for _ in range(iterations):
            basis = np.linalg.qr(scatter @ basis)[0]
    values, vectors = np.linalg.eigh(basis.T @ scatter @ basis)
    order = np.argsort(values)[::-1][:n]
    return values[order], (basis @ vectors[:, order]).T


def _masked(patches: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    if patches.ndim != 3:
        raise ValueError(f"patch features must be (h, w, C), got shape {patches.shape}")
    if mask is None:
        return np.ones(patches.shape[:2], dtype=bool)
    mask = np.asarray(mask, dtype=bool)
    if mask.shape != patches.shape[:2]:
        raise ValueError(f"mask {mask.shape} does not match the patch grid {patches.shape[:2]}")
    return mask


def _paint(pca: PatchPCA, patches: np.ndarray, mask: np.ndarray) -> np.ndarray:
    rgb = np.zeros((*patches.shape[:2], pca.components.shape[0]), dtype=np.uint8)
    rgb[mask] = pca.colours(patches[mask])
    return rgb


def pca_rgb(patches: np.ndarray, mask: np.ndarray | None = None, n: int = 3) -> np.ndarray:
    """(h, w, C) patch features -> (h, w, n) uint8, the PCA fitted on the masked patches (all when
    `mask` is None); masked-out patches black."""
    mask = _masked(patches, mask)
    pca = fit_pca(patches[mask], n)
    return _paint(pca, patches, mask)


def joint_pca_rgb(patches_a: np.ndarray, patches_b: np.ndarray, mask_a: np.ndarray | None = None,
                  mask_b: np.ndarray | None = None, n: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """One PCA (and one colour range) fitted on the masked patches of both images; both coloured by it."""
    mask_a, mask_b = _masked(patches_a, mask_a), _masked(patches_b, mask_b)
    if patches_a.shape[2] != patches_b.shape[2]:
        raise ValueError("The two images' features come from different model sizes; compare like with like.")
    pca = fit_pca(np.concatenate([patches_a[mask_a], patches_b[mask_b]]), n)
    return _paint(pca, patches_a, mask_a), _paint(pca, patches_b, mask_b)


def upsample_to_image(grid_rgb: np.ndarray, image_hw: tuple[int, int]) -> np.ndarray:
    """(h, w, 3) patch colours -> (H, W, 3), nearest patch (each pixel: the patch its centre falls in)."""
    rows, cols = pixel_cells(image_hw, grid_rgb.shape[:2])
    return grid_rgb[rows[:, None], cols[None, :]]


def features_picture(patches: np.ndarray, image_hw: tuple[int, int], person: np.ndarray | None = None) -> np.ndarray:
    """The PCA picture of one image at its own size: fitted on the person's patches when `person` (an (h, w)
    patch mask, see `pipelines.features.patch_mask`) holds at least two, else on every patch."""
    if person is not None and np.count_nonzero(person) < 2:
        person = None
    return upsample_to_image(pca_rgb(patches, person), image_hw)


def cosine_similarity(a: np.ndarray, b: np.ndarray) -> float:
    """Cosine of the angle between two embeddings, in [-1, 1]."""
    a, b = np.asarray(a, np.float64).ravel(), np.asarray(b, np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"Embeddings of different sizes ({a.size} and {b.size}) cannot be compared.")
    norms = np.linalg.norm(a) * np.linalg.norm(b)
    if norms == 0:
        raise ValueError("A zero embedding has no direction to compare.")
    return float(np.clip(a @ b / norms, -1.0, 1.0))

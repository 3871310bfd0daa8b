"""Dense post-processing: model-resolution maps back to the original image, fast on a CPU.

Each function matches transformers' `Sapiens2ImageProcessor.post_process_*` (bilinear, half-pixel
centres, no antialias) but avoids its full-resolution float work where it isn't needed.
"""

from __future__ import annotations

import cv2
import numpy as np


def padding_box(image_hw: tuple[int, int], input_hw: tuple[int, int]) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) of the image inside the keep-aspect, centre-padded model input.

    Same arithmetic as the processor (`get_image_size_for_max_height_width` + centre pad).
    """
    (h, w), (in_h, in_w) = image_hw, input_hw
    scale = min(in_h / h, in_w / w)
    new_h, new_w = int(h * scale), int(w * scale)
    top = (in_h - new_h) // 2 if new_h < in_h else 0
    left = (in_w - new_w) // 2 if new_w < in_w else 0
    return top, left, top + min(new_h, in_h), left + min(new_w, in_w)


def crop_padding(maps: np.ndarray, image_hw, input_hw) -> np.ndarray:
    """Cut the padding from a (h, w, C) map whose resolution may differ from the model input."""
    top, left, bottom, right = padding_box(image_hw, input_hw)
    fy, fx = maps.shape[0] / input_hw[0], maps.shape[1] / input_hw[1]
    return maps[round(top * fy):round(bottom * fy), round(left * fx):round(right * fx)]


def resize_map(maps: np.ndarray, image_hw: tuple[int, int]) -> np.ndarray:
    """Bilinear (half-pixel centres) resize of an (h, w, C) float map to (H, W, C)."""
    h, w = image_hw
    if maps.shape[:2] == (h, w):
        return np.ascontiguousarray(maps, dtype=np.float32)
    channels = maps.shape[2]
    # cv2 handles at most 4 channels per call in its fast path; split wider stacks.
    parts = [cv2.resize(np.ascontiguousarray(maps[..., i:i + 4], dtype=np.float32), (w, h),
                        interpolation=cv2.INTER_LINEAR) for i in range(0, channels, 4)]
    parts = [p[..., None] if p.ndim == 2 else p for p in parts]
    return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=2)


def unit_normals(normals: np.ndarray) -> np.ndarray:
    norm = np.linalg.norm(normals, axis=-1, keepdims=True)
    return (normals / np.maximum(norm, 1e-8)).astype(np.float32)


def _source_index(out_len: int, in_len: int):
    """PyTorch's bilinear source pixels (align_corners=False): lower index, upper index, weight."""
    src = np.maximum((np.arange(out_len, dtype=np.float64) + 0.5) * (in_len / out_len) - 0.5, 0.0)
    lo = np.minimum(src.astype(np.int64), in_len - 1)
    hi = np.minimum(lo + 1, in_len - 1)
    return lo, hi, (src - lo).astype(np.float32)


def upsample_labels(logits: np.ndarray, image_hw: tuple[int, int]) -> np.ndarray:
    """argmax(bilinear_upsample(logits)) without upsampling every class channel.

    Where the four source pixels around an output pixel share one argmax, the interpolated logits
    (a convex combination of them) have that same argmax, so only pixels on label boundaries need
    the full interpolation. logits: (C, h, w) float32 -> (H, W) uint8.
    """
    import torch

    num_classes, in_h, in_w = logits.shape
    out_h, out_w = image_hw
    low = torch.from_numpy(np.ascontiguousarray(logits)).max(dim=0).indices.numpy().astype(np.uint8)
    # a source cell (i, j)-(i+1, j+1) is mixed when its corners disagree; edge cells repeat the edge
    padded = np.pad(low, ((0, 1), (0, 1)), mode="edge")
    mixed = ((padded[:-1, :-1] != padded[1:, :-1]) | (padded[:-1, :-1] != padded[:-1, 1:])
             | (padded[:-1, :-1] != padded[1:, 1:]))
    y0, y1, wy = _source_index(out_h, in_h)
    x0, x1, wx = _source_index(out_w, in_w)
    labels = low[y0][:, x0]
    ys, xs = np.nonzero(mixed[y0][:, x0])
    if ys.size:
        flat = logits.reshape(num_classes, -1)
        row0, row1, col0, col1 = y0[ys] * in_w, y1[ys] * in_w, x0[xs], x1[xs]
        a, b = np.take(flat, row0 + col0, axis=1), np.take(flat, row0 + col1, axis=1)
        c, d = np.take(flat, row1 + col0, axis=1), np.take(flat, row1 + col1, axis=1)
        ty, tx = wy[ys], wx[xs]
        top = a + (b - a) * tx
        bottom = c + (d - c) * tx
        labels[ys, xs] = (top + (bottom - top) * ty).argmax(axis=0)
    return labels

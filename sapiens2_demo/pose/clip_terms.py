"""The clip fit's (clip_fit.py) heaviest pieces with their gradients written out: what autograd would compute, in
fewer passes over the clip's arrays (an evaluation of the energy and its gradient is most of the fit's time, and
autograd's reductions over a last axis of 2 or 3, and the zeroed copy of the whole behind each slice's gradient,
were most of an evaluation's). Each is checked against autograd in tests/unit/test_motion_gaps.py."""

from __future__ import annotations

import torch


class Unit(torch.autograd.Function):
    """(..., 3) vectors over their length (at least 1e-9)."""

    @staticmethod
    def forward(ctx, v):
        norm = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
        length = norm.clamp_min(1e-9)
        unit = v / length
        ctx.save_for_backward(unit, length, norm >= 1e-9)
        return unit

    @staticmethod
    def backward(ctx, grad):
        unit, length, turns = ctx.saved_tensors  # (a vector shorter than 1e-9 only scaled)
        along = (grad * unit) @ torch.ones(unit.shape[-1], dtype=unit.dtype)  # a matrix product: no slow reduction
        return (grad - unit * (along[..., None] * turns)) / length


class Acceleration(torch.autograd.Function):
    """sum of Huber(x[t + 1] - 2 x[t] + x[t - 1]) * scale) over (T, ...) x, scale broadcasting to (T - 2, ...):
    squares up to `c`, then linear (clip_fit's motion prior)."""

    @staticmethod
    def forward(ctx, x, scale, c):
        scale = torch.as_tensor(scale, dtype=x.dtype)
        a = (x[2:] - 2 * x[1:-1] + x[:-2]) * scale
        m = a.clamp(-c, c)  # Huber(a) = m (2 a - m)
        ctx.save_for_backward(m, scale)
        ctx.frames = len(x)
        return (m * (2 * a - m)).sum()

    @staticmethod
    def backward(ctx, grad):
        m, scale = ctx.saved_tensors
        g = m * (2 * grad) * scale
        out = g.new_zeros((ctx.frames,) + g.shape[1:])
        out[2:] += g
        out[:-2] += g
        out[1:-1].add_(g, alpha=-2)
        return out, None, None


def _robust(r, c):
    """Geman-McClure (clip_fit's) and its derivative."""
    r2 = r * r
    den = 1 / (1 + r2 * (1 / c ** 2))
    return r2 * den, 2 * r * den * den


class Data(torch.autograd.Function):
    """clip_fit's data terms on the keypoints (K, T, 3) and the depth's offset (K, T): sum of w2 GM(pixel errors
    over their sigma, cp) + wz GM((z - depth - offset) / depth sigma, cz) * depth_gain, with z at least 1e-3."""

    @staticmethod
    def forward(ctx, points, offset, target, w2, pixel_gain, cp, depth, wz, depth_sigma, cz, depth_gain):
        x, y, z = points.unbind(-1)
        inv = 1 / z.clamp_min(1e-3)
        ex, dx = _robust((x * inv - target[..., 0]) * pixel_gain, cp)
        ey, dy = _robust((y * inv - target[..., 1]) * pixel_gain, cp)
        ez, dz = _robust((z.clamp_min(1e-3) - depth - offset) * (1 / depth_sigma), cz)
        ctx.save_for_backward(x, y, z, inv, w2 * dx, w2 * dy, wz * dz)
        ctx.gains = pixel_gain, depth_gain / depth_sigma
        return (w2 * (ex + ey)).sum() + (wz * ez).sum() * depth_gain

    @staticmethod
    def backward(ctx, grad):
        x, y, z, inv, dx, dy, dz = ctx.saved_tensors
        pixel_gain, depth_gain = ctx.gains
        gx, gy, gz = dx * (grad * pixel_gain) * inv, dy * (grad * pixel_gain) * inv, dz * (grad * depth_gain)
        gzz = (gz - (gx * x + gy * y) * inv) * (z >= 1e-3)
        return (torch.stack([gx, gy, gzz], -1), -gz) + (None,) * 9

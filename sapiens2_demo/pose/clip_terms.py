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
        length = torch.linalg.vector_norm(v, dim=-1, keepdim=True)
        short = bool(length.min() < 1e-9)  # (rare: a mask only then)
        ctx.turns = (length >= 1e-9) if short else None
        length = length.clamp_min(1e-9)
        unit = v / length
        ctx.save_for_backward(unit, length)
        return unit

    @staticmethod
    def backward(ctx, grad):
        unit, length = ctx.saved_tensors
        along = (grad * unit) @ torch.ones(unit.shape[-1], dtype=unit.dtype)  # a matrix product: no slow reduction
        if ctx.turns is not None:  # a vector shorter than 1e-9 is only scaled
            along = along * ctx.turns[..., 0]
        return (grad - unit * along[..., None]) / length


class Acceleration(torch.autograd.Function):
    """sum of Huber(x[t + 1] - 2 x[t] + x[t - 1]) * scale) over (T, ...) x, scale broadcasting to (T - 2, ...):
    squares up to `c`, then linear (clip_fit's motion prior)."""

    @staticmethod
    def forward(ctx, x, scale, c):
        scale = torch.as_tensor(scale, dtype=x.dtype)
        a = torch.add(x[2:], x[:-2]).sub_(x[1:-1], alpha=2).mul_(scale)
        m = a.clamp(-c, c)  # Huber(a) = m (2 a - m)
        ctx.save_for_backward(m, scale)
        return 2 * m.view(-1).dot(a.view(-1)) - m.view(-1).dot(m.view(-1))

    @staticmethod
    def backward(ctx, grad):
        m, scale = ctx.saved_tensors
        g = (m * scale).mul_(2 * grad)
        out = g.new_empty((len(g) + 2,) + g.shape[1:])
        out[:2] = 0
        out[2:] = g
        out[:-2] += g
        out[1:-1].add_(g, alpha=-2)
        return out, None, None


def _robust(r, w, c):
    """sum of w GM(r) (Geman-McClure, clip_fit's: r^2 / (1 + r^2 / c^2)) and half its derivative, w r / (1 + r^2 /
    c^2)^2, in few passes."""
    den = (r * r).mul_(1 / c ** 2).add_(1).reciprocal_()
    u = (r * den).mul_(w)
    return u.reshape(-1).dot(r.reshape(-1)), u.mul_(den)


class Data(torch.autograd.Function):
    """clip_fit's data terms on the keypoints, coordinate planes by frame (T, 3, K), and the depth's offset (T, K):
    sum of w2 GM((x / z, y / z) less the target, times pixel_gain; cp) + depth_gain wz GM((z - depth - offset) /
    depth_sigma; cz), z at least 1e-3. target (T, 2, K), w2 (T, 1, K), the others (T, K): each plane's keypoints
    side by side in memory (a last axis of 2 or 3 made each operation several times slower)."""

    @staticmethod
    def forward(ctx, points, offset, target, w2, pixel_gain, cp, depth, wz, depth_sigma, cz, depth_gain):
        z = points[:, 2].clamp_min(1e-3)
        inv = z.reciprocal()
        e2, d2 = _robust((points[:, :2] * inv[:, None]).sub_(target).mul_(pixel_gain), w2, cp)
        ez, dz = _robust((z - depth).sub_(offset).mul_(1 / depth_sigma), wz, cz)
        ctx.save_for_backward(points, inv, d2, dz)
        ctx.gains = 2 * pixel_gain, 2 * depth_gain / depth_sigma
        return e2 + ez * depth_gain

    @staticmethod
    def backward(ctx, grad):
        points, inv, d2, dz = ctx.saved_tensors
        pixel_gain, depth_gain = ctx.gains
        g2 = (d2 * (grad * pixel_gain)).mul_(inv[:, None])  # (T, 2, K)
        own = dz * (grad * depth_gain)  # the depth term's, on z and (negated) on the offset
        gz = (own - (g2 * points[:, :2]).sum(1).mul_(inv)).mul_(points[:, 2] >= 1e-3)  # z's own, less (x, y).g2 / z
        return (torch.cat([g2, gz[:, None]], 1), own.neg_()) + (None,) * 9

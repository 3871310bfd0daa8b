"""L-BFGS as torch.optim.LBFGS(lr=1, line_search_fn="strong_wolfe") runs it (its line search, first step, history
and stopping rules: the same steps, to the bit, with the history in float64), for the clip's fit (clip_fit.py),
where torch.optim's spent a quarter of the fit between the energy's evaluations on a minute's clip: its work is
passes over vectors of the clip's length (3 MB a minute), bound by the memory's bandwidth, most of them the
two-loop recursion's two over the history (20 pairs: 130 MB). Here one flat vector holds the parameters (each a
view of it: no per-parameter clones and copies), each pair is written straight into its history slot, and the
other vectors are read as few times as the rules allow. HISTORY_DTYPE float32 halves the history's bytes (each
pair measured in it, so the recursion's curvature is its own pairs'), but on the fit it was not measurably faster
(22.8-24.8 s against 22.3-25.5 s, a minute's clip, back to back) and it moved the fit's minima as much as any
rounding does (the hidden hand of tests/unit/test_motion_gaps.py 7.75 cm off against 7.64): kept at float64.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.optim.lbfgs import _strong_wolfe

HISTORY_DTYPE = torch.float64


def minimize(energy: Callable[[], torch.Tensor], parameters: list, max_iter: int, history_size: int = 20,
             tolerance_grad: float = 1e-10, tolerance_change: float = 1e-12) -> float:
    """Minimises energy() (a scalar of the parameters, each call a fresh evaluation) over the parameters in place
    (each one's data becomes a view of one flat vector) for at most max_iter steps; returns the last energy."""
    x = torch.cat([p.detach().reshape(-1) for p in parameters])
    for p, view in zip(parameters, x.split([p.numel() for p in parameters])):
        p.data = view.view_as(p)

    def evaluate() -> tuple[float, torch.Tensor]:
        for p in parameters:
            p.grad = None
        e = energy()
        e.backward()
        return float(e.detach()), torch.cat([torch.zeros(p.numel(), dtype=x.dtype) if p.grad is None
                                             else p.grad.reshape(-1) for p in parameters])

    def along(x0, t, d):  # the energy and its gradient at x0 + t d (where the step is taken after, as torch's)
        torch.add(x0, d, alpha=t, out=x)
        return evaluate()

    def largest(v):  # max |v| (one pass: torch.linalg.vector_norm's inf-norm took 10x as long)
        low, high = torch.aminmax(v)
        return max(-float(low), float(high))

    loss, g = evaluate()
    if largest(g) <= tolerance_grad:
        return loss
    # (s, y) pairs in slots, `order` the slots in use, oldest first; a spare slot for the pair being measured
    steps = torch.empty(history_size + 1, len(x), dtype=HISTORY_DTYPE)
    changes, q = torch.empty_like(steps), torch.empty(len(x), dtype=HISTORY_DTYPE)
    order, ro, h_diag, evals, t = [], [0.0] * (history_size + 1), 1.0, 1, 0.0
    d, g_prev = -g, g
    for n_iter in range(1, max_iter + 1):
        if n_iter > 1:
            slot = min(set(range(history_size + 1)) - set(order))
            s, y = torch.mul(d, t, out=steps[slot]), torch.sub(g, g_prev, out=changes[slot])
            ys = float(y.dot(s))  # (in HISTORY_DTYPE: as the recursion sees the pair)
            if ys > 1e-10:
                if len(order) == history_size:
                    order.pop(0)
                order.append(slot)
                ro[slot], h_diag = 1.0 / ys, ys / float(y.dot(y))
            q.copy_(g).neg_()  # the two-loop recursion
            al = {}
            for i in reversed(order):
                al[i] = float(steps[i].dot(q)) * ro[i]
                q.add_(changes[i], alpha=-al[i])
            q.mul_(h_diag)
            for i in order:
                q.add_(steps[i], alpha=al[i] - float(changes[i].dot(q)) * ro[i])
            d = q.to(x.dtype, copy=True)
        g_prev, prev_loss = g, loss
        t = min(1.0, 1.0 / float(g.abs().sum())) if n_iter == 1 else 1.0
        gtd = g.dot(d)
        if gtd > -tolerance_change:
            break
        x0 = x.clone()
        loss, g, t, ls_evals = _strong_wolfe(along, x0, t, d, loss, g, gtd)
        torch.add(x0, d, alpha=t, out=x)
        evals += ls_evals
        if (n_iter == max_iter or evals >= max_iter * 5 // 4 or largest(g) <= tolerance_grad
                or largest(d) * t <= tolerance_change or abs(loss - prev_loss) < tolerance_change):
            break
    return loss

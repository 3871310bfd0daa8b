"""One fit of a person's skeleton over a whole clip: what the video's mocap files are solved from.

The body is a tree over its keypoints (camera frame, metres). Unknowns: per clip the bone lengths (left and right
alike) and the rigid shapes of the head, the feet and the palms (one foot and one palm: the right the left's mirror
image); per frame the root (mid-hip) position, each bone's direction and each rigid part's rotation (a 6D rotation:
two vectors made orthonormal). A keypoint's place
is its parent's plus its bone, so every frame holds one body by construction: nothing is smoothed per keypoint.

Energy (each term a residual over its expected size, squared; L-BFGS in float64 (torch.optim's, lean: lbfgs.py),
CPU, deterministic, in a worker process on one thread: fit_worker.py; the heaviest terms' gradients written out, clip_terms.py):
- the 2D keypoints (the rays of the lifted points, and of the points hidden behind someone, see
  Pose3DResult.covered), in pixels, weighted by the pose model's score, under a Geman-McClure loss so swapped,
  junk and heavy-tailed keypoints stop pulling: the main term;
- the pointmap's depth, a weaker robust term, less a per-keypoint offset that varies slowly over time (a model's
  depth error at a keypoint persists from frame to frame); a covered keypoint's too (the depth its ray was read
  at: its own where it was only far in front of its body, a cover's where someone hid it, which the robust loss,
  never loosened, lets go);
  both sigmas are the data's own (`noise_scale`): clean input is fitted to the pixel, noisy input smoothed;
- acceleration priors, not velocity: the root's, and each bone's and rigid part's angular acceleration (a
  finger's in its palm's frame), Huber so a sharp turn the data insist on passes while jitter does not, and in
  the last stage each part's own scale where it turns fast (measured on the smooth stages' fit: a runner's legs
  are not held to a stroller's); they also fill the frames a keypoint was not seen (an occlusion, an exit) from
  the frames around them;
- a planted foot: a foot keypoint still over half a second in the first stages' fit (clip_data.planted_runs)
  holds one place in the last while it stays still (each frame pulled to the run's mean), so drifting depth does
  not make it slide;
- a weak prior on the body's proportions (an adult's, the person's own size free), for the bones the data say
  little about;
- a knee limit (it does not bend forwards).
Started from the lifted points (a sample far from its 5-frame median replaced by it; left/right swapped frames
exchanged back) interpolated through their gaps; the data's sigmas loosened at first, then tightened (STAGES).
"""

from __future__ import annotations

import warnings

import numpy as np
import torch

from .clip_data import median_filled, noise_scale, planted_runs, unswapped
from .clip_floor import FLOOR_ITERATIONS, FloorTerms, starting_offsets
from .clip_terms import Acceleration, Data, Unit
from .fit_worker import run_alone
from .lbfgs import minimize
from .meta import keypoint_meta, name_index

SIDES = ("left", "right")
FINGERS = ("thumb", "forefinger", "middle_finger", "ring_finger", "pinky_finger")
MIN_PIXEL_SIGMA = 0.2  # pixels: the least 2D error the fit assumes (its own is measured: noise_scale)
MIN_DEPTH_SIGMA = 0.003  # metres: the least depth error about its slow offset
OFFSET_SIGMA, DRIFT_SIGMA = 0.04, 0.1  # metres, metres/s: the depth offset's size and how fast it drifts
ACCELERATION_SIGMA = 20.0  # m/s^2: the root's acceleration, most of the time
# rad/s^2: a bone's or a rigid part's angular acceleration, most of the time; the trunk's too (a 3 rad/s^2 trunk
# held back a dancer's or a runner's twist of 14-16 rad/s^2 once the fit had converged)
ANGULAR_SIGMA = 10.0
# ... and in the last stage each one's own where it turns faster: the upper quartile of its angular acceleration in
# the smooth stages' fit, up to ANGULAR_MAX (a runner's legs, a dancer's arms: 20-50 rad/s^2; a weaker prior
# there let the run under noise come 19.9 -> 17.0 mm; never stronger than ANGULAR_SIGMA: noise would set it)
ANGULAR_QUANTILE, ANGULAR_MAX = 0.75, 50.0
PRIOR_C = 0.5  # the motion prior is quadratic up to this many sigmas, linear beyond
ROBUST_C = 3.0  # residuals past ~3 sigma weigh less and less (Geman-McClure) ...
OUTLIER_PIXELS, OUTLIER_DEPTH = 6.0, 0.1  # ... but never nearer than these (pixels, metres): on clean input too
# an adult's proportions, as fractions of the height (Winter's table after Drillis and Contini; the hips' half width
# between the hip joints' centres by Bell's rule): a weak prior on the lengths' ratios, for the bones the data say
# little about (a hip line that points at the camera all clip); people differ from it by 5-10 %, so it is weak
PROPORTIONS = {"torso": 0.288, "shoulder": 0.10, "upper_arm": 0.186, "forearm": 0.146, "thigh": 0.245,
               "shin": 0.246, "hip": 0.05}
PROPORTION_SIGMA = 0.08
ITERATIONS = 400
DTYPE = torch.float64  # float32 is as accurate on sound input, but its line search can overflow on junk
STAGES = (8.0, 3.0, 1.0)  # the data's sigmas times these, in turn ...
STAGE_SHARES = (1 / 4, 1 / 4, 1 / 2)  # ... with these shares of the iterations (the last, at the data's own sigmas, longest)
PLANTED_SIGMA = 0.005  # m: and in the last stage it holds one place while it stays planted


def _tree() -> tuple[list, list, list]:
    """(bones, groups, used): bones (child, parent, length name) parents first, the fingers' last (left then right,
    15 each: they turn in their palm's frame); rigid groups (anchor, members, name, (a from, a to), (b from, b to))
    whose two vectors give the part's rotation; every keypoint fitted."""
    bones, fingers = [("neck", "pelvis", "torso")], []
    groups = [("neck", ["nose", "left_eye", "right_eye", "left_ear", "right_ear"], "head",
               ("right_ear", "left_ear"), ("neck", "nose"))]
    for s in SIDES:
        bones += [(f"{s}_shoulder", "neck", "shoulder"), (f"{s}_elbow", f"{s}_shoulder", "upper_arm"),
                  (f"{s}_wrist", f"{s}_elbow", "forearm"), (f"{s}_knee", f"{s}_hip", "thigh"),
                  (f"{s}_ankle", f"{s}_knee", "shin")]
        for f in FINGERS:
            chain = [f"{s}_{f}_third_joint", f"{s}_{f}2", f"{s}_{f}3", f"{s}_{f}4"]
            fingers += [(chain[i + 1], chain[i], f"{f}{i}") for i in range(3)]
        groups += [(f"{s}_ankle", [f"{s}_heel", f"{s}_big_toe", f"{s}_small_toe"], f"{s}_foot",
                    (f"{s}_heel", f"{s}_big_toe"), (f"{s}_heel", f"{s}_ankle")),
                   (f"{s}_wrist", [f"{s}_{f}_third_joint" for f in FINGERS], f"{s}_palm",
                    (f"{s}_wrist", f"{s}_middle_finger_third_joint"),
                    (f"{s}_pinky_finger_third_joint", f"{s}_forefinger_third_joint"))]
    bones += fingers
    used = ["left_hip", "right_hip"] + [b[0] for b in bones] + [m for g in groups for m in g[1]]
    return bones, groups, used


BONES, GROUPS, USED = _tree()
CAMERA_BONES = len(BONES) - len(SIDES) * len(FINGERS) * 3  # the bones before the fingers turn in the camera's frame
WIDEST = max(len(g[1]) for g in GROUPS)  # the rigid parts' members, each part's padded to this many
_COLUMN = {k: i for i, k in enumerate(USED)}  # each keypoint's column in the fit's arrays
LENGTHS = sorted({b[2] for b in BONES})
_PROPORTIONED = torch.as_tensor([LENGTHS.index(n) for n in PROPORTIONS if n != "hip"])  # then the hips' half width
_LOG_PROPORTIONS = torch.log(torch.as_tensor([PROPORTIONS[n] for n in PROPORTIONS if n != "hip"] + [PROPORTIONS["hip"]],
                                             dtype=DTYPE))


def _parents() -> list[tuple[int, int]]:
    """(child, parent) keypoint indices along the body's tree, parents first (a rigid part's members hang from
    its anchor): where the start judges a sample against its parent's (clip_data.median_filled)."""
    index = name_index()
    pairs = [(child, parent) for child, parent, _ in BONES if parent != "pelvis"]
    pairs += [(member, anchor) for anchor, members, *_ in GROUPS for member in members]
    placed, ordered = {"left_hip", "right_hip", "neck"}, []
    while len(ordered) < len(pairs):  # a generation at a time: those whose parents are placed
        ready = [pair for pair in pairs if pair[1] in placed and pair[0] not in placed]
        placed |= {c for c, _ in ready}
        ordered += ready
    return [(index[c], index[p]) for c, p in ordered]


def _turning_seen(available: torch.Tensor) -> torch.Tensor:
    """(T, M) whether each of the body's turning vectors (`_Body.turning`'s rows: each bone's direction, the hips'
    line, three per rigid part) was seen in each frame: its keypoints lifted (a bone's two ends, a part's anchor
    and two of its members at least)."""
    def seen(name):
        hips = [_COLUMN["left_hip"], _COLUMN["right_hip"]]
        return available[:, hips].all(1) if name == "pelvis" else available[:, _COLUMN[name]]

    bones = [seen(child) & seen(parent) for child, parent, _ in BONES]
    parts = [seen(anchor) & (available[:, [_COLUMN[m] for m in members]].sum(1) >= 2)
             for anchor, members, *_ in GROUPS for _ in range(3)]
    return torch.stack(bones + [seen("pelvis")] + parts, 1)


def _own_angular_sigmas(turning: torch.Tensor, available: torch.Tensor, fps: float) -> torch.Tensor:
    """(T - 2, M, 1) each turning vector's angular acceleration scale for the last stage: where it was seen (three
    frames running), ANGULAR_QUANTILE of its own over those frames, between ANGULAR_SIGMA and ANGULAR_MAX; where it
    was not, ANGULAR_SIGMA (what fills a gap is the generic prior, not a speed measured elsewhere: a hand hidden
    behind someone, held to its arm's swing, followed the cover's depth: 8.3 cm off instead of 7.7)."""
    acc = ((turning[2:] - 2 * turning[1:-1] + turning[:-2]) * fps * fps).norm(dim=-1)  # (T - 2, M)
    seen = _turning_seen(available)
    seen = seen[2:] & seen[1:-1] & seen[:-2]
    scale = torch.nanquantile(torch.where(seen, acc, torch.nan), ANGULAR_QUANTILE, dim=0)
    scale = torch.nan_to_num(scale, nan=ANGULAR_SIGMA).clamp(ANGULAR_SIGMA, ANGULAR_MAX)
    return torch.where(seen, scale, torch.as_tensor(ANGULAR_SIGMA, dtype=scale.dtype))[..., None]


def _unit(v: torch.Tensor) -> torch.Tensor:
    return Unit.apply(v)


def _rotation(six: torch.Tensor) -> torch.Tensor:
    """(..., 6) -> (..., 3, 3) with columns e1, e2, e3 (Gram-Schmidt of the two vectors)."""
    e1 = _unit(six[..., :3])
    e2 = _unit(six[..., 3:] - (e1 * six[..., 3:]).sum(-1, keepdim=True) * e1)
    return torch.stack([e1, e2, torch.cross(e1, e2, dim=-1)], dim=-1)


def _shape_of(group: str) -> str:
    """The shape a rigid part shares with its other side: "left_foot" and "right_foot" -> "foot"."""
    return group.split("_", 1)[1] if group.startswith(SIDES) else group


def _mirror(group: str) -> torch.Tensor:
    """(3,) a right part's coordinates in its own frame are the left one's with the third negated: the frame is
    built from the part's own points (two vectors and their cross product), and a mirror image turns the cross."""
    return torch.as_tensor([1.0, 1.0, -1.0 if group.startswith("right") else 1.0], dtype=DTYPE)


class _Body(torch.nn.Module):
    """The unknowns and the forward pass: parameters -> (T, 70, 3) keypoints."""

    def __init__(self, start: np.ndarray, ever: dict):
        super().__init__()
        index = self.index = name_index()
        p = torch.as_tensor(start, dtype=DTYPE)
        pelvis = (p[:, index["left_hip"]] + p[:, index["right_hip"]]) / 2
        self.root = torch.nn.Parameter(pelvis.clone())
        across = p[:, index["left_hip"]] - p[:, index["right_hip"]]
        self.hip = torch.nn.Parameter(across.clone())
        self.log_hip = torch.nn.Parameter(torch.log((across.norm(dim=-1).median() / 2).clamp_min(0.005)))
        named = {k: p[:, index[k]] for k in USED if k in index}
        named["pelvis"] = pelvis
        lengths = {}
        for child, parent, length in BONES:
            lengths.setdefault(length, []).append((named[child] - named[parent]).norm(dim=-1).median())
        # a bone never seen starts at 1 cm (both its ends start beside the neck), not at log(0)
        self.log_length = torch.nn.Parameter(torch.log(torch.stack([torch.stack(lengths[n]).mean()
                                                                    for n in LENGTHS]).clamp_min(0.01)))
        sixes, shapes = [], {}
        for anchor, members, name, (a0, a1), (b0, b1) in GROUPS:
            six = torch.cat([named[a1] - named[a0], named[b1] - named[b0]], -1)
            local = torch.einsum("tji,tkj->tki", _rotation(six), torch.stack([named[m] - named[anchor]
                                                                               for m in members], 1))
            sixes.append(six)
            seen = float(all(ever[m] for m in members))  # a part never seen starts from the other side's
            shapes.setdefault(_shape_of(name), []).append((local.median(dim=0).values * _mirror(name), seen))
        self.six = torch.nn.Parameter(torch.stack(sixes, 1))
        # (members, 3) each rigid part's keypoints in its frame, one shape for the left and the right (mirrored)
        self.shapes = torch.nn.Parameter(torch.cat([
            sum(shape * max(seen, 1e-3) for shape, seen in sides) / sum(max(seen, 1e-3) for _, seen in sides)
            for sides in shapes.values()]))
        first = dict(zip(shapes, np.cumsum([0] + [len(v[0][0]) for v in shapes.values()])))
        # (G, WIDEST) each part's members' rows in `shapes` and (G, WIDEST, 3) their mirror signs (0: padding)
        self.member_row = torch.as_tensor([[first[_shape_of(g[2])] + min(m, len(g[1]) - 1) for m in range(WIDEST)]
                                           for g in GROUPS])
        self.member_sign = torch.stack([torch.stack([_mirror(g[2]) * (m < len(g[1])) for m in range(WIDEST)])
                                        for g in GROUPS])
        # a finger's bones turn in its palm's frame: out of view, they go where the hand goes (the others in the
        # camera's: group index len(GROUPS), the identity)
        palms = {g[0]: i for i, g in enumerate(GROUPS) if g[2].endswith("palm")}
        self.palm_of = torch.as_tensor([palms[f"{c.split('_')[0]}_wrist"] if any(f in c for f in FINGERS)
                                        else len(GROUPS) for c, _, _ in BONES])
        self.palms = self.palm_of[CAMERA_BONES::len(FINGERS) * 3]  # each side's palm, the fingers' bones in turn
        steps = torch.stack([named[c] - named[p] for c, p, _ in BONES], 1)
        frames_of = torch.cat([_rotation(self.six.detach()), torch.eye(3, dtype=DTYPE).expand(len(p), 1, 3, 3)], 1)
        self.direction = torch.nn.Parameter(torch.einsum("tbji,tbj->tbi", frames_of[:, self.palm_of], steps))
        self.length_of = torch.as_tensor([LENGTHS.index(b[2]) for b in BONES])
        self.hip_sign = torch.as_tensor([[1.0], [-1.0]], dtype=DTYPE)
        self.anchors = torch.as_tensor([_COLUMN[g[0]] for g in GROUPS])
        self.member_used = torch.as_tensor([g * WIDEST + m for g, group in enumerate(GROUPS) for m in range(len(group[1]))])

    def forward(self) -> torch.Tensor:
        """(T, len(USED), 3): the keypoints the skeleton uses, in USED's order: the root plus the offsets along
        each keypoint's path from it (the hips' half width, the bones, the rigid parts' members), chain by chain.
        Few large operations (an evaluation's cost): both sides' fingers at once, each part's members at once."""
        frames = self.root.shape[0]
        across = _unit(self.hip)
        rotations = _rotation(self.six)  # (T, G, 3, 3)
        direction = _unit(self.direction)
        # (the lengths expanded to (bones, 3): their gradient a sum over the frames, not over a last axis of 3)
        steps = direction * torch.exp(self.log_length)[self.length_of][:, None].expand(-1, 3)
        torso, limbs, fingers = steps.split([1, CAMERA_BONES - 1, len(BONES) - CAMERA_BONES], 1)
        hips = self.root[:, None] + (torch.exp(self.log_hip) * across)[:, None] * self.hip_sign  # (T, 2, 3)
        neck = self.root[:, None] + torso
        # each side's shoulder, elbow, wrist, then knee, ankle: their parents' places plus their bones, in turn
        arms, legs = limbs.view(frames, len(SIDES), -1, 3).split([3, 2], 2)
        limbs = torch.cat([neck[:, :, None] + arms.cumsum(2), hips[:, :, None] + legs.cumsum(2)], 2)
        trunk = torch.cat([hips, neck, limbs.view(frames, -1, 3)], 1)  # USED's first keypoints, in its order
        members = torch.einsum("tgij,gkj->tgki", rotations, self.shapes[self.member_row] * self.member_sign)
        members = members + trunk.index_select(1, self.anchors)[:, :, None]  # (T, G, WIDEST, 3)
        # each finger: its palm's member (the third joint) plus its bones, turned by the palm, in turn
        fingers = torch.matmul(fingers.reshape(frames, len(self.palms), -1, 3), rotations[:, self.palms].mT)
        chain = [members[:, self.palms]]  # (T, sides, fingers, 3) each
        for bone in fingers.view(frames, len(self.palms), len(FINGERS), -1, 3).unbind(3):
            chain.append(chain[-1] + bone)
        fingers = torch.stack(chain[1:], 3)
        self.knees = legs, across  # each side's thigh and shin, and the hips' line: the knee limit's
        self.turning = torch.cat([direction, across[:, None],
                                  rotations.transpose(-1, -2).reshape(frames, -1, 3)], 1)  # (T, M, 3) unit vectors
        # coordinate planes by frame in memory, (T, 3, K): the data terms' layout (clip_terms.Data)
        return torch.cat([trunk.mT, fingers.reshape(frames, -1, 3).mT,
                          members.reshape(frames, -1, 3).index_select(1, self.member_used).mT], 2).mT


def fit_clip(points: np.ndarray, available: np.ndarray, rays: np.ndarray, scores: np.ndarray, focal: float,
             fps: float, iterations: int = ITERATIONS, start: np.ndarray | None = None,
             floor: tuple | None = None, contacts: np.ndarray | None = None,
             turns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """See `_fit`; in a worker process on one thread (fit_worker.py): the app's thread count stays its own."""
    return run_alone(_fit, points, available, rays, scores, focal, fps, iterations, start, floor, contacts, turns)


def fit_on_floor(points: np.ndarray, available: np.ndarray, rays: np.ndarray, scores: np.ndarray, focal: float,
                 fps: float, fitted: np.ndarray, floor: tuple, contacts: np.ndarray, turns: np.ndarray | None = None,
                 iterations: int = FLOOR_ITERATIONS) -> tuple[np.ndarray, np.ndarray]:
    """The second, short pass once the world is found: the same observations and terms at the data's own sigmas,
    started from the first pass's `fitted` keypoints, with the floor (up (3,), offset: the plane up . x + offset = 0
    in the first frame's camera) a one-sided bound on the feet and each foot held still where `contacts` (T, 2:
    left, right) says it is planted. Everything is in each frame's camera, as the observations are; `turns` (T, 3,
    3), a turning camera's, takes frame t's camera to the first's (the floor and a planted foot's stillness are
    the first frame's: the world's). Returns as `fit_clip`."""
    return fit_clip(points, available, rays, scores, focal, fps, iterations, fitted, floor, contacts, turns)


def _fit(points: np.ndarray, available: np.ndarray, rays: np.ndarray, scores: np.ndarray, focal: float,
         fps: float, iterations: int, start: np.ndarray | None = None, floor: tuple | None = None,
         contacts: np.ndarray | None = None, turns: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Fits one person over the frames given (every frame between their first and last, seen or not).
    points (T, 70, 3): the lifted keypoints, camera frame (NaN = not lifted); available (T, 70): lifted;
    rays (T, 70, 3): the point read on each keypoint's ray where the lift did not take it (hidden behind someone,
    or far in front of its body), NaN elsewhere; scores (T, 70); focal: pixels per unit of x/z; start (T, 70, 3):
    where the fit starts instead of the lifted points (NaN: from them), the harness's oracle (the fit started from
    the truth, with the same observations and terms: what they allow), or the first pass's (fit_on_floor); floor
    contacts and turns: fit_on_floor's (then one stage, at the data's own sigmas). Returns (T, 70, 3)
    fitted keypoints (NaN for keypoints never seen and those the skeleton does not use) and (70,) each keypoint's
    median 2D error in metres at its depth (NaN where never seen)."""
    points, rays = np.asarray(points, np.float64), np.asarray(rays, np.float64)
    available = np.asarray(available, bool) & np.isfinite(points).all(-1)
    flip = np.asarray(keypoint_meta()["flip_indices"][:points.shape[1]], np.int64)
    swapped = unswapped(points, available, flip)
    points, rays, available, scores = (np.where(swapped.reshape((-1,) + (1,) * (a.ndim - 1)), a[:, flip], a)
                                       for a in (points, rays, available, np.asarray(scores, np.float64)))
    on_ray = np.where(available[..., None], points, rays)
    aimed = np.isfinite(on_ray).all(-1) & (on_ray[..., 2] > 1e-3)
    index, keypoints = name_index(), points.shape[1]
    order = np.array([index[k] for k in USED])
    ever = aimed.any(0)[order]
    lifted_start = median_filled(points, available, _parents())
    start = lifted_start if start is None else np.where(np.isfinite(start), np.asarray(start, np.float64),
                                                        lifted_start)
    missing = ~np.isfinite(start).all(-1)
    if missing.all(0)[[index["left_hip"], index["right_hip"], index["neck"]]].any():
        raise ValueError("the hips and neck were never placed in 3D")
    for k in np.flatnonzero(missing.all(0)):  # never lifted: beside the neck, for a starting direction only
        start[:, k] = start[:, index["neck"]] + [0.0, 0.05, 0.0]
    torch.manual_seed(0)
    body = _Body(start, {k: bool(e) for k, e in zip(USED, ever)})
    aimed, available, on_ray, points, scores = (a[:, order] for a in (aimed, available, on_ray, points, scores))
    target = torch.as_tensor(np.where(aimed[..., None], on_ray[..., :2] / on_ray[..., 2:], 0.0), dtype=DTYPE)
    # a covered keypoint's read depth too: the nearest surface on its ray (its own, or a cover's: see the top)
    depth = torch.as_tensor(np.where(aimed, np.nan_to_num(on_ray[..., 2]), 0.0), dtype=DTYPE)
    weight_2d = torch.as_tensor(np.where(aimed, np.clip(scores, 0, 1), 0.0), dtype=DTYPE)[..., None]
    weight_z = torch.as_tensor(aimed, dtype=DTYPE)
    offset = torch.nn.Parameter(torch.zeros(points.shape[:2], dtype=DTYPE))
    if floor is not None or contacts is not None:  # the second pass: from the depth offsets the first one found
        with torch.no_grad():
            gap = np.where(available, start[:, order, 2] - points[..., 2], np.nan)
            offset.copy_(torch.as_tensor(starting_offsets(gap, fps, 3 * OFFSET_SIGMA), dtype=DTYPE))
    pixel_sigma = noise_scale(np.where(aimed[..., None], focal * target.numpy(), np.nan), MIN_PIXEL_SIGMA)
    depth_sigma = noise_scale(np.where(available, points[..., 2], np.nan)[..., None], MIN_DEPTH_SIGMA)
    frames = len(points)

    feet = [_COLUMN[f"{s}_{k}"] for s in SIDES for k in ("ankle", "heel", "big_toe", "small_toe")]
    soles = [_COLUMN[f"{s}_{k}"] for s in SIDES for k in ("heel", "big_toe", "small_toe")]  # the floor's bound
    on_floor = FloorTerms(frames, fps, soles, feet, floor, contacts, turns, DTYPE)  # the second pass's two terms

    # a foot on the floor does not slide: a foot keypoint still in the smoother stages' fit holds one place in the
    # last, each frame pulled to the run's mean (the noisy depth would otherwise walk it about)
    runs = [None]  # (frame, column, run) per planted sample and each run's length, once the smooth stages are done
    loose = [1.0]  # the data's sigmas are loosened at first (a smooth start), then tightened to their measure
    # fps^2 over the angular acceleration's sigma: then each rotating part's own (ANGULAR_QUANTILE), in the last stage
    turn_scale = [torch.as_tensor(fps * fps / ANGULAR_SIGMA, dtype=DTYPE)]

    target_planes, weight_2d = target.mT.contiguous(), weight_2d.mT.contiguous()  # (T, 2 or 1, K): as Data's

    def energy():
        full = body().mT  # (T, 3, K), contiguous
        e = Data.apply(full, offset, target_planes, weight_2d, focal / (pixel_sigma * loose[0]),  # (written out)
                       max(ROBUST_C, OUTLIER_PIXELS / pixel_sigma), depth, weight_z, depth_sigma,
                       max(ROBUST_C, OUTLIER_DEPTH / depth_sigma), 1 / loose[0] ** 2)
        e = e + ((offset / OFFSET_SIGMA) ** 2).sum() + ((torch.diff(offset, dim=0) * fps / DRIFT_SIGMA) ** 2).sum()
        turning = body.turning
        if frames > 2:
            e = e + Acceleration.apply(body.root, fps * fps / ACCELERATION_SIGMA, PRIOR_C)
            e = e + Acceleration.apply(turning, turn_scale[0], PRIOR_C)
        if runs[0] is not None:  # each planted sample against its run's mean place, all runs at once
            frame, column, run, count = runs[0]
            held = full[frame, :, column]
            mean = torch.zeros(len(count), 3, dtype=DTYPE).index_add(0, run, held) / count[:, None]
            e = e + ((held - mean[run]) ** 2).sum() / PLANTED_SIGMA ** 2
        e = e + on_floor(full)
        ratios = torch.cat([body.log_length[_PROPORTIONED], body.log_hip[None]]) - _LOG_PROPORTIONS
        e = e + (((ratios - ratios.mean()) / PROPORTION_SIGMA) ** 2).sum()  # the person's own size is free
        # the shin turns backwards about the hips' axis, never forwards (both knees at once)
        legs, across = body.knees
        bend = torch.cross(*_unit(legs.contiguous()).unbind(2), dim=-1)
        e = e + 100 * (torch.relu(-(bend * across[:, None]).sum(-1) - 0.05) ** 2).sum()
        return e

    parameters = list(body.parameters()) + [offset]
    stages, shares = (STAGES, STAGE_SHARES) if floor is None and contacts is None else ((1.0,), (1.0,))
    for stage, loose[0] in enumerate(stages):
        if stage == len(stages) - 1:
            with torch.no_grad():
                fitted = body()
                if frames > 2:
                    turn_scale[0] = fps * fps / _own_angular_sigmas(body.turning, torch.as_tensor(available), fps)
                found = planted_runs(fitted[:, feet].numpy(), fps)
                if found:
                    frame = np.concatenate([np.arange(a, b) for _, a, b in found])
                    column = np.concatenate([np.full(b - a, feet[k]) for k, a, b in found])
                    run = np.repeat(np.arange(len(found)), [b - a for _, a, b in found])
                    runs[0] = (torch.as_tensor(frame), torch.as_tensor(column), torch.as_tensor(run),
                               torch.as_tensor([b - a for _, a, b in found], dtype=DTYPE))
        if iterations:  # torch.optim.LBFGS's, lean: see lbfgs.py
            minimize(energy, parameters, round(iterations * shares[stage]), history_size=20,
                     tolerance_grad=1e-10, tolerance_change=1e-12)
    with torch.no_grad():
        fitted = body().double().numpy()
    if not np.isfinite(fitted).all():
        raise ValueError("the fit of the skeleton did not converge on this person's keypoints")
    error = np.linalg.norm(fitted[..., :2] / fitted[..., 2:] - np.where(aimed[..., None], target.numpy(), np.nan),
                           axis=-1) * fitted[..., 2]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        noise = np.nanmedian(np.where(aimed, error, np.nan), axis=0)
    out, spread = np.full((frames, keypoints, 3), np.nan), np.full(keypoints, np.nan)
    out[:, order[ever]], spread[order[ever]] = fitted[:, ever], noise[ever]
    return out, spread

"""The clip's fit (pose/clip_fit.py) on synthetic answers: keypoints hidden behind someone placed on their ray, a
limb out of view carried through by the motion prior, one set of bone lengths for the clip, left/right swaps
exchanged back, clean input through unchanged."""

import numpy as np

from sapiens2_demo.pose.clip_data import noise_scale, unswapped
from sapiens2_demo.pose.clip_fit import fit_clip
from sapiens2_demo.pose.lift import Pose3DResult
from sapiens2_demo.pose.meta import keypoint_meta, name_index
from sapiens2_demo.pose.motion import MotionRecorder
from sapiens2_demo.pose.skeleton3d import hand_keypoints
from tests.unit.test_mocap_export import walking_keypoints

FPS = 25.0
BODY = [name_index()[k] for k in ("neck", "left_shoulder", "left_elbow", "left_wrist", "left_hip", "left_knee",
                                  "left_ankle", "right_knee", "right_wrist")]


def _fit(points, available=None, rays=None):
    available = np.isfinite(points).all(-1) if available is None else available
    rays = np.full_like(points, np.nan) if rays is None else rays
    return fit_clip(points, available, rays, np.where(available, 0.9, 0.4), 500.0, FPS)


def test_a_keypoint_hidden_behind_someone_is_placed_on_its_ray():
    """A person walking 4 m away whose left forearm and hand are covered for 10 frames by someone 1.5 m nearer:
    the lift reads the cover's depth on their rays (`covered`). The recorder's fit places them on those rays (their
    depth along it from the motion prior): 7.7 cm off at worst, where the prior alone is 12.6 cm off."""
    truth = walking_keypoints()[:, :70].astype(np.float64)
    frames, wrist = len(truth), name_index()["left_wrist"]
    hand = [name_index()["left_elbow"]] + hand_keypoints("left")
    hidden = (np.arange(frames) >= 20) & (np.arange(frames) < 30)
    errors = {}
    for rays in (True, False):
        recorder = MotionRecorder(smoothing=True)
        for f in range(frames):
            points = truth[f].copy()
            available = np.isfinite(points).all(-1)
            covered = np.full((70, 3), np.nan)
            if hidden[f]:
                available[hand] = False
                covered[hand] = points[hand] * 2.5 / points[hand, 2:]  # the cover's depth, on their rays
                points[hand] = np.nan
            lifted = Pose3DResult(points=points[None].astype(np.float32), scores=np.full((1, 70), 0.9, np.float32),
                                  available=available[None], track_ids=np.array([1]),
                                  covered=covered[None].astype(np.float32) if rays else None)
            recorder.add(f / FPS, lifted)
        (track,) = recorder.tracks()
        errors[rays] = np.linalg.norm(track.points[hidden, wrist] - truth[hidden, wrist], axis=1).max()
        assert not track.measured[hidden, wrist].any()  # placed, not measured
    assert errors[True] < 0.08 and errors[True] < 0.7 * errors[False], errors


def test_a_limb_out_of_view_is_carried_by_the_motion_prior_and_keeps_its_bones():
    """The left leg unseen for 0.4 s of a walk (a stride's half): the fit fills it from the motion around (19 cm
    off at worst, at the gap's middle; holding the last pose: 55 cm), the thigh and shin keeping their lengths on
    every frame (one set of bones for the clip)."""
    truth = walking_keypoints()[:, :70].astype(np.float64)
    leg = [name_index()[k] for k in ("left_knee", "left_ankle", "left_big_toe", "left_small_toe", "left_heel")]
    holed = truth.copy()
    holed[20:30, leg] = np.nan
    fitted, _ = _fit(holed)
    error = np.linalg.norm(fitted[20:30, leg[:2]] - truth[20:30, leg[:2]], axis=-1).max()
    held = np.linalg.norm(truth[19, leg[:2]][None] - truth[20:30, leg[:2]], axis=-1).max()
    assert error < 0.25 and error < held / 2, (error, held)
    hip, knee, ankle = (name_index()[k] for k in ("left_hip", "left_knee", "left_ankle"))
    for a, b in ((hip, knee), (knee, ankle)):
        length = np.linalg.norm(fitted[:, a] - fitted[:, b], axis=-1)
        true = np.linalg.norm(truth[0, a] - truth[0, b])
        assert np.ptp(length) < 1e-9 and abs(length[0] - true) < 0.005 * true, (length[0], true)


def test_clean_input_comes_through_and_noise_is_measured_from_the_data():
    truth = walking_keypoints()[:, :70].astype(np.float64)
    fitted, _ = _fit(truth)
    error = np.linalg.norm(fitted[:, BODY] - truth[:, BODY], axis=-1)
    assert error.mean() < 0.002 and error.max() < 0.01, (error.mean(), error.max())
    rng = np.random.default_rng(0)
    pixels = 500 * truth[..., :2] / truth[..., 2:]
    assert noise_scale(pixels, 0.01) < 0.3  # a clean walk: well under a pixel
    assert 1.6 < noise_scale(pixels + rng.normal(0, 2.0, pixels.shape), 0.01) < 2.4  # 2 px noise: 2 px


def test_left_right_swaps_are_exchanged_back():
    truth = walking_keypoints()[:, :70].astype(np.float64)
    flip = np.asarray(keypoint_meta()["flip_indices"][:70], np.int64)
    points = truth.copy()
    points[[10, 30]] = points[[10, 30]][:, flip]
    seen = np.isfinite(points).all(-1)
    assert np.flatnonzero(unswapped(points, seen, flip)).tolist() == [10, 30]
    fitted, _ = _fit(points)
    error = np.linalg.norm(fitted[:, BODY] - truth[:, BODY], axis=-1)  # as on the clean input: the swaps are gone
    assert error.mean() < 0.002 and error.max() < 0.01, (error.mean(), error.max())


def test_a_planted_foot_is_held_still_under_noisy_depth():
    """A person standing, raising their arms (the feet never move), 2 px and 2 cm of noise: the fit's feet (ankle,
    big toe, heel) step 1.6 mm a frame across the floor on average (without the planted-foot term: 7.3 mm, the
    noise smoothed but not held)."""
    from tests.motion_clips import back_project, motion, project

    truth = motion("arms")[0][:48, :70]
    rng = np.random.default_rng(0)
    pixels = project(truth) + rng.normal(0, 2.0, truth.shape[:2] + (2,))
    points = back_project(pixels, truth[..., 2] + rng.normal(0, 0.02, truth.shape[:2]))
    fitted, _ = fit_clip(points, np.isfinite(points).all(-1), np.full_like(points, np.nan), np.full((48, 70), 0.9),
                         500.0, 24.0)
    feet = [name_index()[f"{s}_{k}"] for s in ("left", "right") for k in ("ankle", "big_toe", "heel")]
    step = np.linalg.norm(np.diff(fitted[:, feet], axis=0)[..., [0, 2]], axis=-1)
    assert step.mean() < 0.003, step.mean()


def test_an_arm_reaching_towards_the_camera_keeps_the_depth_its_ray_was_read_at():
    """A spin with the arms out: where an arm points at the camera its keypoints lie more than the lift's gap in
    front of the body, so the lift drops them to their rays (`covered`) though the depth read there is their own.
    The fit keeps that depth under its robust loss (a cover's, far nearer, it lets go): the elbows and wrists 4 cm
    off at worst; placed from the 2D ray and the motion prior alone the arm flips behind the body (57 cm)."""
    from sapiens2_demo.pose.lift import drop_in_front
    from tests.motion_clips import motion

    truth = motion("spin")[0][:40, :70]
    points = truth.astype(np.float32).copy()
    available = np.isfinite(points).all(-1)
    dropped = drop_in_front(points, available)
    arms = [name_index()[k] for k in ("right_elbow", "right_wrist", "left_elbow", "left_wrist")]
    assert dropped[:, arms].any(1).sum() >= 10  # the case this is about: many frames of arm on its ray only
    fitted, _ = fit_clip(points, available, np.where(dropped[..., None], truth, np.nan), np.full((40, 70), 0.9),
                         500.0, 24.0)
    assert np.linalg.norm(fitted[:, arms] - truth[:, arms], axis=-1).max() < 0.1


def test_a_fast_arm_swing_is_not_taken_for_a_fault():
    """A jump's arm swing, clean: at its fastest the hands move ~20 cm a frame, far from their 5-frame median. The
    start keeps them (near the guesses the frames around make: a fault is far from all of them), and the fit
    follows: the hands 1 mm off at worst (taken for faults at the start, the fit was 17 cm off)."""
    from sapiens2_demo.pose.skeleton3d import hand_keypoints
    from tests.motion_clips import motion

    truth = motion("jump")[0][:36, :70]
    fitted, _ = _fit(truth)
    hands = hand_keypoints("left") + hand_keypoints("right")
    assert np.linalg.norm(fitted[:, hands] - truth[:, hands], axis=-1).max() < 0.01


def test_a_forward_beside_a_fit_keeps_the_process_s_thread_count():
    """The fit runs on one thread in a worker process (fit_worker.py): a request's forward that starts while it
    runs, on a fresh thread as a server's, gets the process's thread count and runs (it got 1 while the fit set
    torch's count, which is the process's, for itself)."""
    import threading

    import torch

    from tests.motion_clips import CAMERA_HEIGHT, TO_CAMERA, _standing, back_project, body, project
    from tests.motion_moves import dance

    t = np.arange(48) / 24
    truth = ((body(dance(t, _standing), len(t)) - [0, CAMERA_HEIGHT, 0]) @ TO_CAMERA.T)[:, :70]
    rng = np.random.default_rng(0)
    points = back_project(project(truth) + rng.normal(0, 2.0, truth.shape[:2] + (2,)), truth[..., 2])
    available = np.isfinite(points).all(-1)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        fitted = []
        fit = threading.Thread(target=lambda: fitted.append(fit_clip(
            points, available, np.full_like(points, np.nan), np.where(available, 0.9, 0.0), 500.0, 24.0)))
        seen = []

        def forward():
            seen.append(torch.get_num_threads())
            torch.nn.functional.conv2d(torch.ones(1, 3, 64, 64), torch.ones(8, 3, 3, 3))

        fit.start()
        while fit.is_alive():
            request = threading.Thread(target=forward)
            request.start()
            request.join()
            fit.join(0.05)
        assert len(seen) >= 3 and set(seen) == {2}, seen
        assert fitted and np.isfinite(fitted[0][0][:, :17]).all()
    finally:
        torch.set_num_threads(before)


def test_left_and_right_feet_and_palms_are_one_shape_mirrored():
    """One foot and one palm for the clip, the right the left's mirror image: started from an exact, symmetric
    body the skeleton puts every foot and palm keypoint back where it was (a wrong mirror would put the right
    foot's toes on its inside, centimetres off); and fitted to noisy keypoints, the two sides keep equal shapes."""
    from sapiens2_demo.pose import clip_fit

    truth = walking_keypoints()[:, :70].astype(np.float64)
    used = [name_index()[k] for k in clip_fit.USED]
    body = clip_fit._Body(truth, {k: True for k in clip_fit.USED})
    with np.errstate(all="ignore"):
        rebuilt = body().detach().numpy()
    parts = [clip_fit.USED.index(m) for g in clip_fit.GROUPS[1:] for m in g[1]]
    assert np.abs(rebuilt[:, parts] - truth[:, used][:, parts]).max() < 1e-6

    rng = np.random.default_rng(3)
    fitted, _ = _fit(truth + rng.normal(0, 0.01, truth.shape))
    index = name_index()
    for anchor, members in (("ankle", ("heel", "big_toe", "small_toe")),
                            ("wrist", ("forefinger_third_joint", "pinky_finger_third_joint"))):
        for m in members:
            left = np.linalg.norm(fitted[:, index[f"left_{m}"]] - fitted[:, index[f"left_{anchor}"]], axis=-1)
            right = np.linalg.norm(fitted[:, index[f"right_{m}"]] - fitted[:, index[f"right_{anchor}"]], axis=-1)
            assert np.allclose(left, right, atol=1e-9), m


def test_planted_runs_find_a_foot_on_the_floor_through_noise():
    """A foot still for a second, stepping 0.5 m in 0.5 s, still again, with 5 mm of jitter a frame (0.12 m/s
    frame to frame at 25 frames/s, more than STILL_SPEED): two runs, each within the window's half of the truth,
    and no run while it steps."""
    from sapiens2_demo.pose.clip_data import PLANT_WINDOW, planted_runs

    t = np.arange(63) / FPS
    x = np.clip((t - 1.0) / 0.5, 0, 1) * 0.5
    foot = np.stack([x, 0 * t, 3 + 0 * t], 1)[:, None] + np.random.default_rng(0).normal(0, 0.005, (63, 1, 3))
    runs = planted_runs(foot, FPS)
    assert [k for k, _, _ in runs] == [0, 0], runs
    (_, a0, b0), (_, a1, b1) = runs
    slack = PLANT_WINDOW * FPS / 2 + 1
    assert a0 == 0 and abs(b0 - 25) <= slack and abs(a1 - 38) <= slack and b1 == 63, runs


def test_an_arm_never_seen_still_fits_and_takes_the_body_s_proportions():
    """The left elbow, wrist and hand never lifted (their starts all beside the neck, bones of length 0): the fit
    converges (the proportions prior once took log(0) and every frame came back NaN, so no BVH was written) and the
    seen keypoints stay near their truth (2.3 cm at worst, the right wrist: as before the prior was added)."""
    truth = walking_keypoints()[:, :70].astype(np.float64)
    index = name_index()
    hidden = [index["left_elbow"], index["left_wrist"]] + hand_keypoints("left")
    points = truth.copy()
    points[:, hidden] = np.nan
    fitted, _ = _fit(points)
    seen = [k for k in BODY if k not in hidden]
    assert np.isfinite(fitted[:, seen]).all()
    assert np.abs(fitted[:, seen] - truth[:, seen]).max() < 0.03


def test_the_start_follows_the_mid_hip_point_through_a_frame_with_one_hip_missing():
    """A blurred frame that loses the left hip and the right shoulder: the start interpolates the shoulder about
    the mid-hip point of the frames around, not about the one hip left (half a hip width off: on a jump under
    faults that start cost the right arm 17 cm for eight frames). Its error is the interpolation's own."""
    from sapiens2_demo.pose.clip_data import median_filled

    truth = walking_keypoints()[:, :70].astype(np.float64)
    index, f = name_index(), 20
    hips, shoulder = [index["left_hip"], index["right_hip"]], index["right_shoulder"]
    available = np.isfinite(truth).all(-1)
    available[f, [index["left_hip"], shoulder]] = False
    start = median_filled(np.where(available[..., None], truth, np.nan), available)
    relative = truth[:, shoulder] - truth[:, hips].mean(1)
    mid_hip = (truth[f - 1, hips].mean(0) + truth[f + 1, hips].mean(0)) / 2
    expected = mid_hip + (relative[f - 1] + relative[f + 1]) / 2  # what interpolating both about the mid-hip gives
    assert np.linalg.norm(start[f, shoulder] - expected) < 1e-9
    half_hip = np.linalg.norm(truth[f, hips[0]] - truth[f, hips[1]]) / 2
    assert np.linalg.norm(start[f, shoulder] - truth[f, shoulder]) < half_hip / 4


def test_a_part_that_turns_fast_is_held_to_its_own_motion_prior(monkeypatch):
    """A dance's arms under 1 cm of noise: the last stage holds each rotating part to its own angular acceleration
    (measured on the smooth stages' fit, never below ANGULAR_SIGMA), so the fast arms are not smoothed towards a
    stroller's prior; held to the one prior (ANGULAR_MAX at ANGULAR_SIGMA), the fit is further from the truth."""
    from sapiens2_demo.pose import clip_fit
    from tests.motion_clips import motion

    truth = motion("dance")[0][:48, :70]
    noisy = truth + np.random.default_rng(0).normal(0, 0.01, truth.shape)
    seen = np.isfinite(truth).all(-1)

    def error() -> float:  # here, not in the fit's worker process: the patched constant is this process's
        fitted, _ = clip_fit._fit(noisy, seen, np.full_like(noisy, np.nan), np.where(seen, 0.9, 0.4), 500.0, 24.0,
                                  clip_fit.ITERATIONS)
        return float(np.linalg.norm(fitted - truth, axis=-1)[seen].mean())

    own = error()
    monkeypatch.setattr(clip_fit, "ANGULAR_MAX", clip_fit.ANGULAR_SIGMA)
    assert own < error()


def test_the_fit_s_written_out_gradients_are_autograd_s():
    """pose/clip_terms.py computes the fit's heaviest terms and their gradients by hand (fewer passes over the
    clip's arrays): each one's value and gradient are those of the same formula through autograd."""
    import torch

    from sapiens2_demo.pose import clip_terms

    rng = torch.Generator().manual_seed(0)

    def random(*shape, low=-2.0, high=2.0):
        return (torch.rand(*shape, generator=rng, dtype=torch.float64) * (high - low) + low).requires_grad_()

    def gm(r, c):
        return r * r / (1 + r * r / c ** 2)

    def huber(r, c):
        a = r.abs()
        return torch.where(a < c, a * a, 2 * c * a - c ** 2)

    points = random(6, 4, 3)
    with torch.no_grad():
        points[..., 2] = points[..., 2].abs() + 0.5
        points[0, 0, 2] = 1e-4  # behind the clamp: no gradient through z's clamp
    offset, target, w2 = random(6, 4), random(6, 4, 2).detach(), random(6, 4, 1, low=0, high=1).detach()
    depth, wz = random(6, 4).detach(), random(6, 4, low=0, high=1).detach()
    v, x, scale = random(5, 7, 3), random(9, 4, 3), random(7, 4, 1, low=0.5, high=3).detach()
    v.data[0, 0] = 1e-12  # shorter than 1e-9: only scaled
    weights = random(5, 7, 3).detach()
    cases = [
        (lambda p, o: clip_terms.Data.apply(p.mT, o, target.mT, w2.mT[:, :1], 30.0, 3.0, depth, wz, 0.05, 4.0, 0.25),
         lambda p, o: (w2 * gm((p[..., :2] / p[..., 2:].clamp_min(1e-3) - target) * 30.0, 3.0)).sum()
         + 0.25 * (wz * gm((p[..., 2].clamp_min(1e-3) - depth - o) / 0.05, 4.0)).sum(), (points, offset)),
        (lambda a: (clip_terms.Unit.apply(a) * weights).sum(),
         lambda a: (a / a.norm(dim=-1, keepdim=True).clamp_min(1e-9) * weights).sum(), (v,)),
        (lambda a: clip_terms.Acceleration.apply(a, scale, 0.5),
         lambda a: huber((a[2:] - 2 * a[1:-1] + a[:-2]) * scale, 0.5).sum(), (x,)),
    ]
    for ours, autograd, inputs in cases:
        mine, theirs = ours(*inputs), autograd(*inputs)
        assert torch.allclose(mine, theirs, rtol=1e-12)
        for a, b in zip(torch.autograd.grad(mine, inputs), torch.autograd.grad(theirs, inputs)):
            assert torch.allclose(a, b, rtol=1e-10, atol=1e-12)


def test_the_fit_s_l_bfgs_takes_torch_s_steps(monkeypatch):
    """pose/lbfgs.py is torch.optim.LBFGS with a strong Wolfe line search, leaner: with its history in float64 (the
    fit's) it takes the same steps to the same place (Rosenbrock's valley, 40 steps, the history 5 pairs); in
    float32 it gets as near the minimum."""
    import torch

    from sapiens2_demo.pose import lbfgs

    def solve(ours, dtype=torch.float64):
        monkeypatch.setattr(lbfgs, "HISTORY_DTYPE", dtype)
        x = torch.nn.Parameter(torch.tensor([-1.5, 2.0, -0.5, 1.5], dtype=torch.float64))

        def energy():
            return (100 * (x[1:] - x[:-1] ** 2) ** 2 + (1 - x[:-1]) ** 2).sum()

        if ours:
            lbfgs.minimize(energy, [x], 40, history_size=5)
        else:
            solver = torch.optim.LBFGS([x], lr=1, max_iter=40, history_size=5, line_search_fn="strong_wolfe",
                                       tolerance_grad=1e-10, tolerance_change=1e-12)

            def closure():
                solver.zero_grad()
                e = energy()
                e.backward()
                return e

            solver.step(closure)
        return x.detach().clone(), float(energy().detach())

    theirs, e_theirs = solve(False)
    ours, e_ours = solve(True)
    assert torch.allclose(ours, theirs, rtol=1e-12, atol=1e-14) and abs(e_ours - e_theirs) <= 1e-12 + 1e-9 * e_theirs
    _, e_float32 = solve(True, torch.float32)
    assert e_float32 < max(10 * e_theirs, 1e-6)


def test_the_fit_reads_the_lifted_points_not_the_video_s_causal_filter():
    """A sprint's swinging feet through the recorder with the video's One Euro filter on (smoothing, the default): the
    JSON lines' points lag the feet by centimetres, the skeleton's fit (fed the raw lifted points) does not."""
    from tests.motion_clips import motion

    truth = motion("sprint")[0]
    recorder = MotionRecorder(smoothing=True, min_cutoff=0.2, beta=0.0)
    smoothed = []
    for f, points in enumerate(truth):
        available = np.isfinite(points).all(1)
        lifted = Pose3DResult(points=points[None].astype(np.float32), scores=np.where(available, 0.9, 0.0)[None],
                              available=available[None], track_ids=np.array([1]))
        smoothed.append(recorder.add(f / 24, lifted)[0]["points"])
    ankles = [name_index()["left_ankle"], name_index()["right_ankle"]]
    lag = np.linalg.norm(np.array(smoothed)[:, ankles] - truth[:, ankles], axis=-1).mean()
    fitted = recorder.tracks()[0].points[:, ankles]
    assert lag > 0.05 and np.linalg.norm(fitted - truth[:, ankles], axis=-1).mean() < 0.005, lag


def test_the_fit_starts_where_it_is_told_the_harness_s_oracle():
    """`start` (the harness's oracle: the fit started from the truth, the same observations and terms) is where the
    fit begins: with no iterations, the skeleton built on the true keypoints gives them back (under 1 mm on the
    body), where the lifted start under 3 cm of depth noise is centimetres off."""
    truth = walking_keypoints()[:, :70].astype(np.float64)
    noisy = truth + np.random.default_rng(0).normal(0, 0.03, truth.shape)
    available = np.isfinite(noisy).all(-1)
    rays, scores = np.full_like(noisy, np.nan), np.where(available, 0.9, 0.0)
    errors = {}
    for label, start in (("truth", truth), ("lifted", None)):
        fitted, _ = fit_clip(noisy, available, rays, scores, 500.0, FPS, iterations=0, start=start)
        errors[label] = np.linalg.norm(fitted[:, BODY] - truth[:, BODY], axis=-1).mean()
    assert errors["truth"] < 0.001 and errors["lifted"] > 0.01, errors


def test_a_flip_s_fast_hands_are_not_taken_for_faults():
    """At a back flip's top the hands swing 50-65 cm a frame on a curve (the fingers 14 cm about the wrist): clean,
    no sample is taken for a fault, each judged about its parent too (before, 62 finger samples were, and the palm
    started there turned over: 4 body rotations over 90 degrees on clean input)."""
    from sapiens2_demo.pose.clip_data import median_filled
    from sapiens2_demo.pose.clip_fit import _parents
    from tests.motion_clips import make_clip

    clip = make_clip("flip", noise=False, faults=False)
    points = clip.lifted[0][:, :70].astype(np.float64)
    seen = np.isfinite(points).all(-1)
    start = median_filled(points, seen, _parents())
    replaced = ~np.isclose(start, points).all(-1) & seen
    assert not replaced.any(), np.argwhere(replaced)[:5]

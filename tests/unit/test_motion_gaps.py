"""The mocap path's gap filling on synthetic answers: keypoints hidden behind someone placed on their ray, joint
rotations through gaps (a repeating stride filled from another stride, anything else eased from end to end),
rigid groups fitted as one."""

import numpy as np

from sapiens2_demo.pose.lift import Pose3DResult
from sapiens2_demo.pose.meta import name_index
from sapiens2_demo.pose.motion import MotionRecorder
from tests.motion_clips import rot

FPS = 24.0


def _angle(a, b):
    return np.degrees(np.arccos(np.clip((np.einsum("...ij,...ij->...", a, b) - 1) / 2, -1, 1)))


def test_a_keypoint_hidden_behind_someone_is_placed_on_its_ray():
    """A still person 4 m away whose left wrist swings sideways while someone 1.5 m nearer covers it for 10
    frames: the lift reads the cover's depth on the wrist's ray (`covered`). The recorder places it on that ray at
    the depth of the frames around: within 5 mm of the truth (1.5 measured), where interpolating across the gap is 10 cm off (15)."""
    rng = np.random.default_rng(0)
    body = rng.uniform(-0.4, 0.4, (70, 3)) + [0.0, 0.0, 4.0]
    frames, wrist = 40, name_index()["left_wrist"]
    t = np.arange(frames)
    truth = np.repeat(body[None], frames, 0)
    truth[:, wrist, 0] += 0.3 * np.sin(2 * np.pi * t / 30)
    hidden = (t >= 15) & (t < 25)
    for rays in (True, False):
        recorder = MotionRecorder(smoothing=True)
        for f in range(frames):
            points = truth[f].copy()
            available = np.ones(70, bool)
            covered = np.full((70, 3), np.nan)
            if hidden[f]:
                available[wrist] = False
                covered[wrist] = points[wrist] * 2.5 / points[wrist, 2]  # the cover's depth, on the wrist's ray
                points[wrist] = np.nan
            lifted = Pose3DResult(points=points[None].astype(np.float32), scores=np.ones((1, 70), np.float32),
                                  available=available[None], track_ids=np.array([1]),
                                  covered=covered[None].astype(np.float32) if rays else None)
            recorder.add(f / FPS, lifted)
        (track,) = recorder.tracks()
        error = np.linalg.norm(track.points[hidden, wrist] - truth[hidden, wrist], axis=1).max()
        assert (error < 0.005) if rays else (error > 0.1), (rays, error)
        assert not track.measured[hidden, wrist].any()  # placed, not measured: no bone length read off it


def test_a_joint_repeating_with_the_stride_is_filled_from_another_stride():
    """A knee swinging with a 1.1 s stride, unseen for 0.5 s: filled within 1 degree of the truth (easing from
    end to end would be ~20 degrees off); a joint that only turns once is eased from one end to the other."""
    from sapiens2_demo.pose.bridge import bridge

    frames = 96
    t = np.arange(frames) / FPS
    swing = rot("x", 0.6 * np.sin(2 * np.pi * t / 1.1))
    once = rot("y", np.pi / 2 * np.clip((t - 1) / 2, 0, 1))
    local = np.stack([swing, once], 1)
    known = np.ones((frames, 2), bool)
    known[40:52] = False
    filled = bridge(local, known, FPS)
    assert _angle(filled[40:52, 0], swing[40:52]).max() < 1.0
    eased = _angle(filled[40:52, 1], once[39])
    assert np.all(np.diff(eased) > 0) and _angle(filled[51, 1], once[52]) < _angle(once[39], once[52])
    assert np.array_equal(filled[known[:, 0], 0], swing[known[:, 0]])


def test_rigid_groups_keep_their_shape_and_average_their_noise():
    """A four-point rigid foot turning over 60 frames, 1 cm noise on each point: fitted as one it keeps its shape
    on every frame and lands closer to the truth than the noisy points; frames missing a point are left alone."""
    from sapiens2_demo.pose.clip_smoothing import rigid_groups

    rng = np.random.default_rng(1)
    shape = np.array([[0.0, 0.0, 0.0], [0.0, -0.07, -0.05], [0.02, -0.06, 0.15], [0.06, -0.06, 0.12]])
    turn = rot("y", np.linspace(0, 1.5, 60)) @ rot("x", np.linspace(0, 0.4, 60))
    truth = np.einsum("tij,gj->tgi", turn, shape) + np.linspace([0, 0, 3], [1, 0, 3], 60)[:, None]
    points = np.concatenate([truth + rng.normal(0, 0.01, truth.shape), np.zeros((60, 2, 3))], 1)
    placed = np.ones((60, 6), bool)
    placed[7, 2] = False
    out = rigid_groups(points, placed, [[0, 1, 2, 3]])
    fitted = np.delete(np.arange(60), 7)
    pair = lambda p: np.linalg.norm(p[:, :, None] - p[:, None, :], axis=-1)  # noqa: E731
    true_pairs = pair(shape[None])[0]
    assert np.abs(pair(out[fitted, :4]) - pair(out[fitted[:1], :4])).max() < 1e-9
    assert np.abs(pair(out[fitted[:1], :4])[0] - true_pairs).max() < 0.01
    assert np.array_equal(out[7], points[7]) and np.array_equal(out[:, 4:], points[:, 4:])
    before = np.linalg.norm(points[fitted, :4] - truth[fitted], axis=-1).mean()
    after = np.linalg.norm(out[fitted, :4] - truth[fitted], axis=-1).mean()
    assert after < 0.8 * before, (before, after)

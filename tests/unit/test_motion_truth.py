"""The motion-capture ground-truth harness's clips as tests (tests/motion_truth.py): a few clips and conditions
through the video job's after-model path, the motion read back from the written BVH (and motion.glb, which must
agree with it), held to the issue's targets where the fit meets them and under ceilings set from the measured
figures where it does not yet (benchmarks/bench_motion_truth.py prints them all; docs/motion.md has the table).
The figures are deterministic (seeded data, a deterministic fit), so the margins only absorb floating-point
differences between CPUs (float32 sums in the fit: well under 0.1 mm). Most run the clips' first 1.5 s (SHORT) to keep
the suite's time down: the benchmark measures the whole clips."""

import warnings

import numpy as np
import pytest

from tests.motion_clips import LEVEL
from tests.motion_truth import measure_run

# the targets
CLEAN_MM, NOISE_MM, FAULTS_MM, HEAVY_MM, BONE_PCT = 2.0, 10.0, 12.0, 15.0, 5.0
SHORT = 1.5  # seconds


def _measure(name, noise=True, faults=True, seed=0, heavy=False, seconds=SHORT, camera=LEVEL):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return measure_run(name, noise, faults, seed, heavy=heavy, seconds=seconds, camera=camera)


def _sound(m):
    """What holds on every clip and condition: the files agree, nobody is lost or switched, the height holds."""
    assert m["glb_vs_bvh_mm"] < 0.5, m  # motion.glb's animation puts every joint where the BVH does
    assert m["id_switches"] == 0 and m["frames_lost"] == 0 and m["height_error"] <= 0.02, m


# clean input, measured (seed 0, 1.5 s): walk 0.15 mm, bones 0.05 %; dance 0.53 mm, 0.09 %; the jump 0.36 mm, 0.17 %
# (its arm swing was once taken for faults at the fit's start: 16 finger and 4 body flips on the whole clip)
@pytest.mark.parametrize("name", ["walk", "dance", "jump"])
def test_clean_input_comes_through_within_the_target(name):
    m = _measure(name, noise=False, faults=False)
    _sound(m)
    assert m["mpjpe_mm"] <= CLEAN_MM and m["bone_error_pct"] <= BONE_PCT, m
    assert m["body_jumps_90"] == 0 and m["finger_jumps_90"] == 0 and m["euler_flips"] == 0, m
    assert m["finger_steps"] > 0, m


def test_a_fast_run_towards_the_camera_clean():
    # measured 1.4 mm on its first 1.5 s (3.4 before the start stopped taking fast limbs for faults), bones 0.4 %
    m = _measure("run", noise=False, faults=False)
    _sound(m)
    assert m["mpjpe_mm"] <= CLEAN_MM and m["bone_error_pct"] <= BONE_PCT and m["body_jumps_90"] == 0, m


def test_a_spin_with_the_arms_out_clean_turns_no_joint_over():
    # the arms reach towards the camera as they go round: the lift drops them to their rays, and the fit keeps the
    # depth read there (without it: 10 body and 21 finger rotations > 90 degrees between frames, 7.9 mm on the
    # whole clip); measured on the first 1.5 s: 1.83 mm, bones 0.3 %, no flip (2.8 mm, over the target, while the
    # trunk's motion prior was 3 rad/s^2 and the loose stages took two thirds of the iterations)
    m = _measure("spin", noise=False, faults=False)
    _sound(m)
    assert m["body_jumps_90"] == 0 and m["finger_jumps_90"] == 0 and m["euler_flips"] == 0, m
    assert m["mpjpe_mm"] <= CLEAN_MM and m["bone_error_pct"] <= BONE_PCT and m["finger_steps"] > 0, m


def test_walk_under_noise_and_faults():
    # measured 12.3 mm on its first 1.5 s (target 12; the whole clip 11.1), swap frames 1.5x their baseline
    m = _measure("walk")
    _sound(m)
    assert m["mpjpe_mm"] <= 13.5 and m["swap_error_mm"] <= 2 * m["baseline_error_mm"], m
    assert m["body_jumps_90"] == 0 and m["euler_flips"] == 0, m


def test_walk_under_the_heavy_error_model():
    # Student t 2D error and drifting depth, the whole clip (its drift needs the 3 s): measured 20.0 mm (target 15;
    # the first fit 22.3, the road before it 23.1)
    m = _measure("walk", faults=False, heavy=True, seconds=None)
    _sound(m)
    assert m["mpjpe_mm"] <= 21.0 and m["body_jumps_90"] == 0, m


def test_rotation_orders_round_trip_and_stay_continuous():
    from sapiens2_demo.export.bvh import ORDERS, continuous_euler, euler, rotation_orders
    from tests.motion_clips import rot

    rng = np.random.default_rng(1)
    angles = rng.uniform(-np.pi, np.pi, (200, 3))
    angles[:10, 1] = np.pi / 2  # gimbal lock
    for order in ORDERS:
        matrices = rot(order[0].lower(), angles[:, 0]) @ rot(order[1].lower(), angles[:, 1]) @ rot(
            order[2].lower(), angles[:, 2])
        for solved in (euler(matrices, order), continuous_euler(matrices, order)):
            rebuilt = rot(order[0].lower(), solved[:, 0]) @ rot(order[1].lower(), solved[:, 1]) @ rot(
                order[2].lower(), solved[:, 2])
            assert np.allclose(rebuilt, matrices, atol=1e-9), order
    # a hand twisting through ZXY's lock (90 degrees about x) in small steps: another order, no channel jump
    twist = rot("x", np.linspace(0, 2.6, 60)) @ rot("y", np.full(60, 0.3))
    (order,), angles = rotation_orders(twist[:, None])
    assert order != "ZXY"
    assert np.abs(np.diff(angles, axis=0)).max() < np.radians(10)


def _turning_path(rng, frames: int, speed: float) -> np.ndarray:
    """(T, 3, 3) a joint turning smoothly through every orientation (its angular velocity a random walk)."""
    from tests.motion_clips import rot

    def exp(w):  # Rodrigues
        angle = np.linalg.norm(w)
        k = np.cross(np.eye(3), w / max(angle, 1e-12))
        return np.eye(3) + np.sin(angle) * k + (1 - np.cos(angle)) * k @ k

    path = [rot("z", rng.uniform(-3, 3, 1))[0] @ rot("x", rng.uniform(-3, 3, 1))[0]]
    velocity = rng.normal(size=3) * speed
    for _ in range(frames - 1):
        velocity = velocity + rng.normal(size=3) * speed * 0.4
        path.append(path[-1] @ exp(velocity))
    return np.array(path)


def test_bvh_channels_never_step_past_90_degrees_while_the_joint_turns_less():
    # joints tumbling through every orientation, as a flip's hips do, at up to 45 degrees a frame: with the order
    # chosen by its middle angle alone, a channel stepped past 90 degrees on 1 of these 60 paths
    from sapiens2_demo.export.bvh import rotation_orders

    rng = np.random.default_rng(1)
    paths = [p for p in (_turning_path(rng, 48, 0.1) for _ in range(200))
             if _turns(p).max() <= 45][:60]
    assert len(paths) == 60
    orders, angles = rotation_orders(np.stack(paths, 1))
    steps = np.degrees(np.abs(np.diff(angles, axis=0))).max(axis=(0, 2))
    assert steps.max() <= 90, (steps.max(), orders)


def _turns(path: np.ndarray) -> np.ndarray:
    """Degrees each rotation of a (T, 3, 3) path turns from the one before."""
    trace = np.einsum("tji,tji->t", path[1:], path[:-1])
    return np.degrees(np.arccos(np.clip((trace - 1) / 2, -1, 1)))


def test_motion_files_for_the_people_asked_for_and_a_note_per_id(tmp_path):
    from sapiens2_demo.export.mocap_video import chosen_people
    from tests.motion_clips import make_clip
    from tests.motion_truth import run

    clip = make_clip("cross", noise=False, faults=False, seconds=SHORT)
    ids, files, export = run(clip, tmp_path, motion_people="2, 7")
    assert sorted({i for i in ids[0] + ids[1] if i is not None and i >= 0}) == [1, 2]
    assert sorted(p.name for p in files if p.suffix == ".bvh") == ["motion_2.bvh"]
    assert any("only the people asked for (2, 7) of 1, 2; no person 7" in note for note in export.notes), export.notes
    assert any(note.startswith("3D motion: id 2: motion_2.bvh") for note in export.notes), export.notes
    assert chosen_people(" ") is None and chosen_people("3 1,2") == {1, 2, 3}
    with pytest.raises(ValueError, match="track ids"):
        chosen_people("Alice")


def test_the_table_names_the_targets_a_run_misses():
    from benchmarks.bench_motion_truth import missed

    sound = {"mpjpe_mm": 11.0, "mpjpe_noise_mm": 10.0, "mpjpe_clean_mm": 1.5, "heavy_mm": 14.0, "swap_error_mm": 30.0,
             "baseline_error_mm": 20.0, "body_jumps_90": 0, "finger_jumps_90": 2, "finger_steps": 2840,
             "finger_jumps_clean": 0, "body_jumps_clean": 0, "euler_flips_clean": 0, "euler_flips": 0,
             "id_switches": 0, "height_error": 0.005, "bone_error_pct": 4.0, "foot_slide_mm": 9.0}
    assert missed("walk", sound) == []
    assert missed("run", {**sound, "mpjpe_noise_mm": 10.4, "swap_error_mm": 41.0}) == ["noise", "swap"]
    assert missed("walk", {**sound, "heavy_mm": 15.5, "bone_error_pct": 5.5, "foot_slide_mm": 11}) == [
        "heavy", "bones", "foot slide"]
    assert missed("walk", {**sound, "body_jumps_90": 1}) == ["body jumps"]
    assert missed("cross", {**sound, "body_jumps_90": 1}) == []  # under faults: a target on the tuned solo clips
    assert missed("cross", {**sound, "euler_flips_clean": 1}) == ["Euler flips"]


def test_a_standing_person_s_feet_hold_under_the_heavy_error_model():
    # the arms clip stands still on both feet for 3 s while each keypoint's depth drifts (the heavy model): the fit
    # holds a foot planted over half a second in one place; measured 4.4 mm of slide (target 10; 31.4 when a
    # planted foot's speed was only penalised frame by frame, where noise alone looks like a step), bones 2.5 %
    m = _measure("arms", faults=False, heavy=True, seconds=None)
    _sound(m)
    assert m["foot_slide_mm"] <= 10.0 and m["bone_error_pct"] <= BONE_PCT, m


def test_a_walk_seen_from_a_tilted_camera_stands_on_the_floor():
    # the curve clip (its feet stand still while planted) from a camera 1.8 m up, tilted 15 degrees down and rolled
    # 4, under noise: measured gravity 0.21 degrees off, the floor 8.9 mm, W-MPJPE 12.1 mm (the camera frame's 12.2),
    # no toe below the floor by 2 cm on 97 % of the frames; before the world frame the files held the camera's tilt
    m = _measure("curve", faults=False, seconds=None, camera=(1.8, 15.0, 4.0))
    _sound(m)
    assert m["world_found"] == 1 and m["gravity_error_deg"] <= 2.0 and m["floor_error_mm"] <= 30, m
    assert m["w_mpjpe_mm"] <= m["mpjpe_mm"] + 15 and m["below_floor_pct"] <= 1, m
    # the fit on the floor (clip_fit.fit_on_floor) holds each planted foot: before it the walk's feet slid 49.7 mm
    # along the floor and a toe dipped 2 cm under it on 2.8 % of the frames; then 22.0 mm, all of it the stance the
    # clip's first frame cuts (the fit lifted that foot a frame early, its last still frame no contact); with such a
    # stance going on while its foot hugs the floor (World.contacts), measured 4.1 mm
    assert m["world_foot_slide_mm"] <= 10, m


def test_a_walk_up_a_step_stands_on_the_floor_most_contacts_agree_on():
    # the step clip: the curve walking up onto an 18 cm platform two thirds of the way along, under noise, from the
    # 1.8 m camera. Measured: gravity 0.15 degrees off, the floor 8.8 mm. Before, a ramp through both levels had
    # more contacts than either (62 of 83, 22 degrees off gravity), then failed the check that no foot passes
    # through it: no floor at all; and a foot planted on the step was no contact (slid 6 cm). The slide, 14.5 mm,
    # is the first stance's lift-off, its contact ending two frames early (grown while the foot is sunk under the
    # floor, as a landing is, 4.1 mm, but the curve under the heavy model 9.8 -> 11.1): a ceiling, the target 10
    m = _measure("step", faults=False, seconds=None, camera=(1.8, 15.0, 4.0))
    _sound(m)
    assert m["world_found"] == 1 and m["gravity_error_deg"] <= 2.0 and m["floor_error_mm"] <= 30, m
    assert m["w_mpjpe_mm"] <= m["mpjpe_mm"] + 15 and m["below_floor_pct"] <= 1, m
    assert m["world_foot_slide_mm"] <= 15, m


def test_a_walk_seen_by_a_panning_camera_stands_on_the_floor_in_the_world():
    # the curve clip from a camera panning 30 degrees to the right over it, its frames rendered (a textured panorama
    # through each frame's turn) and the turn read from them; the fit on the floor held in the world: measured under
    # noise + faults gravity 0.19 degrees off, the floor 13 mm, W-MPJPE 13.4 mm (the camera frame's 12.3), the
    # camera's turn 0.007 degrees off a frame and 0.08 over the clip; before, a turning camera's fit was not refitted
    # on the floor (measured: the feet slid 37.8 mm in the world), and the 2D smoother's lag left the focal 1 % short
    # (the pan's turn 0.3 degrees off at its end, W-MPJPE 8.5 mm on clean input instead of 2.6)
    m = _measure("curve", seconds=None, camera=(1.0, 0.0, 0.0, "pan"))
    _sound(m)
    assert m["world_found"] == 1 and m["gravity_error_deg"] <= 2.0 and m["floor_error_mm"] <= 30, m
    assert m["camera_step_deg"] <= 1.0 and m["camera_drift_deg"] <= 0.2, m
    assert m["w_mpjpe_mm"] <= m["mpjpe_mm"] + 30 and m["below_floor_pct"] <= 1, m
    # measured 18.2 mm: a landing next to a junk frame (57) that the fit puts a frame late (the clip's first stance,
    # once 19.0, is held now); a ceiling, the target 10
    assert m["world_foot_slide_mm"] <= 19, m


def test_a_clean_back_flip_turns_no_joint_over():
    # at the flip's top the hands swing 60 cm a frame: judged about their wrists too, their clean samples are no
    # longer taken for faults (before, 62 were replaced by the 5-frame median, and the palms started there turned
    # over: 4 body rotations over 90 degrees on clean input)
    m = _measure("flip", noise=False, faults=False, seconds=None)
    _sound(m)
    assert m["body_jumps_90"] == 0 and m["euler_flips"] == 0 and m["mpjpe_mm"] <= 1.0, m


@pytest.mark.parametrize("seed", [0, 3])
def test_a_back_flip_under_faults_turns_no_joint_over(seed):
    # a junk frame at the flip's top starts from the mean of the frames beside it: its faults' 5-frame median lay
    # tens of centimetres off the curve and junk near a guess was kept, and the palm, an arm or a foot started there
    # turned over (2 body rotations over 90 degrees with seed 0, 9 with seed 3); measured 14.7 and 13.9 mm
    m = _measure("flip", seed=seed, seconds=None)
    _sound(m)
    assert m["body_jumps_90"] == 0 and m["euler_flips"] == 0 and m["mpjpe_mm"] <= 15.5, m


def test_sliding_feet_give_no_floor_and_two_people_crossing_come_through_clean():
    # the harness's walks swing their legs about an evenly moving root, so their feet slide: on the crossing clip
    # their slow moments once gave a floor 20 cm above the true one (12 foot-frames, feet passing through it), and
    # the fit on that floor put every joint 14.7 mm off on clean input; measured 0.50 mm with no floor claimed
    m = _measure("cross", noise=False, faults=False, seconds=None)
    _sound(m)
    assert m["world_found"] == 0 and m["mpjpe_mm"] <= CLEAN_MM, m

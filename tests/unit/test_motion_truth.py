"""The motion-capture ground-truth harness's clips as tests (tests/motion_truth.py): each clip under noise and
faults through the video job's after-model path, the motion read back from the written BVH (and motion.glb,
which must agree with it), held under ceilings set from the measured after-figures (benchmarks/
bench_motion_truth.py prints them; docs/motion.md's table): the figures are deterministic (seeded),
so the margins only absorb floating-point differences between CPUs."""

import warnings

import numpy as np
import pytest

from tests.motion_truth import measure_run

# clip: (MPJPE mm, swap-frame limb error as a multiple of the clip's baseline, body jumps > 90 degrees); measured
# (seed 0): 9.4, 1.06; 9.4, 1.22; 6.3, 1.40; 10.6, 1.00; 9.4, 1.35; 11.2, 1.14 (seeds 0-4: docs/motion.md)
CEILINGS = {"walk": (10.5, 1.2, 0), "turn": (10.2, 1.35, 0), "arms": (7.2, 1.5, 0), "sit": (11.2, 1.15, 0),
            "cross": (10.2, 1.45, 0), "leave_return": (12.0, 1.25, 0)}


def _measure(name, guards=True, noise=True, faults=True, seed=0):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return measure_run(name, guards, noise, faults, seed)


@pytest.mark.parametrize("name", sorted(CEILINGS))
def test_clip_under_noise_and_faults_stays_under_its_ceilings(name):
    mpjpe, swap_ratio, body_jumps = CEILINGS[name]
    m = _measure(name)
    assert m["mpjpe_mm"] <= mpjpe, m
    assert m["swap_error_mm"] <= swap_ratio * m["baseline_error_mm"], m
    assert m["body_jumps_90"] <= body_jumps, m
    assert m["finger_jumps_90"] <= 0.01 * m["finger_steps"] and m["euler_flips"] == 0, m
    assert m["height_error"] <= 0.02 and m["id_switches"] == 0 and m["frames_lost"] == 0, m
    assert m["glb_vs_bvh_mm"] < 0.5, m  # motion.glb's animation puts every joint where the BVH does


# measured (seed 0): walk 1.7, sit 0.22, cross 1.8 (the far person's legs and arms hidden behind the near one:
# placed on their rays), leave_return 1.6 (limbs out of the frame: filled from the stride before or after)
@pytest.mark.parametrize("name, ceiling", [("walk", 2.0), ("sit", 1.0), ("cross", 2.0), ("leave_return", 2.0)])
def test_clean_input_comes_through_within_millimetres(name, ceiling):
    m = _measure(name, noise=False, faults=False)
    assert m["mpjpe_mm"] <= ceiling and m["finger_jumps_90"] == 0 and m["finger_steps"] > 0, m


# noise only, measured (seed 0): walk 9.4, cross 8.7, leave_return 11.1 (the target: 12 on every clip)
@pytest.mark.parametrize("name, ceiling", [("walk", 10.2), ("cross", 9.5), ("leave_return", 11.8)])
def test_noise_alone_stays_under_its_ceiling(name, ceiling):
    m = _measure(name, faults=False)
    assert m["mpjpe_mm"] <= ceiling and m["body_jumps_90"] == 0, m


def test_a_junk_frame_first_back_after_an_absence_is_not_taken_for_the_person():
    # seed 2: the first frame after the person comes back holds 40 % junk keypoints, with no frame before it to
    # show them for faults (16.1 mm before the edge check; 10.8 with it)
    m = _measure("leave_return", seed=2)
    assert m["mpjpe_mm"] <= 11.5 and m["body_jumps_90"] == 0 and m["id_switches"] == 0, m


def test_the_path_before_the_guards_is_still_measured_and_much_worse():
    before, after = _measure("walk", guards=False), _measure("walk")
    assert before["mpjpe_mm"] > 3 * after["mpjpe_mm"] and before["body_jumps_90"] > 10, (before, after)


def test_rotation_orders_round_trip_and_stay_continuous():
    from sapiens2_demo.export.bvh import ORDERS, continuous_euler, euler, rotation_order
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
    order = rotation_order(twist)
    assert order != "ZXY"
    assert np.abs(np.diff(continuous_euler(twist, order), axis=0)).max() < np.radians(10)


def test_motion_files_for_the_people_asked_for_and_a_note_per_id(tmp_path):
    from sapiens2_demo.export.mocap_video import chosen_people
    from tests.motion_clips import make_clip
    from tests.motion_truth import run

    clip = make_clip("cross", noise=False, faults=False)
    ids, files, export = run(clip, tmp_path, motion_people="2, 7")
    assert sorted({i for i in ids[0] + ids[1] if i is not None and i >= 0}) == [1, 2]
    assert sorted(p.name for p in files if p.suffix == ".bvh") == ["motion_2.bvh"]
    assert any("only the people asked for (2, 7) of 1, 2; no person 7" in note for note in export.notes), export.notes
    assert any(note.startswith("3D motion: id 2: motion_2.bvh") for note in export.notes), export.notes
    assert chosen_people(" ") is None and chosen_people("3 1,2") == {1, 2, 3}
    with pytest.raises(ValueError, match="track ids"):
        chosen_people("Alice")


def test_the_seed_table_names_the_targets_a_run_misses():
    from benchmarks.bench_motion_truth import missed

    sound = {"mpjpe_mm": 11.0, "mpjpe_noise_mm": 10.0, "mpjpe_clean_mm": 1.5, "swap_error_mm": 30.0,
             "baseline_error_mm": 20.0, "body_jumps_90": 0, "finger_jumps_90": 2, "finger_steps": 2840,
             "finger_jumps_clean": 0, "euler_flips": 0, "id_switches": 0, "height_error": 0.005}
    assert missed("walk", sound) == []
    assert missed("leave_return", {**sound, "mpjpe_noise_mm": 12.4, "swap_error_mm": 41.0}) == ["noise", "swap"]
    assert missed("walk", {**sound, "body_jumps_90": 1}) == ["body jumps"]
    assert missed("cross", {**sound, "body_jumps_90": 1}) == []  # the target names walk, turn, arms and sit

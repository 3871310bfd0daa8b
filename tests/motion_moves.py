"""The harness's fast clips (tests/motion_clips.py builds and observes them): motion the fit was not tuned on.

Each function takes the frame times (s) and returns the joint angles of one person (tests/motion_clips.body):
- run: running towards the camera at 3.5 m/s, from 10 m to 3 m (the feet leave the frame at the end);
- jump: a counter-movement jump with an arm swing, hands overhead at the top (they leave the frame);
- spin: a full turn in 1.2 s on one leg, arms out (up to 450 degrees/s);
- dance: side steps with a bounce, arms waving above the head, hips and shoulders twisting;
- sprint: across the frame at 5 m/s, side on (a stance of 4-5 frames at 24 frames/s);
- kick: two front kicks with the right leg, the foot rising to the hips in 0.25 s;
- punch: four straight punches, left and right in turn, the fist out in 0.12 s with the trunk's twist;
- flip: a standing back flip, tucked, the body upside down halfway through its 0.6 s of flight.
"""

from __future__ import annotations

import numpy as np


def _ramp(t, start, end):
    u = np.clip((t - start) / (end - start), 0, 1)
    return u * u * (3 - 2 * u)


def run(t, standing) -> dict:
    p = standing(t, [0.3, 0.95, -10.0])
    phase = 2 * np.pi * 1.4 * t
    p["root"] = p["root"] + t[:, None] * [0.0, 0.0, 3.5]
    p["root"][:, 1] += 0.05 * np.sin(2 * phase)
    p["lean"] = p["lean"] + 0.12
    p["twist"] = -0.2 * np.sin(phase)
    for sign, s in ((1, "left"), (-1, "right")):
        p[f"{s}_hip_flex"] = 0.25 + 0.6 * sign * np.sin(phase)
        p[f"{s}_knee"] = 0.9 + 0.65 * np.sin(phase + sign * np.pi / 2 + 1.0)
        p[f"{s}_flex"] = -0.7 * sign * np.sin(phase)
        p[f"{s}_elbow"] = 1.4 + 0.2 * sign * np.sin(phase)
    return p


def jump(t, standing) -> dict:
    p = standing(t, [0.0, 0.95, -4.5])
    crouch = _ramp(t, 0.3, 0.8) - _ramp(t, 0.8, 1.05) + _ramp(t, 1.55, 1.75) - _ramp(t, 1.9, 2.4)
    swing = _ramp(t, 0.8, 1.15) - _ramp(t, 1.45, 1.9)  # arms from behind to overhead and down
    flight = np.clip((t - 1.05) / 0.5, 0, 1)
    p["root"] = p["root"] + np.stack([0 * t, -0.35 * crouch + 1.8 * flight * (1 - flight), 0 * t], 1)
    p["lean"] = 0.05 + 0.6 * crouch
    for s in ("left", "right"):
        p[f"{s}_hip_flex"] = 1.3 * crouch
        p[f"{s}_knee"] = 0.05 + 1.7 * crouch + 0.3 * flight * (1 - flight)
        p[f"{s}_flex"] = -0.8 * _ramp(t, 0.3, 0.8) * (1 - swing) + 3.0 * swing
        p[f"{s}_elbow"] = 0.3 - 0.2 * swing
    return p


def spin(t, standing) -> dict:
    p = standing(t, [0.0, 0.95, -4.5])
    p["yaw"] = 2 * np.pi * _ramp(t, 0.4, 1.6)
    out = _ramp(t, 0.1, 0.4) - _ramp(t, 1.6, 1.9)
    for s in ("left", "right"):
        p[f"{s}_abduct"] = 0.15 + 1.3 * out
        p[f"{s}_elbow"] = 0.3 + 0.3 * out
    p["right_hip_flex"] = 0.6 * out
    p["right_knee"] = 0.05 + 1.4 * out
    return p


def dance(t, standing) -> dict:
    p = standing(t, [0.0, 0.95, -4.5])
    beat = 2 * np.pi * 1.0 * t
    p["root"] = p["root"] + np.stack([0.35 * np.sin(beat / 2), 0.04 * np.cos(2 * beat) - 0.04, 0 * t], 1)
    p["yaw"] = 0.4 * np.sin(beat / 2)
    p["twist"] = 0.35 * np.sin(beat)
    p["lean"] = 0.05 + 0.1 * np.sin(beat)
    p["nod"] = 0.2 * np.sin(2 * beat)
    up = _ramp(t, 0.2, 0.7)
    for sign, s in ((1, "left"), (-1, "right")):
        p[f"{s}_abduct"] = 0.15 + up * (2.5 + 0.35 * np.sin(2 * beat + sign))
        p[f"{s}_flex"] = 0.3 * up * np.sin(beat + sign)
        p[f"{s}_elbow"] = 0.3 + 0.5 * up * (1 + np.sin(2 * beat - sign))
        p[f"{s}_pronate"] = 0.8 * np.sin(beat)
        step = np.maximum(0, sign * np.sin(beat / 2 + 0.5))
        p[f"{s}_hip_flex"] = 0.6 * step
        p[f"{s}_knee"] = 0.1 + 1.0 * step
    return p


def sprint(t, standing) -> dict:
    p = standing(t, [-3.2, 0.95, -6.5])
    phase = 2 * np.pi * 1.7 * t
    p["root"] = p["root"] + t[:, None] * [5.0, 0.0, 0.0]
    p["root"][:, 1] += 0.05 * np.sin(2 * phase)
    p["yaw"] = p["yaw"] + np.pi / 2
    p["lean"] = p["lean"] + 0.2
    p["twist"] = -0.25 * np.sin(phase)
    for sign, s in ((1, "left"), (-1, "right")):
        p[f"{s}_hip_flex"] = 0.35 + 0.8 * sign * np.sin(phase)
        p[f"{s}_knee"] = 1.1 + 0.9 * np.sin(phase + sign * np.pi / 2 + 1.0)
        p[f"{s}_flex"] = -0.9 * sign * np.sin(phase)
        p[f"{s}_elbow"] = 1.5 + 0.2 * sign * np.sin(phase)
    return p


def kick(t, standing) -> dict:
    p = standing(t, [0.0, 0.95, -4.5])
    lift = sum(_ramp(t, a, a + 0.25) - _ramp(t, a + 0.35, a + 0.7) for a in (0.4, 1.3))
    snap = sum(_ramp(t, a + 0.15, a + 0.3) - _ramp(t, a + 0.35, a + 0.5) for a in (0.4, 1.3))
    p["right_hip_flex"] = 1.5 * lift
    p["right_knee"] = 0.05 + 1.6 * lift - 1.4 * snap
    p["lean"] = 0.05 - 0.25 * lift
    for s in ("left", "right"):
        p[f"{s}_flex"] = 0.4 * lift
        p[f"{s}_elbow"] = 0.3 + 1.0 * lift
    return p


def punch(t, standing) -> dict:
    p = standing(t, [0.0, 0.95, -4.5])
    guard = _ramp(t, 0.1, 0.4)
    for s in ("left", "right"):
        p[f"{s}_flex"] = 1.2 * guard
        p[f"{s}_elbow"] = 0.3 + 1.9 * guard
    for k, start in enumerate((0.6, 0.95, 1.3, 1.65)):
        s, sign = ("left", 1) if k % 2 == 0 else ("right", -1)
        out = _ramp(t, start, start + 0.12) - _ramp(t, start + 0.15, start + 0.35)
        p[f"{s}_flex"] = p[f"{s}_flex"] + 0.35 * out
        p[f"{s}_elbow"] = p[f"{s}_elbow"] - 2.0 * out
        p["twist"] = p["twist"] - sign * 0.45 * out
    return p


def flip(t, standing) -> dict:
    p = standing(t, [0.0, 0.95, -4.5])
    crouch = _ramp(t, 0.2, 0.6) - _ramp(t, 0.6, 0.8) + _ramp(t, 1.35, 1.5) - _ramp(t, 1.6, 2.0)
    flight = np.clip((t - 0.8) / 0.6, 0, 1)
    p["root"] = p["root"] + np.stack([0 * t, -0.3 * crouch + 2.4 * flight * (1 - flight), 0 * t], 1)
    p["pitch"] = -2 * np.pi * _ramp(t, 0.8, 1.4)  # backwards: the whole body about its hips
    tuck = np.sin(np.pi * flight) ** 2
    p["lean"] = 0.05 + 0.5 * crouch + 0.4 * tuck
    for s in ("left", "right"):
        p[f"{s}_hip_flex"] = 1.1 * crouch + 1.7 * tuck
        p[f"{s}_knee"] = 0.05 + 1.4 * crouch + 1.9 * tuck
        p[f"{s}_flex"] = -0.7 * _ramp(t, 0.2, 0.6) * (1 - flight) + 2.8 * _ramp(t, 0.6, 0.85) * (1 - tuck)
        p[f"{s}_elbow"] = 0.3 + 1.2 * tuck
    return p


# (angles, seconds); sprint and punch were looked at while the fit was tuned, kick and flip held out
MOVES = {"run": (run, 2.0), "jump": (jump, 2.5), "spin": (spin, 2.0), "dance": (dance, 3.0), "sprint": (sprint, 1.25),
         "kick": (kick, 2.2), "punch": (punch, 2.1), "flip": (flip, 2.2)}

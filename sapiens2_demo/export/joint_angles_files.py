"""A person's joint angles as files, for users without the Rerun viewer: `joint_angles_<id>.csv` (time in seconds,
one column per series of pose/joint_angles.py, empty where unknown) and `joint_angles_<id>.png` (one panel per
joint group, left and right in one panel, the root's speed in the last)."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import numpy as np

from ..pose.joint_angles import GROUPS, SIDES
from ..util import partial_path


def write_angles_csv(angles: dict[str, np.ndarray], times: np.ndarray, path: Path) -> Path:
    tmp = partial_path(path)
    with open(tmp, "w", newline="", encoding="utf-8") as file:
        out = csv.writer(file)
        out.writerow(["time_s", *angles])
        for row, time in enumerate(times):
            values = (angles[name][row] for name in angles)
            out.writerow([f"{time:.4f}", *("" if not np.isfinite(v) else f"{v:.2f}" for v in values)])
    os.replace(tmp, path)
    return path


def read_angles_csv(path: Path) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """(times, {name: values}) with NaN where the file is empty: the CSV's own reader, for tests and scripts."""
    with open(path, newline="", encoding="utf-8") as file:
        rows = list(csv.reader(file))
    columns = list(zip(*rows[1:])) if len(rows) > 1 else [()] * len(rows[0])
    values = [np.array([float(v) if v else np.nan for v in column]) for column in columns]
    return values[0], dict(zip(rows[0][1:], values[1:]))


def write_angles_plot(angles: dict[str, np.ndarray], times: np.ndarray, path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")  # no display on a server; a figure object of its own, so threads do not share one
    from matplotlib.figure import Figure

    panels = [(label, [f"{side}_{joint}_deg" for side in SIDES] if joint != "trunk" else ["trunk_lean_deg"], "deg")
              for joint, label in GROUPS.items()] + [("Root speed", ["root_speed_mps"], "m/s")]
    figure = Figure(figsize=(8, 1.7 * len(panels)), layout="constrained")
    axes = figure.subplots(len(panels), 1, sharex=True)
    for ax, (label, names, unit) in zip(axes, panels):
        for name in names:
            ax.plot(times, angles[name], label=name.split("_")[0] if len(names) > 1 else None)
        ax.set_ylabel(f"{label}\n({unit})", fontsize=8)
        ax.grid(alpha=0.3)
        if len(names) > 1:
            ax.legend(fontsize=7, loc="upper right")
    axes[-1].set_xlabel("time (s)")
    figure.suptitle(title, fontsize=10)
    tmp = partial_path(path)
    figure.savefig(tmp, format="png", dpi=80)
    os.replace(tmp, path)
    return path

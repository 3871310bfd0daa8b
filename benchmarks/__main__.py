"""The benchmarks' one entry point.

    python -m benchmarks list                 # every benchmark, what it measures, its quick arguments
    python -m benchmarks NAME [ARGS...]       # one benchmark; ARGS are its own (python -m benchmarks NAME --help)
    python -m benchmarks quick                # the quick set on tiny checkpoints and stand-ins, then tables (make bench)
    python -m benchmarks tables [--check]     # the docs' figures tables rewritten from benchmarks/results/

Each run prints its figures and writes benchmarks/results/<name>-<machine>.json (harness.Run): the command, the
commit, the machine, the load before and after, the versions, the figures, the tables the docs show and what it
printed. A benchmark is a function `(argv, run)` that parses its own arguments and fills `run`.
"""

from __future__ import annotations

import importlib
import inspect
import io
import os
import shlex
import sys

from benchmarks import harness

for name, value in harness.OFFLINE.items():  # before anything imports the hub, ultralytics or gradio
    os.environ.setdefault(name, value)

# name: ("module:function", what it measures, the quick set's arguments, or None when not in it)
BENCHMARKS: dict[str, tuple[str, str, list[str] | None]] = {
    "host": ("image:host", "an image request's and a 720p video's host work around the forwards, in this process and "
             "through gradio", ["--kinds", "standins", "--reps", "3", "--frames", "24", "--video-reps", "1"]),
    "gpu": ("image:gpu", "forwards at batch 1 and 8, image requests against their forwards (--device cuda)", None),
    "cpu": ("image:cpu", "the CPU's roads at full size: float32 eager against bf16 compiled (many minutes)", None),
    "video": ("video:video", "video frames/s: ours, the I/O floor, the model alone",
              ["--frames", "16", "--tasks", "seg", "--no-model-only"]),
    "mocap": ("mocap:mocap", "pose, depth and 3D motion frames/s on a clip; steady depth's flicker", None),
    "rerun": ("mocap:rerun", "the Rerun recording's share of a 720p pose + 3D motion job, and its size", None),
    "ledger": ("device:ledger", "copies, waits and operations a GPU would see, counted on the CPU", ["--only", "image"]),
    "pose": ("device:pose", "DARK-UDP decode on the host and device roads", ["--people", "1", "--frames", "2"]),
    "session": ("device:session", "a lent GPU's measurements in one call (--dry-run: here, tiny)", None),
    "fullsize": ("checkpoints:fullsize", "writes full-size random-weight checkpoints (cpu, gpu, video --fullsize)", None),
    "standins": ("checkpoints:structure", "the stand-ins' structure against random weights (--build: one build)", []),
    "batch": ("batch:batch", "the batch CLI: local engine against one image at a time, Ray 2 workers against 1", None),
    "compile": ("batch:compiled_launches", "the batch CLI with --compile off, then on cold and warm", None),
    "burst": ("first:burst", "cold launches x concurrent first requests, then 64 at once", None),
    "first-answer": ("first:first_answer", "the app's first answers per launch kind; the CLI on 1 and 20 photos", None),
    "motion": ("bench_motion_truth:main", "motion capture against synthetic ground truth", None),
    "camera": ("mocap:camera", "the camera's rotation from the background on rendered frames: error a frame, "
               "drift, a still camera's total, ms a frame at 720p", None),
}


class Tee(io.TextIOBase):
    """What a benchmark prints, shown as it goes and kept for its results file."""

    def __init__(self, stream):
        self.stream, self.kept = stream, io.StringIO()

    def write(self, text: str) -> int:
        self.stream.write(text)
        self.stream.flush()
        return self.kept.write(text)


def run(name: str, args: list[str]) -> int:
    """One benchmark: `(argv, run)` fills the run; a script's `main(argv)` returns its figures (motion's). --help
    leaves through argparse's SystemExit, before the results file is written."""
    module_name, function_name = BENCHMARKS[name][0].split(":")
    function = getattr(importlib.import_module(f"benchmarks.{module_name}"), function_name)
    command = f"python -m benchmarks {name} {shlex.join(args)}".strip()
    with harness.Run(name, command, device="cuda" if "cuda" in " ".join(args) else "cpu") as record:
        stdout = sys.stdout
        sys.stdout = tee = Tee(stdout)
        try:
            if len(inspect.signature(function).parameters) == 2:
                function(args, record)
            else:
                record.figures = function(args) or {}
        finally:
            sys.stdout = stdout
            record.output = tee.kept.getvalue()[-20000:]
    return 0


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(__doc__)
        for name, (where, what, quick) in BENCHMARKS.items():
            quick_text = "" if quick is None else f"  [quick: {' '.join(quick) or 'as is'}]"
            print(f"  {name:10} {what} (benchmarks/{where.split(':')[0]}.py){quick_text}")
        return 0
    name, args = argv[0], argv[1:]
    if name == "tables":
        pages = sorted((harness.ROOT / "docs").glob("*.md")) + [harness.ROOT / "README.md"]
        stale = harness.write_tables(pages, check="--check" in args)
        for page in stale:
            print(f"{'differs' if '--check' in args else 'rewrote'}: {page.relative_to(harness.ROOT)}")
        return 1 if stale and "--check" in args else 0
    if name == "quick":
        for each, (_, _, quick) in BENCHMARKS.items():
            if quick is not None:
                print(f"== python -m benchmarks {each} {shlex.join(quick)}", flush=True)
                run(each, quick)
        return main(["tables"])
    if name not in BENCHMARKS:
        print(f"no benchmark named {name!r}: python -m benchmarks list names them", file=sys.stderr)
        return 2
    return run(name, args)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

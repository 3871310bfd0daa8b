"""The benchmarks' one entry point.

    python -m benchmarks list                 # every benchmark, what it measures, its quick arguments
    python -m benchmarks NAME [ARGS...]       # one benchmark; ARGS are its own (python -m benchmarks NAME --help)
    python -m benchmarks quick                # the quick set on tiny checkpoints and stand-ins (make bench)
    python -m benchmarks tables [--check]     # the docs' figures tables rewritten from benchmarks/results/

Each run prints its figures and writes benchmarks/results/<name>-<machine>.json (harness.Run): the command, the
commit, the machine, the load before and after, the versions, what it printed and, for the benchmarks that give
JSON, the figures themselves.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import harness

HERE = Path(__file__).resolve().parent

# name: (script, what it measures, quick arguments or None when not in the quick set, how it takes a JSON path)
BENCHMARKS: dict[str, tuple[str, str, list[str] | None, str | None]] = {
    "host": ("bench_host.py", "an image request's and a 720p video's host work around the forwards, in this process "
             "and through gradio beyond its echo floor", ["--kinds", "standins", "--reps", "3", "--frames", "24",
                                                           "--video-reps", "1"], "stdout"),
    "endpoints": ("bench_endpoints.py", "each image endpoint at 1080p through gradio_client beyond gradio's floor",
                  None, None),
    "app": ("bench_app.py", "the app's start and each tab on tiny checkpoints", None, None),
    "video": ("bench_video.py", "video frames/s: ours, the I/O floor, a plain loop, the model alone (--breakdown, "
              "--fullsize, --device cuda)", ["--frames", "16", "--tasks", "seg,pose"], None),
    "encoder": ("bench_encoder.py", "x264 settings on each task's rendered 720p frames: CPU ms, size, PSNR", None, None),
    "mocap": ("bench_mocap.py", "pose, depth and 3D motion frames/s on a clip; steady depth's flicker", None, None),
    "cpu": ("bench_cpu.py", "the CPU's roads at full size: float32 eager against bf16 compiled (many minutes)", None,
            "--json"),
    "fullsize": ("fullsize.py", "writes full-size random-weight checkpoints (for cpu, gpu, video --fullsize)", None,
                 None),
    "compile": ("bench_compile.py", "the batch CLI with --compile off, then on cold and warm", None, None),
    "gpu": ("bench_gpu.py", "forwards at batch 1 and 8, image requests against their forwards (--device cuda)", None,
            None),
    "pose": ("bench_pose.py", "DARK-UDP decode on the host and device roads, bytes off the device per person",
             ["--people", "1", "--frames", "2"], None),
    "post": ("bench_post.py", "dense and pose post-processing, numpy against torch (the device road)", None, None),
    "dense": ("bench_dense.py", "dense post-processing at 1080p, ours against transformers'", None, None),
    "draw": ("bench_draw.py", "video pictures drawn on the host against on the device", None, None),
    "detector": ("bench_detector.py", "the person detector's CPU roads: torch and onnxruntime", None, None),
    "ledger": ("bench_ledger.py", "copies, waits and operations a GPU would see, counted on the CPU",
               ["--only", "image"], "--json"),
    "standins": ("bench_standins.py", "the stand-ins' structure against random weights (--build: one build's time)",
                 [], None),
    "batch": ("bench_batch.py", "the batch CLI: local engine against one image at a time, Ray 2 workers against 1",
              None, None),
    "burst": ("bench_first_burst.py", "cold launches x concurrent first requests (bf16, float32), then 64 at once: "
              "server errors, queue-full refusals, every endpoint after", None, "--json"),
    "first-answer": ("bench_first_answer.py", "the app's first three answers per launch kind (empty compile "
                     "cache, warm, compile off) and after the background compile's swap; the CLI on 1 and 20 photos",
                     None, "--json"),
    "motion": ("bench_motion_truth.py", "motion capture against synthetic ground truth", None, "--json"),
}


def run(name: str, args: list[str]) -> int:
    script, _, _, json_flag = BENCHMARKS[name]
    command = f"python -m benchmarks {name} {shlex.join(args)}".strip()
    env = {**os.environ, **harness.OFFLINE, "PYTHONPATH": os.pathsep.join(filter(None, [str(harness.ROOT),
                                                                                       os.environ.get("PYTHONPATH")]))}
    with tempfile.TemporaryDirectory() as scratch:
        extra = []
        if json_flag == "--json" and "--json" not in args:
            extra = ["--json", str(Path(scratch) / "figures.json")]
        if json_flag == "stdout" and "--json" not in args:
            extra = ["--json"]
        weights = "stand-ins" if "standins" in " ".join(args) else "tiny random weights or stand-ins, as the command says"
        with harness.Run(name, command, device="cuda" if "cuda" in args else "cpu", weights=weights) as record:
            process = subprocess.Popen([sys.executable, str(HERE / script), *args, *extra], cwd=harness.ROOT,
                                       env=env, stdout=subprocess.PIPE, text=True)
            lines = []
            for line in process.stdout:
                print(line, end="", flush=True)
                lines.append(line)
            code = process.wait()
            if code:
                raise SystemExit(f"{name}: exited with {code}; no results file written")
            printed = "".join(lines)
            record.output = printed[-20000:]
            figures_file = Path(scratch) / "figures.json"
            if figures_file.exists():
                record.figures = json.loads(figures_file.read_text())
            elif json_flag == "stdout":
                record.figures = last_json(printed)
    return 0


def last_json(printed: str) -> dict:
    """The last line of what a benchmark printed that is one JSON object (its figures), else none."""
    for line in reversed(printed.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                continue
    return {}


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(__doc__)
        for name, (script, what, quick, _) in BENCHMARKS.items():
            quick_text = "" if quick is None else f"  [quick: {' '.join(quick) or 'as is'}]"
            print(f"  {name:10} {what} (benchmarks/{script}){quick_text}")
        return 0
    name, args = argv[0], argv[1:]
    if name == "tables":
        pages = sorted((harness.ROOT / "docs").glob("*.md")) + [harness.ROOT / "README.md"]
        stale = harness.write_tables(pages, check="--check" in args)
        for page in stale:
            print(f"{'differs' if '--check' in args else 'rewrote'}: {page.relative_to(harness.ROOT)}")
        return 1 if stale and "--check" in args else 0
    if name == "quick":
        for each, (_, _, quick, _) in BENCHMARKS.items():
            if quick is not None:
                print(f"== {each}", flush=True)
                run(each, quick)
        return 0
    if name not in BENCHMARKS:
        print(f"no benchmark named {name!r}: python -m benchmarks list names them", file=sys.stderr)
        return 2
    return run(name, args)


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

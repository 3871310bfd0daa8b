"""What every benchmark shares: the machine, the load, timing, options, inputs and the results file whose tables
`python -m benchmarks tables` writes into the docs' marked blocks (docs/benchmarks.md)."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
LIBRARIES = ("torch", "transformers", "gradio", "numpy", "opencv-python-headless", "av", "ultralytics", "onnxruntime")
OFFLINE = {"HF_HUB_OFFLINE": "1", "YOLO_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
           "TRANSFORMERS_VERBOSITY": "error"}
TINY = Path(os.environ.get("SAPIENS2_TINY_DIR", "/tmp/sapiens2-tiny"))  # random-weight tiny checkpoints


def cpu() -> dict:
    """The CPU as the app's road sees it (models/device.py: torch's capabilities): its name, native bf16."""
    from sapiens2_demo.models.device import cpu_capabilities, cpu_name

    caps = cpu_capabilities()
    return {"cpu": cpu_name(caps), "avx512_bf16": bool(caps.get("avx512_bf16")), "amx": bool(caps.get("amx_tile"))}


def gpu_model() -> str | None:
    try:
        import torch

        return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    except Exception:  # no torch, or a driver that cannot answer: a CPU machine
        return None


def slug(text: str) -> str:
    text = re.sub(r"\((r|tm)\)|\b(processor|cpu|\d+-core)\b|@.*", "", text.lower())
    return "-".join(re.findall(r"[a-z0-9]+", text)[:3])


def machine(device: str = "cpu") -> dict:
    """The machine a figure was measured on; `name` is the results file's suffix (amd-epyc-2c, nvidia-h200)."""
    cores, gpu, found = os.cpu_count() or 1, gpu_model() if device.startswith("cuda") else None, cpu()
    return {"name": slug(gpu) if gpu else f"{slug(found['cpu'])}-{cores}c", **found, "cores": cores, "gpu": gpu}


def load() -> list[float]:
    """The 1, 5 and 15 minute load averages (the machine is shared: every figure says what else ran)."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def commit() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return head + ("+changes" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def versions() -> dict[str, str]:
    found = {"python": platform.python_version()}
    for name in LIBRARIES:
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found


def sync(device) -> None:
    """Wait for the device's queued work (CUDA's; nothing on a CPU), so a timer reads the work, not its queueing."""
    if str(device).startswith("cuda"):
        import torch

        torch.cuda.synchronize()


def timings(call: Callable[[], object], repeat: int, device="cpu", warmup: int = 0) -> list[float]:
    """Seconds of each of `repeat` calls after `warmup` untimed ones, the device's queue waited for around each."""
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeat):
        sync(device)
        started = time.perf_counter()
        call()
        sync(device)
        times.append(time.perf_counter() - started)
    return times


def parser(run: Run, doc: str | None) -> argparse.ArgumentParser:
    """A benchmark's options, its docstring the help (`python -m benchmarks NAME --help`)."""
    return argparse.ArgumentParser(prog=f"python -m benchmarks {run.name}", description=doc,
                                   formatter_class=argparse.RawDescriptionHelpFormatter)


def names(text: str) -> list[str]:
    """A comma-separated option as its items."""
    return [item.strip() for item in text.split(",") if item.strip()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Timers:
    """Seconds spent in wrapped functions and their calls (a generator's: its items), summed per label across
    threads (`with Timers() as t: t.wrap(...)`)."""

    def __init__(self):
        self.seconds: dict[str, float] = {}
        self.counts: dict[str, int] = {}
        self.lock, self.undo = threading.Lock(), []

    def add(self, label: str, started: float, calls: int = 1) -> None:
        with self.lock:
            self.seconds[label] = self.seconds.get(label, 0.0) + time.perf_counter() - started
            self.counts[label] = self.counts.get(label, 0) + calls

    def wrap(self, owner, name: str, label: str, generator: bool = False) -> None:
        """Time calls of owner.name; a generator function: the work per item, not the time between items."""
        original = getattr(owner, name)

        def timed(*args, **kwargs):
            started = time.perf_counter()
            try:
                return original(*args, **kwargs)
            finally:
                self.add(label, started)

        def timed_items(*args, **kwargs):
            items = original(*args, **kwargs)
            while True:
                started = time.perf_counter()
                try:
                    item = next(items)
                except StopIteration:
                    self.add(label, started, calls=0)
                    return
                self.add(label, started)
                yield item

        setattr(owner, name, timed_items if generator else timed)
        self.undo.append((owner, name, original))

    def total(self, *prefixes: str) -> float:
        return sum(v for label, v in self.seconds.items() if label.startswith(prefixes))

    def __enter__(self) -> Timers:
        return self

    def __exit__(self, *exc) -> None:
        for owner, name, original in reversed(self.undo):
            setattr(owner, name, original)
        self.undo.clear()


def profiled(call: Callable[[], object]):
    """pstats.Stats of one call under cProfile."""
    import cProfile
    import pstats

    profile = cProfile.Profile()
    profile.runcall(call)
    return pstats.Stats(profile)


def print_top(stats, title: str, count: int = 15) -> None:
    """cProfile's top `count` by own time, then our own functions by cumulative time."""
    import io

    for order, what, restrict in (("tottime", "own time", ()), ("cumulative", "cumulative time, ours",
                                                                ("sapiens2_demo",))):
        text = io.StringIO()
        stats.stream = text
        stats.sort_stats(order).print_stats(*restrict, count)
        print(f"\n-- cProfile, {title}, top {count} by {what}:")
        print("\n".join(line for line in text.getvalue().splitlines()[4:] if line.strip()), flush=True)


# --- what the benchmarks run on ------------------------------------------------------------------------------

def tiny_checkpoints(root: Path = TINY) -> Path:
    """Tiny random-weight checkpoints of every task and a random YOLOv8n in `root` (written once): every map noise.
    A folder that already holds checkpoints (fullsize's, a user's) only gains the random detector if it lacks one."""
    from sapiens2_demo.standins.tiny import write_all, write_tiny_detector

    if not any(root.glob("sapiens2-*")):
        write_all(root)
    if not (root / "yolov8n-random.pt").exists():
        write_tiny_detector(root / "yolov8n-random.pt")
    quiet_transformers()
    return root


def standin_checkpoints() -> Path:
    """The stand-ins (trained once, about two CPU minutes, then cached): outputs with structure."""
    from sapiens2_demo.standins.train import cached_standins

    quiet_transformers()
    return cached_standins(log=lambda message: print(message, file=sys.stderr))


def checkpoints(kind: str) -> Path:
    """`tiny` (random weights), `standins`, or a folder of checkpoints."""
    return {"tiny": tiny_checkpoints, "standins": standin_checkpoints}.get(kind, lambda: Path(kind))()


def manager(checkpoint_dir: Path, device: str = "cpu", dtype: str = "auto", detector: Path | None = None, **extra):
    """The app's model manager on `checkpoint_dir`, its detector the random YOLO written beside the checkpoints."""
    from sapiens2_demo.models.manager import ModelManager

    return ModelManager(checkpoint_dir=checkpoint_dir, device=device, dtype=dtype,
                        detector=str(detector or Path(checkpoint_dir) / "yolov8n-random.pt"), **extra)


def task_models(manager, task: str) -> list:
    """The models a request or a video of `task` runs, loaded (outside any timing): its own, the body parts where it
    removes the background; the detector too where it finds people (not returned). `all`: every task's."""
    from sapiens2_demo import tasks
    from sapiens2_demo.models.registry import checkpoint

    models = []
    for spec in tasks.specs(in_all=True) if task == "all" else [tasks.get(task)]:
        models.append(manager.get(checkpoint(spec.family, spec.default_size())))
        models += [manager.get(checkpoint("seg", "0.4b"))] if spec.uses_mask else []
        if spec.detector:
            manager.get_detector()
    return list({id(m): m for m in models}.values())


def quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


class Pictures:
    """The image requests' input: assets/astronaut.jpg at 1920x1080 (`path`); called, the picture to send: with
    `fresh`, a copy marked in a corner, never seen before, so no cache (the segmentation's, the upload's) answers it."""

    def __init__(self, work: Path, fresh: bool = False):
        import cv2

        self.work, self.fresh, self.made, self.path = work, fresh, 0, str(work / "astronaut_1080p.jpg")
        photo = cv2.resize(cv2.imread(str(ROOT / "assets" / "astronaut.jpg")), (1920, 1080), interpolation=cv2.INTER_CUBIC)
        cv2.imwrite(self.path, photo, [cv2.IMWRITE_JPEG_QUALITY, 95])

    def __call__(self) -> str:
        if not self.fresh:
            return self.path
        import cv2

        self.made += 1  # a corner block of a new colour: one pixel could vanish in the JPEG's rounding
        picture, i = cv2.imread(self.path), self.made
        picture[:32, :32] = (37 * i % 256, 255 - 11 * i % 256, i // 256 % 256)
        path = self.work / f"fresh_{self.made}.jpg"
        cv2.imwrite(str(path), picture, [cv2.IMWRITE_JPEG_QUALITY, 95])
        return str(path)


def encode(path: Path, frames: Iterable, fps: int = 24, pix_fmt: str = "yuv420p", **options) -> Path:
    """RGB frames as an H.264 MP4 (x264 `options`, e.g. preset=ultrafast, crf=18)."""
    import av

    with av.open(str(path), "w", format="mp4") as out:
        stream = None
        for i, rgb in enumerate(frames):
            if stream is None:
                stream = out.add_stream("libx264", rate=fps, options=options)
                (stream.height, stream.width), stream.pix_fmt = rgb.shape[:2], pix_fmt
            picture = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            picture.pts = i
            out.mux(stream.encode(picture))
        out.mux(stream.encode())
    return path


class Run:
    """One benchmark run (`with Run("image", command) as run: run.figures[...] = ...; run.table(...)`); on leaving,
    its results file is written with the machine, the load before and after and the versions."""

    def __init__(self, name: str, command: str, device: str = "cpu", weights: str = "", results: Path = RESULTS):
        self.name, self.command, self.device, self.weights, self.results = name, command, device, weights, results
        self.figures, self.tables, self.output = {}, {}, ""

    def __enter__(self) -> Run:
        self.load_before, self.start = load(), time.perf_counter()
        return self

    def table(self, key: str, columns: list[str], rows: list[list], caption: str = "") -> None:
        """A table the docs may show, printed as well."""
        rows = [[str(cell) for cell in row] for row in rows]
        self.tables[key] = {"columns": columns, "rows": rows, "caption": caption}
        print(f"\n{key}: {caption}\n" + "\n".join(" | ".join(row) for row in [columns, *rows]), flush=True)

    def record(self) -> dict:
        return {"benchmark": self.name, "command": self.command, "commit": commit(), "machine": machine(self.device),
                "load": {"before": self.load_before, "after": load()}, "versions": versions(), "weights": self.weights,
                "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                "seconds": round(time.perf_counter() - self.start, 1), "figures": self.figures, "tables": self.tables,
                "output": self.output}

    def path(self) -> Path:
        return self.results / f"{self.name}-{machine(self.device)['name']}.json"

    def __exit__(self, kind, error, trace) -> None:
        if kind is None:
            self.results.mkdir(parents=True, exist_ok=True)
            record, where = self.record(), self.path()
            record["tables"] = {**carried_tables(where, record["tables"]), **record["tables"]}
            where.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
            print(f"results: {where.relative_to(ROOT) if where.is_relative_to(ROOT) else where}")


def carried_tables(path: Path, made: dict) -> dict:
    """The tables of the file's earlier run that this run did not make (a partial run: `ledger --only image`), each
    stamped with the commit, load and command it was measured with, so the docs never lose a table or misdate it."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {key: {"commit": earlier.get("commit"), "load": load_spread(earlier), "command": earlier.get("command"),
                  "weights": earlier.get("weights"), "torch": earlier.get("versions", {}).get("torch"),
                  **{k: v for k, v in table.items() if v}}
            for key, table in earlier.get("tables", {}).items() if key not in made}


# --- the docs' figures tables ---------------------------------------------------------------------------------

BLOCK = re.compile(r"(<!-- results: (?P<file>[\w.-]+) (?P<key>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)


def load_spread(record: dict) -> str:
    """The load averages (1 minute) before and after the run, or the range a results file states."""
    if record["load"].get("range"):
        return record["load"]["range"]
    values = sorted({x for x in record["load"].get("before", [])[:1] + record["load"].get("after", [])[:1]})
    return "-".join(f"{x:g}" for x in values) if values else "not recorded"


def render_block(record: dict, key: str) -> str:
    """A results file's table as the docs show it: the table, then what it was measured on and how to rerun it (a
    table may name its own commit, load, weights or command where they differ from the file's)."""
    if key not in record.get("tables", {}):
        raise KeyError(f"benchmarks/results/{record['benchmark']}-{record['machine']['name']}.json has no table "
                       f"{key!r}: rerun the benchmark that makes it, or point the docs' block at another table")
    table = record["tables"][key]
    lines = ["| " + " | ".join(table["columns"]) + " |", "|" + "---|" * len(table["columns"])]
    lines += ["| " + " | ".join(row) + " |" for row in table["rows"]]
    where = record["machine"]
    what = f"{where['gpu']} ({where['cores']} CPU cores)" if where.get("gpu") else f"{where['cpu']}, {where['cores']} cores"
    loads = table.get("load") or load_spread(record)
    lines += ["", f"*{table['caption'] + ' ' if table.get('caption') else ''}{what}; load {loads}; commit "
              f"{table.get('commit') or record['commit']}; torch {table.get('torch') or record['versions'].get('torch', '?')}; "
              f"{table.get('weights') or record['weights'] or 'weights not said'}. "
              f"`{table.get('command') or record['command']}` "
              f"(`benchmarks/results/{record['benchmark']}-{where['name']}.json`).*"]
    return "\n".join(lines) + "\n"


def tables_in(text: str, results: Path = RESULTS) -> str:
    """`text` with every marked block rewritten from its results file."""
    def rewrite(match: re.Match) -> str:
        record = json.loads((results / match["file"]).read_text())
        return match.group(1) + render_block(record, match["key"]) + match.group(5)
    return BLOCK.sub(rewrite, text)


def write_tables(pages: list[Path], check: bool = False) -> list[Path]:
    """Rewrite each page's blocks; with `check`, only say which pages differ from their results files."""
    stale = []
    for page in pages:
        text = page.read_text()
        new = tables_in(text)
        if new != text:
            stale.append(page)
            if not check:
                page.write_text(new)
    return stale

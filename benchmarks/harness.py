"""What every benchmark shares: the machine's description, the load, timing, and its results file.

A run writes `benchmarks/results/<name>-<machine>.json` (the commit, the CPU or GPU, the cores, the load before and
after, the library versions, the figures, and the tables the docs show), so a figure in docs/ names where it came
from; `python -m benchmarks tables` writes those tables into the docs' marked blocks (`render_block`).
"""

from __future__ import annotations

import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
LIBRARIES = ("torch", "transformers", "gradio", "numpy", "opencv-python-headless", "av", "ultralytics", "onnxruntime")
OFFLINE = {"HF_HUB_OFFLINE": "1", "YOLO_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False",
           "TRANSFORMERS_VERBOSITY": "error"}
TINY = Path(os.environ.get("SAPIENS2_TINY_DIR", "/tmp/sapiens2-tiny"))  # random-weight tiny checkpoints


def cpu_model() -> str:
    """lscpu's model name (what /proc/cpuinfo names the CPU), else platform's."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def cpu_flags() -> dict[str, bool]:
    """The flags that choose the CPU road (models/device.py): native bf16 by AVX512-BF16 or AMX."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    flags = set(re.search(r"^flags\s*:(.*)$", text, re.M).group(1).split()) if "flags" in text else set()
    return {"avx512_bf16": "avx512_bf16" in flags, "amx": "amx_tile" in flags}


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
    cores = os.cpu_count() or 1
    gpu = gpu_model() if device.startswith("cuda") else None
    name = slug(gpu) if gpu else f"{slug(cpu_model())}-{cores}c"
    return {"name": name, "cpu": cpu_model(), "cores": cores, **cpu_flags(), "gpu": gpu}


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
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def timed(call: Callable[[], object], reps: int = 5, warmup: int = 1) -> dict[str, float]:
    """Wall and CPU (this process, all threads) seconds of `call`, median and best of `reps` after `warmup`."""
    for _ in range(warmup):
        call()
    walls, cpus = [], []
    for _ in range(reps):
        wall, cpu = time.perf_counter(), time.process_time()
        call()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return {"median_s": statistics.median(walls), "best_s": min(walls), "cpu_median_s": statistics.median(cpus)}


# --- what the benchmarks run on ------------------------------------------------------------------------------

def tiny_checkpoints(root: Path = TINY) -> Path:
    """Tiny random-weight checkpoints of every task and a random YOLOv8n in `root` (written once): every map noise.
    A folder that already holds checkpoints (`python -m benchmarks fullsize`'s, a user's) is kept as it is: it only
    gains the random detector if it has none."""
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


def quiet_transformers() -> None:
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()


def astronaut(path: Path, size: tuple[int, int] = (1920, 1080)) -> Path:
    """assets/astronaut.jpg resized to `size` (JPEG, quality 95): the image benchmarks' input."""
    import cv2

    photo = cv2.imread(str(ROOT / "assets" / "astronaut.jpg"))
    cv2.imwrite(str(path), cv2.resize(photo, size, interpolation=cv2.INTER_CUBIC), [cv2.IMWRITE_JPEG_QUALITY, 95])
    return path


class Run:
    """One benchmark run: `with Run("image", command) as run: run.figures[...] = ...; run.table(...)`.

    On leaving, the results file is written with the machine, the load before and after and the versions."""

    def __init__(self, name: str, command: str, device: str = "cpu", weights: str = "", results: Path = RESULTS):
        self.name, self.command, self.device, self.weights, self.results = name, command, device, weights, results
        self.figures: dict = {}
        self.tables: dict = {}
        self.output = ""

    def __enter__(self) -> Run:
        self.load_before, self.start = load(), time.perf_counter()
        return self

    def table(self, key: str, columns: list[str], rows: list[list], caption: str = "") -> None:
        self.tables[key] = {"columns": columns, "rows": [[str(cell) for cell in row] for row in rows], "caption": caption}

    def record(self) -> dict:
        return {
            "benchmark": self.name, "command": self.command, "commit": commit(), "machine": machine(self.device),
            "load": {"before": self.load_before, "after": load()}, "versions": versions(), "weights": self.weights,
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "seconds": round(time.perf_counter() - self.start, 1), "figures": self.figures, "tables": self.tables,
            "output": self.output,
        }

    def path(self) -> Path:
        return self.results / f"{self.name}-{machine(self.device)['name']}.json"

    def __exit__(self, kind, error, trace) -> None:
        if kind is None:
            self.results.mkdir(parents=True, exist_ok=True)
            record = self.record()
            record["tables"] = {**carried_tables(self.path(), record["tables"]), **record["tables"]}
            self.path().write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n")
            where = self.path()
            print(f"results: {where.relative_to(ROOT) if where.is_relative_to(ROOT) else where}")


def carried_tables(path: Path, made: dict) -> dict:
    """The tables of the file's earlier run that this run did not make (a partial run: `ledger --only image`), each
    stamped with the commit, load and command it was measured with, so the docs never lose a table or misdate it."""
    try:
        earlier = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    kept = {}
    for key, table in earlier.get("tables", {}).items():
        if key not in made:
            kept[key] = {"commit": earlier.get("commit"), "load": load_spread(earlier), "command": earlier.get("command"),
                         "weights": earlier.get("weights"), "torch": earlier.get("versions", {}).get("torch"),
                         **{k: v for k, v in table.items() if v}}
    return kept


# --- the docs' figures tables ---------------------------------------------------------------------------------

BLOCK = re.compile(r"(<!-- results: (?P<file>[\w.-]+) (?P<key>[\w-]+) -->\n)(?P<body>.*?)(<!-- /results -->)", re.S)


def load_spread(record: dict) -> str:
    """The load averages (1 minute) before and after the run, or the range a results file states."""
    if record["load"].get("range"):
        return record["load"]["range"]
    values = sorted({x for x in record["load"].get("before", [])[:1] + record["load"].get("after", [])[:1]})
    return "-".join(f"{x:g}" for x in values) if values else "not recorded"


def render_block(record: dict, key: str) -> str:
    """A results file's table as the docs show it: the table, then what it was measured on and how to rerun it.

    A table may name its own commit, load, weights or command where they differ from the file's."""
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

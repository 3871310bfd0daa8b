"""Is a forward launch-bound? Per task model and batch size: the host time to queue a forward (no sync), the
forward's time (synchronised), a loop of forwards queued back to back, and the same forward replayed from a CUDA
graph captured once (a script for a lent GPU, not a test).

    HF_HUB_OFFLINE=1 python benchmarks/launch_probe.py [--tasks seg,normal] [--batches 1,8] [--repeat 10]
        [--no-compile] [--busy-threads 0,2]

Full-size 0.4b random-weight checkpoints (benchmarks/fullsize.py), bf16, the app's regional compile unless
--no-compile. --busy-threads N runs N Python threads spinning beside the forwards (what the video path's decode,
drawing and writer threads do to the GIL the launching thread needs). The graph's output is checked against the
plain forward's (max abs difference).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))


def spin(stop: threading.Event) -> None:
    while not stop.is_set():
        sum(range(200))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tasks", default="seg,normal")
    parser.add_argument("--batches", default="1,8")
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--busy-threads", default="0", help="comma-separated: each count in turn")
    args = parser.parse_args()
    os.environ.setdefault("SAPIENS2_COMPILE", "off" if args.no_compile else "on")
    import torch
    from fullsize import ensure_fullsize

    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.models.registry import checkpoint

    tasks = args.tasks.split(",")
    folder = ensure_fullsize(tasks)
    manager = ModelManager(checkpoint_dir=folder, device="cuda", dtype="bfloat16")
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, compile {os.environ['SAPIENS2_COMPILE']}; "
          "ms per forward (batch)")
    print(f"{'task':9} {'busy':>4} {'batch':>5} {'queue':>8} {'forward':>8} {'loop':>8} {'graph':>8} "
          f"{'graph/loop':>10} {'max diff':>9}")
    for task, threads, batch in [(t, int(n), int(b)) for t in tasks for n in args.busy_threads.split(",")
                                 for b in args.batches.split(",")]:
        model = manager.get(checkpoint(task, "0.4b")).model
        stop = threading.Event()
        for _ in range(threads):
            threading.Thread(target=spin, args=(stop,), daemon=True).start()
        x = torch.randn(batch, 3, 1024, 768, device="cuda", dtype=torch.bfloat16)
        with torch.inference_mode():
            for _ in range(3):
                model(pixel_values=x)
            torch.cuda.synchronize()
            queue, whole = [], []
            for _ in range(args.repeat):
                started = time.perf_counter()
                model(pixel_values=x)
                queued = time.perf_counter()
                torch.cuda.synchronize()
                queue.append(queued - started)
                whole.append(time.perf_counter() - started)
            started = time.perf_counter()
            for _ in range(args.repeat):
                out = model(pixel_values=x)
            torch.cuda.synchronize()
            loop = (time.perf_counter() - started) / args.repeat
            first = next(v for v in out.values() if torch.is_tensor(v))
            graph_ms, diff = float("nan"), float("nan")
            try:
                static = x.clone()
                side = torch.cuda.Stream()
                side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    for _ in range(2):
                        model(pixel_values=static)
                torch.cuda.current_stream().wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph):
                    captured = model(pixel_values=static)
                graph.replay()
                torch.cuda.synchronize()
                got = next(v for v in captured.values() if torch.is_tensor(v))
                diff = (got.float() - first.float()).abs().max().item()
                started = time.perf_counter()
                for _ in range(args.repeat):
                    graph.replay()
                torch.cuda.synchronize()
                graph_ms = 1000 * (time.perf_counter() - started) / args.repeat
                del graph, captured
            except Exception as error:  # noqa: BLE001 - the probe says why capture failed and goes on
                print(f"  {task} batch {batch}: capture failed: {type(error).__name__}: {str(error)[:300]}")
        queue.sort(), whole.sort()
        print(f"{task:9} {threads:4d} {batch:5d} {1000 * queue[len(queue) // 2]:8.1f} {1000 * whole[len(whole) // 2]:8.1f} "
              f"{1000 * loop:8.1f} {graph_ms:8.1f} {graph_ms / (1000 * loop):10.2f} {diff:9.3g}", flush=True)
        stop.set()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

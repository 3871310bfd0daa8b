"""What a batch of video frames costs the host on its way to the GPU (a script, not a test; CUDA only).

py-spy of a body-part video on an H200 (sixth session) found a third of the main thread's time at `upload`'s
`pin_memory()`. This times the ways to bring a batch of 720p RGB frames up, each while the device is still busy
with the batch before (a queued sleep kernel stands in for the last batch's forward), host milliseconds per batch:

* `app`: `sapiens2_demo.models.inference.upload`, what the video road calls;
* `pin each`: every frame `pin_memory()`'d and copied on its own (main's upload before the sixth session);
* `one pinned`: one pinned (B, H, W, 3) buffer from torch's pinned cache per batch, the frames copied in, one copy;
* `kept`: the same, from buffers allocated once and reused when their copy is done;
* `pageable`: a plain copy from the frames' own memory (waits for the device: the floor not to go below).

    HF_HUB_OFFLINE=1 python3 benchmarks/upload_probe.py [--batch 8] [--busy-ms 10] [--batches 40]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    import torch

    from sapiens2_demo.models.inference import upload

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--busy-ms", type=float, default=10.0, help="device time queued before each batch")
    parser.add_argument("--batches", type=int, default=40)
    args = parser.parse_args()
    device = torch.device("cuda")
    rng = np.random.default_rng(0)
    frames = [rng.integers(0, 256, (720, 1280, 3), dtype=np.uint8) for _ in range(args.batch)]
    # the sleep kernel's cycles for busy_ms, from one timed run
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(10_000_000)
    end.record()
    end.synchronize()
    cycles = int(10_000_000 * args.busy_ms / start.elapsed_time(end))

    kept = [torch.empty((args.batch, 720, 1280, 3), dtype=torch.uint8, pin_memory=True) for _ in range(3)]
    kept_done = [None] * 3

    def pin_each():
        return [torch.from_numpy(f).pin_memory().to(device, non_blocking=True) for f in frames]

    def one_pinned():
        host = torch.empty((len(frames), 720, 1280, 3), dtype=torch.uint8, pin_memory=True)
        view = host.numpy()
        for i, f in enumerate(frames):
            np.copyto(view[i], f)
        return host.to(device, non_blocking=True)

    turn = [0]

    def kept_buffers():
        i = turn[0] = (turn[0] + 1) % len(kept)
        if kept_done[i] is not None:
            kept_done[i].synchronize()
        view = kept[i].numpy()
        for j, f in enumerate(frames):
            np.copyto(view[j], f)
        out = kept[i].to(device, non_blocking=True)
        kept_done[i] = torch.cuda.Event()
        kept_done[i].record()
        return out

    def pageable():
        return [torch.from_numpy(f).to(device) for f in frames]

    ways = {"app": lambda: upload(frames, device), "pin each": pin_each, "one pinned": one_pinned,
            "kept": kept_buffers, "pageable": pageable}
    print(f"{torch.cuda.get_device_name()}; torch {torch.__version__}; batch {args.batch} x 1280x720 RGB; "
          f"{args.busy_ms} ms of device time queued before each batch; host ms per batch, median (min-max)")
    for name, way in ways.items():
        times = []
        for b in range(args.batches + 5):
            torch.cuda._sleep(cycles)
            t = time.perf_counter()
            way()
            if b >= 5:
                times.append(1e3 * (time.perf_counter() - t))
        torch.cuda.synchronize()
        print(f"{name:>11}: {statistics.median(times):7.2f} ({min(times):.2f}-{max(times):.2f})")
    copy = []
    for _ in range(20):
        t = time.perf_counter()
        view = kept[0].numpy()
        for j, f in enumerate(frames):
            np.copyto(view[j], f)
        copy.append(1e3 * (time.perf_counter() - t))
    print(f"{'memcpy':>11}: {statistics.median(copy):7.2f} (the frames into pinned memory, no device call)")


if __name__ == "__main__":
    main()

"""Where an image request's thread spends its CPU, stage by stage: `bench_host.py --profile` (a helper, not a script).

cProfile on `time.thread_time` over whole requests (the job and the display copies, each loading the image afresh as
an upload is); a stage is the cumulative time of its outermost calls. The writers' threads and torch's worker
threads are not in it: the request thread's own CPU.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

# where the request thread's CPU goes: cProfile on time.thread_time, per stage (file, function name prefix)
PROFILED_STAGES = {"load_image": ("media/image.py", "load_image"), "detector": ("pose/detector.py", "detect_people_batch"),
                   "crops": ("models/crops.py", "crop_people"), "preprocess": ("models/inference.py", "preprocess"),
                   "model forward": ("models/inference.py", "forward"), "seg-cache key": ("pipelines/dense.py", "key"),
                   "GPU call": ("jobs/image.py", "infer"), "present": ("tasks/present.py", "present_"),
                   "summary": ("tasks/summary.py", "summarize"), "display copies": ("ui/common.py", "as_display_files")}


def profile_stages(ctx, path: str, task: str, run_dir: Path, reps: int) -> dict:
    """ms of the request thread's CPU per stage of `reps` requests (medians), each loading the image afresh as an
    upload is, through the job and the display copies; the writers' threads and torch's workers are not counted."""
    import cProfile
    import pstats

    from sapiens2_demo.jobs import image as image_jobs
    from sapiens2_demo.media.image import load_image
    from sapiens2_demo.ui.common import as_display_files

    def request(folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        loaded = load_image(path)
        stream = image_jobs.stream_all if task == "all" else image_jobs.stream_task
        for out in stream(ctx, loaded, run_dir=folder, **({} if task == "all" else {"task": task})):
            as_display_files(out, folder, loaded, path, {})

    request(run_dir / "warm")
    seen: dict = {name: [] for name in [*PROFILED_STAGES, "request"]}
    for i in range(reps):
        profiler, cpu = cProfile.Profile(time.thread_time), time.thread_time()
        profiler.enable()
        request(run_dir / str(i))
        profiler.disable()
        seen["request"].append(time.thread_time() - cpu)
        stats = pstats.Stats(profiler).stats
        for name, (suffix, prefix) in PROFILED_STAGES.items():
            def ours(key, suffix=suffix, prefix=prefix):
                return key[0].endswith(suffix) and key[2].startswith(prefix)
            # cumulative time of the outermost calls only (a stage calling itself is counted once)
            seen[name].append(sum(v[3] for key, v in stats.items() if ours(key) and not any(map(ours, v[4]))))
    return {name: round(1000 * statistics.median(values), 1) for name, values in seen.items()}

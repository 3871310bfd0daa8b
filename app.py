"""Sapiens2 demo: `python app.py` locally, or as the Hugging Face Space entry point.

Nothing heavy happens at start-up: models load on the first request that needs them.
"""

from __future__ import annotations

import argparse
import importlib.util
import logging
import os

# On a Space (ZeroGPU forks a GPU worker per call) the default sizes load at start, in the main process.
SPACE_PRELOAD = "pose:0.4b,seg:0.4b,normal:0.4b,pointmap:0.4b,matting:1b"


def parse_args(argv=None) -> argparse.Namespace:
    on_space = bool(os.environ.get("SPACE_ID"))
    env = os.environ.get
    parser = argparse.ArgumentParser(description="Sapiens2 demo (pose, body parts, normals, depth & 3D, matting)")
    parser.add_argument("--host", default=env("SAPIENS2_HOST", "0.0.0.0" if on_space else "127.0.0.1"),
                        help="address to listen on (default 127.0.0.1, this machine only; 0.0.0.0 on a Space)")
    parser.add_argument("--port", type=int, default=int(env("SAPIENS2_PORT", env("GRADIO_SERVER_PORT", "7860"))),
                        help="port to serve on (default 7860)")
    parser.add_argument("--checkpoint-dir", default=env("SAPIENS2_CHECKPOINT_DIR"),
                        help="folder with sapiens2-<task>-<size>/ checkpoints in transformers format")
    parser.add_argument("--detector", default=env("SAPIENS2_DETECTOR"),
                        help="YOLO weights for person boxes: a path or an ultralytics model name")
    parser.add_argument("--device", default=env("SAPIENS2_DEVICE", "auto"), help="auto, cpu, cuda, cuda:1, mps")
    parser.add_argument("--dtype", default=env("SAPIENS2_DTYPE", "auto"), help="auto (bfloat16 on CUDA and on CPUs with native bf16: AMX, "
                        "AVX512-BF16; else float32), float32, bfloat16, float16")
    parser.add_argument("--model-budget-gb", type=float, default=None,
                        help="memory for loaded models; least recently used are evicted beyond it")
    parser.add_argument("--max-people", type=int, default=int(env("SAPIENS2_MAX_PEOPLE", "50")),
                        help="most people posed in an image or frame (default 50; the highest-scoring boxes)")
    parser.add_argument("--queue-size", type=int, default=int(env("SAPIENS2_QUEUE_SIZE", "32")),
                        help="requests that may wait; more are answered 'queue full' (default 32)")
    parser.add_argument("--concurrency", type=int, default=int(env("SAPIENS2_CONCURRENCY", "1")),
                        help="simultaneous runs per task (each task has its own queue slot)")
    parser.add_argument("--max-file-size", default=None,
                        help="upload limit enforced by gradio, e.g. 50mb (default: SAPIENS2_MAX_UPLOAD_MB, 25 MB)")
    parser.add_argument("--share", action="store_true", help="create a public gradio.live link (off by default)")
    parser.add_argument("--mcp", action=argparse.BooleanOptionalAction,
                        default=env("SAPIENS2_MCP", "1" if on_space else "0") == "1",
                        help="also serve the task endpoints as MCP tools at /gradio_api/mcp/ (on by default on a "
                             "Space; needs the mcp package: pip install 'gradio[mcp]')")
    parser.add_argument("--compile", nargs="?", const="on", default=env("SAPIENS2_COMPILE", "auto"),
                        choices=("auto", "on", "off", "1", "0"),
                        help="regional torch.compile of each model, built in the background while the model "
                             "serves eager (no request waits for it), cached on disk (default auto: on for CUDA and "
                             "for bfloat16 on a CPU with native bf16, off elsewhere; ZeroGPU: ahead of time)")
    parser.add_argument("--preload", default=env("SAPIENS2_PRELOAD", SPACE_PRELOAD if on_space else ""),
                        help="checkpoints to load at start, in the main process, e.g. seg:0.4b,pose:1b (ZeroGPU: "
                             "the GPU workers inherit them; others load on first use, in the call)")
    args = parser.parse_args(argv)
    if args.max_file_size is None:  # gradio's limit is the larger of ours; each loader checks its own
        from sapiens2_demo.jobs.video import VideoLimits
        from sapiens2_demo.media.image import DEFAULT_MAX_BYTES

        args.max_file_size = max(DEFAULT_MAX_BYTES, VideoLimits().max_bytes)
    return args


def create_app(args: argparse.Namespace):
    from sapiens2_demo.jobs.image import AppContext
    from sapiens2_demo.models.manager import ModelManager
    from sapiens2_demo.ui.app import build_app

    budget = int(args.model_budget_gb * 2**30) if args.model_budget_gb else None
    manager = ModelManager(checkpoint_dir=args.checkpoint_dir, device=args.device, dtype=args.dtype,
                           memory_budget_bytes=budget, detector=args.detector, compile=args.compile,
                           compile_in_background=True)  # no visitor waits for a compile
    from sapiens2_demo.ui.common import STANDIN_MARKER, STANDIN_NOTE, runs_stand_ins

    if runs_stand_ins(manager):  # the operator reads it too: the page's footer and every answer say it
        logging.getLogger("sapiens2_demo.app").warning(
            "%s: %s holds %s, the stand-ins of sapiens2_demo/standins, not Sapiens2's weights; the page and every "
            "answer say so.", STANDIN_NOTE.lower(), manager.checkpoint_dir, STANDIN_MARKER)
    from sapiens2_demo import gpu

    gpu.use_ahead_of_time(manager)  # ZeroGPU: compiled ahead of time after the preload, not at each load
    if args.preload:
        gpu.preload(manager, args.preload)
        gpu.compile_ahead(manager)
    demo = build_app(AppContext(manager=manager, max_people=args.max_people))
    demo.queue(max_size=args.queue_size, default_concurrency_limit=args.concurrency)
    return demo


def main(argv=None) -> None:
    from sapiens2_demo.models.device import enable_mps_fallback

    enable_mps_fallback()  # first: torch reads the variable once, when something first imports it
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # gradio's own health checks
    args = parse_args(argv)
    if args.mcp and importlib.util.find_spec("mcp") is None:
        raise SystemExit("sapiens2 demo: --mcp (SAPIENS2_MCP=1) needs the mcp package: pip install 'gradio[mcp]'")
    from sapiens2_demo.models.manager import CheckpointUnavailable

    try:
        demo = create_app(args)
    except (ValueError, CheckpointUnavailable) as error:  # a bad or missing --preload checkpoint: say so
        raise SystemExit(f"sapiens2 demo: {error}") from None
    launch(demo, args, share=args.share)


def launch(demo, args: argparse.Namespace, **kwargs):
    """demo.launch with this app's settings (also how the tests start it): the page's style, the upload limit,
    and the MCP server when asked for. Without a share link, gradio's start-up lines are quieted (it would say "set
    `share=True` in `launch()`") and this prints the local URL and our flag, --share, instead."""
    from sapiens2_demo.ui import mcp
    from sapiens2_demo.ui.app import launch_options

    quiet = kwargs.pop("quiet", False)
    ours = not quiet and not kwargs.get("share")
    block = not kwargs.pop("prevent_thread_lock", False)
    result = demo.launch(server_name=args.host, server_port=args.port, max_file_size=args.max_file_size,
                         show_error=True, mcp_server=args.mcp, app_kwargs={"lifespan": mcp.lifespan(demo)},
                         quiet=quiet or ours, prevent_thread_lock=True,
                         **launch_options(), **kwargs)
    if ours:
        if getattr(demo, "mcp_error", None):
            print(demo.mcp_error)
        print(f"* Running on local URL:  {demo.local_url}\n* For a public link, start the app with --share.",
              flush=True)
    if block:
        demo.block_thread()
    return result


if __name__ == "__main__":
    main()

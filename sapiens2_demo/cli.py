"""Batch command: every input through the chosen tasks, with the app's exports, resumable.

    python -m sapiens2_demo.cli --input photos/ clips/*.mp4 --output out --tasks seg,pose
    python -m sapiens2_demo.cli --input photos/ --output /shared/out --tasks all --engine ray --workers 4
    python -m sapiens2_demo.cli export --task seg --size 0.4b --format onnx --output seg.onnx   (model files)

Outputs go to OUTPUT/<input path relative to the inputs' common folder, without suffix>/<task>/, and one line
per input per run to OUTPUT/manifest.jsonl. Complete inputs are skipped (use --overwrite to redo them). The
exit status is 1 when any input failed, 2 for a usage or set-up error (e.g. a missing checkpoint), 130 on Ctrl-C.
"""

from __future__ import annotations

import argparse
import logging
import sys

SIZES = ("0.4b", "0.8b", "1b", "5b")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m sapiens2_demo.cli", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    io = parser.add_argument_group("inputs and outputs")
    io.add_argument("--input", "-i", nargs="+", required=True, metavar="PATH",
                    help="image or video files, folders (searched recursively) or globs (quote them, ** allowed)")
    io.add_argument("--output", "-o", required=True, metavar="DIR", help="output folder (created if missing)")
    io.add_argument("--tasks", default="all",
                    help="comma-separated: pose, seg, normal, pointmap, matting, features, or all (the first five)")
    io.add_argument("--overwrite", action="store_true", help="redo inputs whose outputs are already complete")
    io.add_argument("--quiet", "-q", action="store_true", help="plain log lines instead of a progress bar")
    io.add_argument("--rerun", action="store_true",
                    help="videos: also a Rerun recording, recording.rrd (the video, keypoints per track id, the 3D "
                         "motion with --lift-3d and its joint_angles_<id>.csv / .png, the dense maps; open it with "
                         "`rerun recording.rrd`); needs rerun-sdk")

    model = parser.add_argument_group("models")
    model.add_argument("--size", choices=SIZES, default=None,
                       help="model size (default: 0.4b; matting only exists as 1b)")
    model.add_argument("--checkpoint-dir", default=None, help="local checkpoints (DIR/sapiens2-<task>-<size>/)")
    model.add_argument("--detector", default=None, help="person detector weights (default: yolo26n.pt)")
    model.add_argument("--device", default=None, help="auto, cpu, cuda, cuda:1, mps (default: auto)")
    model.add_argument("--dtype", default=None,
                       help="auto, float32, bfloat16 or float16 (default: auto: bfloat16 on CUDA and on CPUs with "
                            "native bf16 (AMX, AVX512-BF16), else float32)")
    model.add_argument("--compile", default=None, choices=("auto", "on", "off"),
                       help="regional torch.compile at load, cached on disk (default: SAPIENS2_COMPILE, else auto: "
                            "for CUDA and for bfloat16 on a CPU with native bf16, when the run's images and frames "
                            "repay the compile on this machine; on: always; off: never)")
    model.add_argument("--batch-size", type=int, default=8, help="images per model call (default: 8)")
    model.add_argument("--threads", type=int, default=None,
                       help="torch threads per model worker (default locally: every core for full-size models, "
                            "the cores the writers leave for tiny ones; a share per Ray actor)")
    model.add_argument("--keep-background", action="store_true",
                       help="normals and pointmap: keep the background (default: removed, as in the app)")

    pose = parser.add_argument_group("pose options")
    pose.add_argument("--flip-test", action=argparse.BooleanOptionalAction, default=True,
                      help="average with the mirrored crop (default: on)")
    pose.add_argument("--detection-threshold", type=float, default=0.3, help="person detector score (default: 0.3)")
    pose.add_argument("--nms-iou", type=float, default=0.3, help="overlap for merging boxes (default: 0.3)")
    pose.add_argument("--max-people", type=int, default=20, help="people per image (default: 20)")
    pose.add_argument("--keypoint-threshold", type=float, default=0.3,
                      help="keypoint score for 'visible' in COCO/OpenPose exports (default: 0.3)")
    pose.add_argument("--lift-3d", action="store_true",
                      help="also run the depth model: images get 3D keypoints in metres (pose_3d.json, "
                           "pose_3d.glb), videos motion capture (pose_3d.jsonl, motion_<id>.bvh per person, motion.glb)")

    engine = parser.add_argument_group("engine")
    engine.add_argument("--engine", choices=("local", "ray"), default="local")
    engine.add_argument("--workers", type=int, default=None,
                        help="local: image-reading threads and file-writing processes (default 2); ray: model "
                             "actors (default: one per GPU, else 2 CPU actors)")
    engine.add_argument("--ray-address", default=None,
                        help="Ray cluster to join (default: RAY_ADDRESS, else a local cluster)")
    args = parser.parse_args(argv)
    if args.batch_size < 1 or (args.workers is not None and args.workers < 1) or (args.threads or 1) < 1:
        parser.error("--batch-size, --workers and --threads must be at least 1")
    if args.rerun:
        from .export.rerun_recording import available

        if not available():
            parser.error("--rerun needs rerun-sdk: pip install rerun-sdk==0.39.0")
    return args


def options_from(args: argparse.Namespace):
    from .batch import BatchOptions, parse_tasks

    return BatchOptions(tasks=parse_tasks(args.tasks), size=args.size, checkpoint_dir=args.checkpoint_dir,
                        detector=args.detector, device=args.device, dtype=args.dtype, batch_size=args.batch_size,
                        flip_test=args.flip_test, detection_threshold=args.detection_threshold, nms_iou=args.nms_iou,
                        max_people=args.max_people, keypoint_threshold=args.keypoint_threshold,
                        lift_3d=args.lift_3d, remove_background=not args.keep_background, threads=args.threads,
                        compile=args.compile, rerun=args.rerun)


def parse_export_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sapiens2_demo.cli export",
        description="Write a checkpoint as a model file that runs without this project: ONNX (onnxruntime) or an "
                    "AOTInductor package (.pt2, torch._inductor.aoti_load_package), batch dimension dynamic. "
                    "docs/compile.md ('Model files') has the pre- and post-processing the caller does.")
    parser.add_argument("--task", required=True, help="pose, seg, normal, pointmap, matting or features")
    parser.add_argument("--size", choices=SIZES, default=None, help="model size (default: the task's smallest)")
    parser.add_argument("--format", choices=("onnx", "aoti"), default="onnx")
    parser.add_argument("--output", "-o", required=True, metavar="FILE", help="e.g. seg.onnx or seg.pt2")
    parser.add_argument("--checkpoint-dir", default=None, help="local checkpoints (DIR/sapiens2-<task>-<size>/)")
    parser.add_argument("--device", default="cpu",
                        help="cpu, cuda, cuda:1 (default cpu; an aoti package runs on the device it was made for)")
    parser.add_argument("--dtype", default="float32", help="float32, bfloat16 or float16 (default float32)")
    parser.add_argument("--no-check", dest="check", action="store_false",
                        help="skip running the file at batch 1 and 3 against PyTorch, and on a non-contiguous "
                             "input (ONNX must match; an aoti package must refuse it)")
    return parser.parse_args(argv)


def export_main(argv: list[str]) -> int:
    args = parse_export_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
    from . import tasks
    from .models.export import ExportError, export
    from .models.manager import CheckpointUnavailable, ModelManager
    from .models.registry import UnknownCheckpoint, checkpoint

    try:
        spec = tasks.get(args.task)
        ckpt = checkpoint(spec.family, spec.size_or_default(args.size))
        manager = ModelManager(checkpoint_dir=args.checkpoint_dir, device=args.device, dtype=args.dtype,
                               compile="off")
        print(f"exporting {ckpt.repo_id} ({manager.device}, {str(manager.dtype).replace('torch.', '')}) "
              f"to {args.format}...", file=sys.stderr, flush=True)
        result = export(manager.get(ckpt), args.format, args.output, check=args.check)
    except (tasks.UnknownTask, UnknownCheckpoint, ValueError, CheckpointUnavailable, ExportError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    height, width = result.input_size
    print(f"wrote {result.path} ({result.path.stat().st_size / 2**20:.1f} MiB) in {result.seconds:.0f} s\n"
          f"  input  pixel_values: (batch, 3, {height}, {width}) {str(manager.dtype).replace('torch.', '')}\n"
          f"  output {', '.join(result.output_names)}")
    for batch, difference in result.checks.items():
        print(f"  checked at batch {batch}: largest difference to PyTorch {difference:.1e} of the output's range")
    if result.non_contiguous:
        print(f"  checked a non-contiguous input (channels last in memory): {result.non_contiguous}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from .models.device import enable_mps_fallback

    enable_mps_fallback()  # before anything imports torch, which reads it once
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["export"]:
        return export_main(argv[1:])
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.quiet else logging.WARNING, format="%(levelname)s %(message)s")
    from .batch import run
    from .models.manager import CheckpointUnavailable

    try:
        summary = run(args.input, args.output, options_from(args), engine=args.engine, workers=args.workers,
                      ray_address=args.ray_address, quiet=args.quiet, overwrite=args.overwrite)
    except (ValueError, CheckpointUnavailable) as error:  # bad flags, no inputs, a missing model
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted: finished inputs are in the manifest; run the same command again to resume",
              file=sys.stderr)
        return 130
    return summary.exit_code


if __name__ == "__main__":
    sys.exit(main())

"""Write tiny Sapiens2 checkpoints in the --checkpoint-dir layout: random weights (every shape and step real,
outputs noise) or, with --trained, stand-ins (the same configs trained about two CPU minutes on synthetic targets
from the bundled photos, so outputs have structure: large part regions, smooth normals, a pointmap shaped like
the person, a matte on the person, one clear peak per keypoint; learnt shapes, not estimates). --detector adds a
random-weight YOLOv8n.

    python -m sapiens2_demo.standins DIR [--detector]     # random weights, into DIR
    python -m sapiens2_demo.standins --trained            # stand-ins: built once into the user's cache, reused
    python -m sapiens2_demo.standins --trained DIR        # stand-ins trained into DIR (no cache)

The last line on stdout is the folder (so `make run-standin` can pass it to the app); what happens goes to stderr.
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m sapiens2_demo.standins", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=Path, nargs="?",
                        help="where to write them (with --trained: optional, default the user's cache)")
    parser.add_argument("--detector", action="store_true", help="also write DIR/yolov8n-random.pt (random weights)")
    parser.add_argument("--trained", action="store_true",
                        help="stand-ins, not models: the tiny configs trained about two CPU minutes on synthetic "
                             "targets (deterministic, offline) so their outputs have structure")
    args = parser.parse_args()
    if args.dir is None and not args.trained:
        parser.error("give DIR for random-weight checkpoints (only --trained has a default: the user's cache)")
    from .tiny import write_all, write_tiny_detector

    if args.trained and args.dir is None:
        from .train import cached_standins

        print(cached_standins(detector=True))
        return
    if args.trained:
        from .train import write_standins

        write_standins(args.dir)
    else:
        write_all(args.dir)
    if args.detector:
        write_tiny_detector(args.dir / "yolov8n-random.pt")
    print(args.dir)


if __name__ == "__main__":
    main()

"""Write tiny Sapiens2 checkpoints in the --checkpoint-dir layout: random weights (every shape and step real,
outputs noise) or, with --trained, stand-ins (the same configs trained a few CPU minutes on synthetic targets
from the bundled photos, so outputs have structure: large part regions, smooth normals and depth, a matte on the
person, one clear peak per keypoint; learnt shapes, not estimates). --detector adds a random-weight YOLOv8n.

    python -m sapiens2_demo.standins DIR [--trained] [--detector]
"""

from __future__ import annotations

import argparse
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m sapiens2_demo.standins", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("dir", type=Path)
    parser.add_argument("--detector", action="store_true", help="also write DIR/yolov8n-random.pt (random weights)")
    parser.add_argument("--trained", action="store_true",
                        help="stand-ins, not models: train the tiny configs for a few CPU minutes on synthetic targets "
                             "(deterministic, offline) so their outputs have structure")
    args = parser.parse_args()
    from .tiny import write_all, write_tiny_detector

    if args.trained:
        from .train import write_standins

        write_standins(args.dir)
    else:
        write_all(args.dir)
    if args.detector:
        write_tiny_detector(args.dir / "yolov8n-random.pt")
    kind = "stand-in (trained on synthetic targets; not models)" if args.trained else "random-weight"
    print(f"tiny {kind} checkpoints written to {args.dir}")


if __name__ == "__main__":
    main()

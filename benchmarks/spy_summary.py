"""Where each thread of a run spends its time, from py-spy's raw samples (a script, not a test).

    py-spy record --idle --threads --format raw -r 200 -o spy.txt -- python benchmarks/bench_video.py ...
    python benchmarks/spy_summary.py spy.txt [--within timed_ours] [--top 12] [--chain 3]
(py-spy's --gil: only the samples where a thread held the GIL, which thread holds it how often)

Per thread: its samples, and the places it was found most often as (the innermost frame of this package, the
innermost frame of all), so a thread waiting (a lock, an event, a queue) shows where it waits and for what. With
--within NAME, only the threads whose samples pass through a frame of that name somewhere (the timed run's)
count on the main thread (the other threads are listed each by its id: the timed run's are the busiest).
"""

from __future__ import annotations

import argparse
import collections
import re

LINE = re.compile(r"^thread \((\w+)\): ([^;]*);(.*) (\d+)$")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("raw")
    parser.add_argument("--within", default=None, help="main thread: keep samples whose stack has this function name")
    parser.add_argument("--top", type=int, default=12)
    parser.add_argument("--package", default="sapiens2_demo")
    parser.add_argument("--chain", type=int, default=1, help="this many innermost frames of the package, joined")
    args = parser.parse_args()
    places: dict = collections.defaultdict(collections.Counter)
    totals = collections.Counter()
    for line in open(args.raw, encoding="utf-8", errors="replace"):
        match = LINE.match(line.rstrip("\n"))
        if not match:
            continue
        thread, name, stack, count = match.group(1), match.group(2), match.group(3), int(match.group(4))
        frames = stack.split(";")
        if args.within and name == "MainThread" and not any(f.startswith(args.within + " ") for f in frames):
            continue
        ours = [f for f in frames if f"{args.package}/" in f or f.split(" ")[0] in ("collect", "after_the_forward")]
        here = " < ".join(f.split(" (")[0] + ":" + f.rsplit(":", 1)[-1].rstrip(")") for f in
                          reversed(ours[-args.chain:])) if ours else "-"
        places[(thread, name)][(here, frames[-1])] += count
        totals[(thread, name)] += count
    for key, total in totals.most_common():
        thread, name = key
        print(f"== {name} ({thread}): {total} samples")
        for (here, leaf), count in places[key].most_common(args.top):
            print(f"  {100 * count / total:5.1f}%  {here[:120]:120}  <- {leaf[:80]}")


if __name__ == "__main__":
    main()

"""How the back-to-back ratio of a rules file against the default depends on the window
length (docs/benchmarks.md, "Window length"). For each window (calls, with no time cap),
`--pairs` fresh alternating launch pairs measure the default and the file at the given
sizes; the figure is the geometric mean over pairs of the ratio of launch medians, and the
time one window took.

    python bench/window_bench.py --mpi /usr --rules slow.conf --collective allreduce \
        --sizes 262144,524288,786432 --windows 8,16,32,64,128,256 --pairs 6

Prints markdown.
"""

from __future__ import annotations

import argparse
import math
import statistics
from pathlib import Path

from colltune.backends import registry
from colltune.collectives import get_collective
from colltune.kernel.launch import Repetitions
from colltune.tuner.confirm import ab_runs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", required=True)
    ap.add_argument("--rules", required=True, type=Path)
    ap.add_argument("--collective", default="allreduce")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--sizes", default="262144,524288,786432")
    ap.add_argument("--windows", default="8,16,32,64,128,256")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--point-time", type=float, default=0.3)
    a = ap.parse_args()
    target = registry.for_file(a.rules).with_files().verify_target(a.rules, a.np, a.mpi, None)
    coll = get_collective(a.collective)
    sizes = [int(s) for s in a.sizes.split(",")]
    print(f"{a.collective}, {a.np} ranks, {target.mpi.name} {target.mpi.version}, "
          f"{a.pairs} launch pairs per window, back-to-back\n")
    print("| window (calls) | " + " | ".join(f"{s} B ratio (ms/window)" for s in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for w in (int(x) for x in a.windows.split(",")):
        reps = Repetitions(min_reps=5, max_reps=200, point_time=a.point_time,
                           timing="back-to-back", window=w, window_time=1e9)
        ab = ab_runs(target.mpi, coll, target.placement, a.rules, sizes, a.pairs, reps,
                     arms=target.arms)
        cells = []
        for s in sizes:
            d, t = ab.samples["default"][s], ab.samples["tuned"][s]
            logs = [math.log(statistics.median(x) / statistics.median(y))
                    for x, y in zip(t, d, strict=True)]
            ratio = math.exp(sum(logs) / len(logs))
            slower = sum(v > 0 for v in logs)
            ms = statistics.median([x for ln in t for x in ln]) * w * 1e3
            cells.append(f"{ratio:.2f}x ({slower}/{len(logs)} slower; {ms:.1f})")
        print(f"| {w} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()

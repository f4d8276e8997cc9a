"""A/A check of the confirmation statistics: both arms run the library default, so every
"faster" or "slower" verdict is a false one. Reports the false-verdict rate per statistic.

    python bench/aa_check.py --mpi /usr --colls reduce,gather --rounds 4 --trials 3
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from colltune.backends.openmpi.install import find_openmpi
from colltune.collectives import get_collective
from colltune.core.space import sizes_for
from colltune.kernel.launch import Repetitions
from colltune.slots import place
from colltune.tuner.confirm import ab_runs

# what only tests and benchmarks use lives beside the tests (issue 63)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from judges import judge, judge_pooled  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", default="/usr")
    ap.add_argument("--colls", default="reduce,gather")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--trials", type=int, default=3)
    args = ap.parse_args()
    mpi = find_openmpi(args.mpi)
    placement = place(args.np, env={})
    with tempfile.TemporaryDirectory() as tmp:
        rules = Path(tmp) / "default.conf"
        rules.write_text("0\n")  # dynamic rules on, no rule: Open MPI's fixed decision
        counts = {"pooled": [0, 0], "per-launch": [0, 0]}
        for coll_name in args.colls.split(","):
            coll = get_collective(coll_name)
            for trial in range(args.trials):
                ab = ab_runs(mpi, coll, placement, rules, sizes_for(coll, args.np),
                             args.rounds, Repetitions(seed=100 + trial))
                for name, fn in (("pooled", judge_pooled), ("per-launch", judge)):
                    vs = fn(ab).values()
                    counts[name][0] += sum(v.verdict != "same" for v in vs)
                    counts[name][1] += len(vs)
        print(f"A/A on {mpi.name} {mpi.version}, {args.np} ranks, {args.rounds} launch pairs, "
              f"{args.trials} trials of {args.colls}")
        print("| statistic | false verdicts | verdicts | rate |")
        print("|---|---|---|---|")
        for name, (bad, total) in counts.items():
            print(f"| {name} | {bad} | {total} | {bad / total:.0%} |")


if __name__ == "__main__":
    main()

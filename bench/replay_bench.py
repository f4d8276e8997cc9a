"""Replay search strategies on the recorded datasets (bench/data): measurements used (as
repetitions, relative to the recorded grid), sizes whose choice is within 5% of the
dataset's best median, and the worst regret, over many seeds.

    python bench/replay_bench.py --seeds 50

Prints markdown. Only the racing strategy exists so far; grid is the reference (100%).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from colltune.tuner.replay import load, run_race


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(Path(__file__).parent / "data"))
    ap.add_argument("--seeds", type=int, default=50)
    args = ap.parse_args()
    print("| dataset | grid repetitions | strategy | repetitions used (mean, % of grid) | "
          "sizes within 5% of best | worst regret |")
    print("|---|---|---|---|---|---|")
    tot_cost = tot_grid = tot_in = tot_n = 0
    for f in sorted(Path(args.data).glob("*.csv")):
        ds = load(f)
        res = [run_race(ds, seed) for seed in range(args.seeds)]
        cost = sum(r.cost for r in res) / len(res)
        within = sum(r.within for r in res)
        n = sum(r.sizes for r in res)
        tot_cost += cost
        tot_grid += ds.cost
        tot_in += within
        tot_n += n
        print(f"| {ds.name} | {ds.cost} | race | {cost:.0f} ({100 * cost / ds.cost:.1f}%) | "
              f"{within}/{n} ({100 * within / n:.1f}%) | "
              f"{100 * max(r.worst_regret for r in res):.1f}% |")
    print(f"| all | {tot_grid} | race | {tot_cost:.0f} ({100 * tot_cost / tot_grid:.1f}%) | "
          f"{tot_in}/{tot_n} ({100 * tot_in / tot_n:.1f}%) | |")


if __name__ == "__main__":
    main()

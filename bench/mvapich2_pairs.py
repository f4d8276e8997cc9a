"""Benchmark for docs/benchmarks.md (issue 37): one MVAPICH2 reduce algorithm against the
library's default, in alternating fresh launches, at a few sizes, in both timing modes.

    COLLTUNE_MVAPICH2_PREFIX=/path/to/mvapich2 python bench/mvapich2_pairs.py \
        --algorithm 5 --sizes 64K --pairs 8

Each pair is two launches of the kernel (default, then the algorithm forced through
MV2_INTER_REDUCE_TUNING with the indexed tables off, the order alternating from pair to
pair); each launch gives a median per size and timing mode (isolated: one call after a
barrier; back-to-back: a window of calls). MVAPICH2's own mv2_coll_reduce counters say
which algorithm each arm ran. Prints markdown: per size and mode, the default/forced ratio
of every pair and their geometric mean. Timings depend on the machine and its load: only
ratios within one run count.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics

from colltune.backends.mvapich2 import install as m2
from colltune.core.space import parse_sizes
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.launchers import Launch
from colltune.slots import place

MODES = ("isolated", "back-to-back")


def launch(mpi: m2.MVAPICH2, np: int, sizes: list[int], env: dict[str, str]
           ) -> dict[int, tuple[dict[str, float], int | None]]:
    """Per size: the median per timing mode, and the algorithm value MVAPICH2 counted."""
    exe = build_kernel(mpi)
    plan = KernelPlan("reduce", [KernelConfig(0)], [(0, s) for s in sizes],
                      Repetitions(2, 15, 200, 0.03, 0.3, 1, timing="both"),
                      pvars=m2.PVAR_PREFIX)
    p = place(np, None, launch=Launch("mpiexec"))
    out = run_kernel(m2.launch_command(mpi, p), exe, plan,
                     m2.launch_env(env, p.oversubscribe), point_timeout=120)
    if out.status != "ok":
        raise SystemExit(out.message)
    cat = m2.catalog(["reduce"])
    return {r.size: ({m: statistics.median(r.series[m]["completion"]) for m in MODES},
                     cat.ran_value("reduce", r.pvars)) for r in out.results}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", default=os.environ.get("COLLTUNE_MVAPICH2_PREFIX"))
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--algorithm", type=int, default=5, help="MV2_INTER_REDUCE_TUNING value")
    ap.add_argument("--sizes", default="64K")
    ap.add_argument("--pairs", type=int, default=8)
    a = ap.parse_args()
    if not a.mpi:
        raise SystemExit("name the MVAPICH2 prefix: --mpi or COLLTUNE_MVAPICH2_PREFIX")
    mpi = m2.find_mvapich2(a.mpi)
    sizes = parse_sizes(a.sizes)
    cat = m2.catalog(["reduce"])
    alg_id = next(i for i, v in cat.value["reduce"].items() if v == a.algorithm)
    forced = m2.forcing_env(cat, "reduce", alg_id)
    ratios: dict[tuple[int, str], list[float]] = {(s, m): [] for s in sizes for m in MODES}
    ran: dict[str, set[int | None]] = {"default": set(), "forced": set()}
    for i in range(a.pairs):
        order = [("default", {}), ("forced", forced)]
        got = dict((name, launch(mpi, a.np, sizes, env))
                   for name, env in (order if i % 2 == 0 else order[::-1]))
        for s in sizes:
            for m in MODES:
                ratios[(s, m)].append(got["default"][s][0][m] / got["forced"][s][0][m])
            for name in ran:
                ran[name].add(got[name][s][1])
    print(f"`python bench/mvapich2_pairs.py --algorithm {a.algorithm} --sizes {a.sizes} "
          f"--pairs {a.pairs} --np {a.np}` on {mpi.describe()}; counters: default ran "
          f"{sorted(ran['default'], key=str)}, forced ran {sorted(ran['forced'], key=str)}\n")
    print("| size | timing | default/forced per pair | geometric mean | pairs forced faster |")
    print("|---|---|---|---|---|")
    for (s, m), rs in ratios.items():
        gm = math.exp(statistics.fmean(math.log(r) for r in rs))
        print(f"| {s} | {m} | {' '.join(f'{r:.2f}' for r in rs)} | {gm:.2f}x | "
              f"{sum(r > 1 for r in rs)}/{len(rs)} |")


if __name__ == "__main__":
    main()

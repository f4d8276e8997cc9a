"""Does the arrival pattern change which algorithm is fastest? Every coll/tuned algorithm
of a collective, timed with the ranks entering together (isolated: after a barrier) and
under a replayed arrival pattern (one rank late by a set delay before each call, each
rank's time from its own entry: the kernel's `arrival` plan rows), in the same launch,
alternating launches. Prints, per size, each algorithm's median in both and the fastest of
each (markdown).

    python bench/arrival_bench.py --mpi /usr --coll allreduce --np 4 --late 3 \\
        --delay-us 100 --sizes 8,64K,1M --launches 3
"""

from __future__ import annotations

import argparse
import statistics
from collections import defaultdict

from colltune.backends.openmpi.install import (
    find_openmpi,
    forcing_vars,
    launch_command,
    launch_env,
    read_catalog,
)
from colltune.core.space import parse_sizes
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.slots import place


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpi", default="/usr")
    ap.add_argument("--coll", default="allreduce")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--late", type=int, default=3, help="the late rank")
    ap.add_argument("--delay-us", type=float, default=100.0)
    ap.add_argument("--sizes", default="8,64K,1M")
    ap.add_argument("--launches", type=int, default=3)
    a = ap.parse_args()
    mpi = find_openmpi(a.mpi)
    cat = read_catalog(mpi)
    algs = sorted(i for i in cat.algorithms.get(a.coll, {}) if i > 0)
    sizes = parse_sizes(a.sizes)
    row = tuple(a.delay_us * 1e-6 if r == a.late else 0.0 for r in range(a.np))
    configs = [KernelConfig(alg, {k: int(v) for k, v in forcing_vars(
        a.coll, alg, 0, 0, 0, cat).items()}) for alg in algs]
    placement = place(a.np)
    exe = build_kernel(mpi)
    got: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    spread: list[float] = []
    for i in range(a.launches):
        for how in (("together", "pattern") if i % 2 == 0 else ("pattern", "together")):
            reps = Repetitions(min_reps=15, max_reps=200, point_time=0.1, seed=i + 1,
                               arrival=(row,) if how == "pattern" else ())
            plan = KernelPlan(a.coll, configs, [(c.cid, s) for c in configs for s in sizes],
                              reps)
            out = run_kernel(launch_command(mpi, placement), exe, plan, launch_env())
            for r in out.results:
                if r.status == "ok" and r.median is not None:
                    got[(how, r.cid, r.size)].append(r.median)
                    spread += r.arrival_spread
    print(f"{a.coll}, {a.np} ranks on this machine, rank {a.late} late by "
          f"{a.delay_us:g} us (replayed spread, median: "
          f"{statistics.median(spread) * 1e6:.1f} us), {a.launches} launches of each")
    print("| size | algorithm | together us | pattern us |")
    print("|---|---|---|---|")
    for s in sizes:
        best = {}
        for how in ("together", "pattern"):
            meds = {c: statistics.median(got[(how, c, s)]) for c in algs if got[(how, c, s)]}
            best[how] = min(meds, key=lambda c: meds[c]) if meds else None
        for c in algs:
            t, p = got[("together", c, s)], got[("pattern", c, s)]
            if not (t and p):
                print(f"| {s} | {cat.algorithms[a.coll][c]} | - | - |")
                continue
            marks = {how: " **best**" if best[how] == c else "" for how in best}
            print(f"| {s} | {cat.algorithms[a.coll][c]} | "
                  f"{statistics.median(t) * 1e6:.1f}{marks['together']} | "
                  f"{statistics.median(p) * 1e6:.1f}{marks['pattern']} |")


if __name__ == "__main__":
    main()

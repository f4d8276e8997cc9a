"""UCC on one node, by colltune's kernel: UCC's own choice against each tl/ucp algorithm
forced (the oracle: the fastest per size), a string written from the oracle's choices
(rules/ucc_tune.render), and coll/tuned's default (UCC off), per collective and size.

Needs an Open MPI 5.0 built with UCC (docs/ucc.md; never committed):

    .venv/bin/python bench/ucc_bench.py --mpi $HOME/ompi5ucc --np 4 --rounds 3

Every arm is one launch measuring every size; the arms alternate in a new order each round
(the first launch of a round is not always the same arm), and each arm's time at a size is
the median over rounds of its launches' medians. Reported as ratios to UCC's own choice,
measured in the same run. The string is written only for collectives whose UCC message size
is one rank's buffer (bcast, allreduce, reduce): for allgather and alltoall UCC counts the
whole receive buffer, not yet proven here (docs/ucc.md)."""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from colltune.backends.openmpi.install import find_openmpi, launch_command, launch_env
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.rules import ucc_tune as u
from colltune.slots import place

UCC_ON = {"OMPI_MCA_coll_ucc_enable": "1", "OMPI_MCA_coll_ucc_priority": "100"}
UCC_OFF = {"OMPI_MCA_coll_ucc_enable": "0"}
# sliding_window is for DPUs and onesided needs registered buffers: UCC refuses them for a
# plain host buffer, so they are not among the choices here
SKIP = {"sliding_window", "onesided"}
PER_RANK = ("bcast", "allreduce", "reduce")  # UCC's message size = colltune's size


def arms_for(coll: str) -> dict[str, dict[str, str]]:
    arms = {"ucc": dict(UCC_ON), "tuned": dict(UCC_OFF)}
    for alg in u.TL_UCP_ALGS[coll]:
        if alg not in SKIP:
            arms[f"@{alg}"] = {**UCC_ON, "UCC_TL_UCP_TUNE": f"{coll}:@{alg}"}
    return arms


def measure(args: argparse.Namespace, coll: str, arms: dict[str, dict[str, str]],
            sizes: list[int]) -> dict[str, dict[int, float]]:
    mpi = find_openmpi(args.mpi)
    exe = build_kernel(mpi)
    placement = place(args.np)
    plan = KernelPlan(coll, [KernelConfig(0)], [(0, s) for s in sizes],
                      Repetitions(warmup=2, min_reps=10, max_reps=40, point_time=0.2))
    got: dict[str, dict[int, list[float]]] = {a: {s: [] for s in sizes} for a in arms}
    rng = random.Random(args.seed)
    for _ in range(args.rounds):
        order = list(arms)
        rng.shuffle(order)
        for arm in order:
            out = run_kernel(launch_command(mpi, placement), exe, plan,
                             launch_env(arms[arm]), runs_on=mpi)
            for r in out.results:
                if r.status == "ok" and r.median:
                    got[arm][r.size].append(r.median)
    return {a: {s: statistics.median(v) for s, v in per.items() if v}
            for a, per in got.items()}


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mpi", required=True, help="Open MPI 5 prefix built --with-ucc")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--collectives", default="bcast,allreduce,reduce,allgather,alltoall")
    ap.add_argument("--sizes", default="8,64,512,4096,32768,262144,1048576")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print("| collective | oracle / UCC | string / UCC | coll/tuned / UCC | oracle per size |")
    print("|---|---|---|---|---|")
    for coll in args.collectives.split(","):
        t = measure(args, coll, arms_for(coll), sizes)
        forced = [a for a in t if a.startswith("@")]
        best = {s: min((a for a in forced if s in t[a]), key=lambda a: t[a][s])
                for s in sizes if any(s in t[a] for a in forced)}
        ok = [s for s in best if s in t["ucc"]]
        oracle = geomean([t["ucc"][s] / t[best[s]][s] for s in ok])
        tuned = geomean([t["ucc"][s] / t["tuned"][s] for s in ok if s in t["tuned"]])
        said = "-"
        if coll in PER_RANK:
            starts: list[tuple[int, str]] = []
            for s in sorted(best):
                if not starts or starts[-1][1] != best[s][1:]:
                    starts.append((s, best[s][1:]))
            tune = u.render({coll: starts})
            t2 = measure(args, coll, {"ucc": dict(UCC_ON),
                                      "string": {**UCC_ON, "UCC_TL_UCP_TUNE": tune}}, sizes)
            said = f"{geomean([t2['ucc'][s] / t2['string'][s] for s in ok]):.2f}x ({tune})"
        print(f"| {coll} | {oracle:.2f}x | {said} | {tuned:.2f}x | "
              + ", ".join(f"{s}: {best[s][1:]}" for s in sorted(best)) + " |", flush=True)


if __name__ == "__main__":
    main()

"""UCC on one node, by colltune's kernel: UCC's own choice against each tl/ucp algorithm
forced (the oracle: the fastest per size), a string written from the oracle's choices
(rules/ucc_tune.render), and coll/tuned's default (UCC off), per collective and size.

Needs an Open MPI 5.0 built with UCC (docs/ucc.md; never committed):

    .venv/bin/python bench/ucc_bench.py --mpi $HOME/ompi5ucc --np 4 --rounds 3

Across the test cluster's nodes (root; tests/testcluster.py), 2 nodes x 2 ranks, every port
shaped as --link says, UCX over TCP alone on the nodes' ports (the only transport whose
traffic crosses the link there: docs/ucc.md, "Across the test cluster's nodes"):

    .venv/bin/python bench/ucc_bench.py --mpi $HOME/ompi5ucc --np 4 --nodes 2 --link 1gbit

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
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from colltune.backends.openmpi import ucc
from colltune.backends.openmpi.install import find_openmpi, launch_command, launch_env
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.launchers import Launch
from colltune.rules import ucc_tune as u
from colltune.slots import place

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from testcluster import LINKS, Cluster, make  # noqa: E402

UCC_ON = {"OMPI_MCA_coll_ucc_enable": "1", "OMPI_MCA_coll_ucc_priority": "100"}
UCC_OFF = {"OMPI_MCA_coll_ucc_enable": "0"}
# sliding_window is for DPUs and onesided needs registered buffers: UCC refuses them for a
# plain host buffer, so they are not among the choices here
SKIP = {"sliding_window", "onesided"}
PER_RANK = ("bcast", "allreduce", "reduce")  # UCC's message size = colltune's size


def arms_for(coll: str, np: int = 0) -> dict[str, dict[str, str]]:
    """UCC's own choice, coll/tuned's (UCC off), and each tl/ucp algorithm forced; with
    `np`, also each radix up to it of the algorithms whose radix UCC takes per range (the
    oracle over everything the tune measures)."""
    arms = {"ucc": dict(UCC_ON), "tuned": dict(UCC_OFF)}
    for alg in u.TL_UCP_ALGS[coll]:
        if alg not in SKIP:
            arms[f"@{alg}"] = {**UCC_ON, "UCC_TL_UCP_TUNE": f"{coll}:@{alg}"}
            var = u.RADIX_VARS.get((coll, alg))
            for k in (k for k in ucc.RADICES if var and k <= np):
                arms[f"@{alg}/r{k}"] = {**arms[f"@{alg}"], var: str(k)}
    return arms


def across(cluster: Cluster, cmd: list[str], arm: dict[str, str]
           ) -> tuple[list[str], dict[str, str]]:
    """`cmd` (mpirun ...) started on node 1 over the cluster, and its environment: the
    launch agent (on the command line: Open MPI 5's launcher does not read it from
    OMPI_MCA_*), the arm's settings and UCX over TCP on the nodes' own ports; mpirun passes
    the OMPI_* variables to every rank, the others by name (-x)."""
    ucx = {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": cluster.net_devices}
    env = {**cluster.env(), **arm, **ucx}
    named = [a for k in {**arm, **ucx} if not k.startswith("OMPI_") for a in ("-x", k)]
    agent = ["--mca", "plm_rsh_agent", cluster.agent]
    return [*cluster.enter("node1"), cmd[0], *agent, *named, *cmd[1:]], env


def measure(args: argparse.Namespace, coll: str, arms: dict[str, dict[str, str]],
            sizes: list[int]) -> dict[str, dict[int, float]]:
    mpi = find_openmpi(args.mpi)
    exe = build_kernel(mpi)
    cluster: Cluster | None = args.cluster
    placement = (place(args.np, cluster.hostfile(args.np // cluster.nodes), {},
                       Launch(nodes=cluster.nodes, ppn=args.np // cluster.nodes))
                 if cluster else place(args.np))
    plan = KernelPlan(coll, [KernelConfig(0)], [(0, s) for s in sizes],
                      Repetitions(warmup=2, min_reps=10, max_reps=40, point_time=0.2))
    got: dict[str, dict[int, list[float]]] = {a: {s: [] for s in sizes} for a in arms}
    rng = random.Random(args.seed)
    for _ in range(args.rounds):
        order = list(arms)
        rng.shuffle(order)
        for arm in order:
            cmd, env = launch_command(mpi, placement), launch_env(arms[arm])
            if cluster:
                cmd, env = across(cluster, cmd, arms[arm])
            out = run_kernel(cmd, exe, plan, env, runs_on=mpi)
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
    cluster_args(ap)
    on_cluster(ap.parse_args(), run)


def cluster_args(ap: argparse.ArgumentParser) -> None:
    """--nodes and --link: the test cluster the arms run across (ucc_tune_bench.py too)."""
    ap.add_argument("--nodes", type=int, default=1,
                    help="nodes of the test cluster (root): 2 runs --np over 2 nodes")
    ap.add_argument("--link", default="1gbit", choices=sorted(LINKS),
                    help="how the cluster's ports are shaped (with --nodes 2)")


def on_cluster(args: argparse.Namespace, run: Callable[[argparse.Namespace], None]) -> None:
    """`run(args)` with args.cluster the test cluster --nodes asks for (None: one node),
    its ports shaped by --link, removed after."""
    args.cluster = None
    if args.nodes > 1:
        args.cluster = make(args.nodes, slurm=False)
        args.cluster.shape(LINKS[args.link])
    try:
        run(args)
    finally:
        if args.cluster:
            args.cluster.down()


def run(args: argparse.Namespace) -> None:
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

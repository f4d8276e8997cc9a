"""Why a collective is slower on a congested link (issue 85): on the test cluster's nodes,
every port shaped by a link profile (tests/testcluster.py's LINKS), OSU runs one size in
alternating launches of the library's default and each algorithm named, and beside OSU's
average latency (and its minimum and maximum over the ranks, `-f`) each launch's TCP
retransmitted segments and retransmission timeouts, summed over the nodes (their
/proc/net counters: a node is a network namespace, so its counters are its own). As root:

    .venv/bin/python bench/congestion_probe.py --osu OSU_DIR --coll alltoall \\
        --layout 2x2 --size 1048576 --algorithms 1,2,4 --rounds 3
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from network_bench import Layout, launcher  # noqa: E402

from testcluster import LINKS, make  # noqa: E402

COUNTERS = ("RetransSegs", "TCPTimeouts")  # what Cluster.tcp sums


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--osu", type=Path, required=True, help="OSU built for Open MPI 4.1.4")
    ap.add_argument("--coll", default="alltoall")
    ap.add_argument("--layout", default="2x2")
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--algorithms", default="1,2,4", help="coll/tuned's ids, beside 0")
    ap.add_argument("--link", default="1gbit", choices=sorted(LINKS))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=20)
    args = ap.parse_args()
    lay = Layout(*map(int, args.layout.split("x")))
    c = make(lay.nodes, slurm=False)
    try:
        c.shape(LINKS[args.link])
        exe = c.home / f"osu_{args.coll}"  # on the shared home: each node has its own /tmp
        shutil.copy2(next(iter(sorted(args.osu.rglob(f"osu_{args.coll}")))), exe)
        arms = {"default": {"OMPI_MCA_coll_tuned_use_dynamic_rules": "0"}}
        for alg in args.algorithms.split(","):
            arms[alg] = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                         f"OMPI_MCA_coll_tuned_{args.coll}_algorithm": alg}
        print("round arm avg_us rank_min_us rank_max_us " + " ".join(COUNTERS))
        for rnd in range(args.rounds):
            for arm, env in arms.items():
                before = c.tcp(c.names[:lay.nodes])
                r = c.on("node1", [*launcher(c, lay), str(exe), "-m",
                                   f"{args.size}:{args.size}", "-i", str(args.iters),
                                   "-x", "2", "-f"], env=c.env(**env), timeout=1800)
                after = c.tcp(c.names[:lay.nodes])
                if r.returncode != 0:
                    raise SystemExit(f"{arm}: {r.stderr[-2000:]}")
                row = next(ln.split() for ln in r.stdout.splitlines()
                           if ln.split()[:1] == [str(args.size)])
                print(rnd, arm, *row[1:4], *(after[k] - before[k] for k in COUNTERS),
                      flush=True)
    finally:
        c.down()


if __name__ == "__main__":
    main()

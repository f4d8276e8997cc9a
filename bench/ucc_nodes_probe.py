"""Whether UCC's traffic crosses the test cluster's links (issue 88, item 4): on 2 nodes x
2 ranks, every port shaped like Gigabit Ethernet, a 1 MiB MPI_Bcast handed to UCC (Open MPI
5 built --with-ucc, coll_ucc on) under each UCX transport setting named below; per arm, the
time of a call and the bytes node 2's port received. A 1 Gb/s link needs about 8 ms for
1 MiB: an arm much faster than that, with little traffic, joined the two "nodes" by shared
memory (they are namespaces of one machine). As root:

    .venv/bin/python bench/ucc_nodes_probe.py --mpi $HOME/ompi5ucc --rounds 3
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from testcluster import LINKS, make  # noqa: E402

CALLS = 15
# a bcast timed over CALLS calls after a barrier; rank 0 prints ms per call
PROGRAM = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int n = atoi(argv[1]), rank;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    char *buf = calloc((size_t)n, 1);
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    for (int i = 0; i < CALLS; i++) MPI_Bcast(buf, n, MPI_CHAR, 0, MPI_COMM_WORLD);
    t = MPI_Wtime() - t;
    if (rank == 0) printf("ms %.3f\n", 1e3 * t / CALLS);
    free(buf);
    MPI_Finalize();
    return 0;
}
"""


def arms(devices: str) -> dict[str, list[str]]:
    """UCX's transport settings compared: its default, its default without the two
    same-machine paths a process may use across mount namespaces, and TCP alone on the
    nodes' own ports."""
    return {
        "UCX default": [],
        "no cma, no /proc links": ["-x", "UCX_TLS=^cma", "-x", "UCX_POSIX_USE_PROC_LINK=n"],
        "tcp,self on the ports": ["-x", "UCX_TLS=tcp,self", "-x",
                                  f"UCX_NET_DEVICES={devices}"],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mpi", required=True, help="Open MPI 5 prefix built --with-ucc")
    ap.add_argument("--size", type=int, default=1 << 20)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--link", default="1gbit", choices=sorted(LINKS))
    args = ap.parse_args()
    mpi = Path(args.mpi)
    work = Path(tempfile.mkdtemp(prefix="ucc-nodes-", dir=Path.home()))
    src, exe = work / "bcast.c", work / "bcast"
    src.write_text(PROGRAM.replace("CALLS", str(CALLS)))
    subprocess.run([str(mpi / "bin" / "mpicc"), "-O2", str(src), "-o", str(exe)], check=True)
    cluster = make(2, slurm=False)
    try:
        cluster.shape(LINKS[args.link])
        devices = cluster.net_devices
        launch = [str(mpi / "bin" / "mpirun"), "-np", "4", "--hostfile", cluster.hostfile(2),
                  "--map-by", "ppr:2:node", "--mca", "plm_rsh_agent", cluster.agent,
                  "--mca", "coll_ucc_enable", "1", "--mca", "coll_ucc_priority", "100"]
        got: dict[str, list[tuple[float, int]]] = {a: [] for a in arms(devices)}
        for _ in range(args.rounds):
            for name, extra in arms(devices).items():
                rx = cluster.rx_bytes("node2")
                r = cluster.on("node1", [*launch, *extra, str(exe), str(args.size)],
                               timeout=120, cwd=work)
                m = re.search(r"^ms ([0-9.]+)$", r.stdout, re.M)
                if r.returncode != 0 or m is None:
                    sys.exit(f"{name}: exit {r.returncode}\n{r.stderr[-2000:]}")
                got[name].append((float(m.group(1)), cluster.rx_bytes("node2") - rx))
        print(f"| UCX transports | ms per {args.size} B bcast (median of {args.rounds}) "
              f"| bytes node 2 received per call |")
        print("|---|---|---|")
        for name, runs in got.items():
            ms = statistics.median(t for t, _ in runs)
            per_call = statistics.median(b for _, b in runs) / CALLS
            print(f"| {name} | {ms:.2f} | {per_call:,.0f} |")
    finally:
        cluster.down()


if __name__ == "__main__":
    main()

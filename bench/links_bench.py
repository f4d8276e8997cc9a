"""The test cluster's links as each profile shapes them (issue 85, item 1; root): Open MPI
4.1.4's point-to-point between node1 and node2 (bench/pingpong.c over the tcp BTL, one
rank a node), unshaped veth against tests/testcluster.py's LINKS (1gbit, 10gbit), each
launched `--runs` times. Prints the one-way time of 8 B and the bandwidth of 4 MiB
messages per run.

    .venv/bin/python bench/links_bench.py --runs 3
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from testcluster import LINKS, make  # noqa: E402

ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    c = make(2, slurm=False)
    try:
        exe = c.home / "pingpong"
        subprocess.run(["mpicc.openmpi", "-O2", "-o", str(exe), str(HERE / "pingpong.c")],
                       check=True)
        for name in (None, *LINKS):
            c.shape(LINKS[name] if name else None)
            for _ in range(args.runs):
                r = c.on("node1", ["mpirun.openmpi", "-np", "2", "--hostfile", c.hostfile(1),
                                   "--mca", "plm_rsh_agent", c.agent, "--mca", "btl",
                                   "tcp,self", str(exe)], env=c.env(**ROOT_ENV))
                said = " | ".join(r.stdout.split("\n")).strip(" |")
                print(f"{name or 'veth'}: {said or r.stderr[-300:]}", flush=True)
    finally:
        c.down()


if __name__ == "__main__":
    main()

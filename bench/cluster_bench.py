"""colltune on the test cluster (tests/testcluster.py: 2 nodes as network namespaces, a
private /tmp each, a real Slurm): the time of `tune reduce --np 4` on 2 nodes x 2 ranks
against 1 node x 4 ranks, `tune profile`'s time and overhead across nodes, and the time
from `sbatch` to the rules file, over memory-speed veth or every port shaped by a link
profile (testcluster.LINKS). Run as root:

    python bench/cluster_bench.py [REPEATS] [--link 1gbit]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from clirun import TUNE  # noqa: E402

import testcluster  # noqa: E402

MELT = "/usr/share/lammps/examples/melt/in.melt"


def timed(c: testcluster.Cluster, argv: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.monotonic()
    r = c.on("node1", argv, env=env, cwd=cwd, timeout=1200)
    took = time.monotonic() - start
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed: {r.stderr[-2000:]}")
    return took


def main(repeats: int, link: str | None) -> None:
    c = testcluster.make(2)
    if link:
        c.shape(testcluster.LINKS[link])  # each node's port, both ways
    tune = [*TUNE]
    env = c.env(PYTHONPATH=str(REPO / "src"))
    rows: dict[str, list[float]] = {}
    try:
        for i in range(repeats):
            for name, where in (("2 nodes x 2 ranks", ["--hostfile", c.hostfile(2), "--ppn",
                                                       "2", "--launcher-args",
                                                       f"--mca plm_rsh_agent {c.agent}"]),
                                ("1 node x 4 ranks", [])):
                work = c.home / f"tune-{i}-{name[0]}"
                work.mkdir()
                rows.setdefault(f"tune reduce --np 4, {name}", []).append(timed(
                    c, [*tune, "reduce", "--np", "4", "--mpi", "/usr", *where, "--db",
                        "db.sqlite", "--out", "r.conf", "--quiet"], work, env))
            mpirun = ["mpirun", "-np", "4", "--hostfile", c.hostfile(2), "--map-by",
                      "ppr:2:node", "--mca", "plm_rsh_agent", c.agent, "lmp", "-in", MELT,
                      "-log", "none", "-screen", "none"]
            work = c.home / f"prof-{i}"
            work.mkdir()
            rows.setdefault("LAMMPS melt, 2 nodes x 2 ranks, mpirun", []).append(
                timed(c, mpirun, work, env))
            rows.setdefault("the same under tune profile", []).append(
                timed(c, [*tune, "profile", "-o", "p.json", "--mpi", "/usr", "--", *mpirun],
                      work, env))
            work = c.home / f"sbatch-{i}"
            work.mkdir()
            timed(c, [*tune, "reduce", "--np", "4", "--nodes", "2", "--ppn", "2", "--mpi",
                      "/usr", "--db", "db.sqlite", "--out", "b.conf", "--quiet",
                      "--slurm-script", "job.sh"], work, env)
            rows.setdefault("sbatch --wait job.sh to the rules file (tune reduce, 2 x 2)",
                            []).append(timed(c, ["sbatch", "--wait", "job.sh"], work, env))
            if not (work / "b.conf").is_file():
                raise SystemExit("the batch job wrote no rules file")
    finally:
        c.down()
    print(f"| what ({repeats} runs) | median s | min s | max s |\n|---|---|---|---|")
    for what, ts in rows.items():
        print(f"| {what} | {statistics.median(ts):.1f} | {min(ts):.1f} | {max(ts):.1f} |")


if __name__ == "__main__":
    if os.geteuid() != 0:
        raise SystemExit("run as root: the test cluster needs network namespaces")
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repeats", type=int, nargs="?", default=3)
    ap.add_argument("--link", choices=sorted(testcluster.LINKS), default=None,
                    help="shape every node's port so (default: memory-speed veth)")
    args = ap.parse_args()
    main(args.repeats, args.link)

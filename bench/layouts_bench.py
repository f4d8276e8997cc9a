"""Issue 62's numbers: on the test cluster (tests/testcluster.py: 2 nodes as network
namespaces, TCP between them, shared memory inside each), `tune COLL --layouts 2x2,1x4`
with Open MPI 4.1 (one classic file per layout), then in each layout `tune compare` of
its own file against the other layout's file and the library's default, in alternating
fresh launches of that layout. Prints the choices per layout and what running the other
layout's file costs, as ratios measured in the same run.

Run as root: python bench/layouts_bench.py [--collective reduce] [--sizes 8,1K,16K,64K,256K]
[--rounds 8]"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from clirun import TUNE  # noqa: E402

import testcluster  # noqa: E402

LAYOUTS = {"2x2": (2, 2), "1x4": (1, 4)}


def run(c: testcluster.Cluster, argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    r = c.on("node1", argv, env=env, cwd=cwd, timeout=3600)
    if r.returncode not in (0, 5):  # 5: compare could not decide everything
        raise SystemExit(f"{' '.join(argv)} failed: {r.stderr[-3000:]}")
    return r.stderr


def choices(summary: dict[str, object], coll: str) -> dict[str, str]:
    """size -> what the layout's file runs there (and its verdict)."""
    out = {}
    for row in summary["collectives"][coll]["4"]:  # type: ignore[index]
        c = row["chosen"]
        name = c["name"] if c["algorithm"] else "default"
        out[str(row["size"])] = f"{name}{'' if not c['params'] else c['params']} " \
                                f"({row['verdict']})"
    return out


def main(coll: str, sizes: str, rounds: int) -> None:
    c = testcluster.make(2)
    env = c.env(PYTHONPATH=str(REPO / "src"))
    work = c.home / "layouts"
    work.mkdir()
    where = ["--hostfile", c.hostfile(4), "--launcher-args",
             f"--mca plm_rsh_agent {c.agent} --bind-to none"]
    try:
        run(c, [*TUNE, coll, "--layouts", ",".join(LAYOUTS), "--mpi", "/usr", *where,
                "--sizes", sizes, "--db", "db.sqlite", "--out", "r.conf", "--summary-json",
                "s.json", "--quiet"], work, env)
        summary = json.loads((work / "s.json").read_text())["layouts"]
        picked = {name: choices(summary[name], coll) for name in LAYOUTS}
        print("| size | 2x2 file runs | 1x4 file runs |\n|---|---|---|")
        for size in picked["2x2"]:
            print(f"| {size} | {picked['2x2'][size]} | {picked['1x4'].get(size, '-')} |")
        for name, (nodes, ppn) in LAYOUTS.items():
            other = next(n for n in LAYOUTS if n != name)
            run(c, [*TUNE, "compare", "--lib", f"openmpi:/usr=r.{name}.conf", "--lib",
                    f"openmpi:/usr=r.{other}.conf", "--lib", "openmpi:/usr", "--collective",
                    coll, "--sizes", sizes, "--np", "4", "--nodes", str(nodes), "--ppn",
                    str(ppn), *where, "--rounds", str(rounds), "--json", f"c.{name}.json",
                    "--quiet"], work, env)
            doc = json.loads((work / f"c.{name}.json").read_text())
            print(f"\nin layout {name} ({rounds} rounds): time against its own file "
                  f"(r.{name}.conf)\n\n| size | r.{other}.conf | library default |\n"
                  "|---|---|---|")
            arms = doc["arms"][1:]
            for size in arms[0]["cells"]:
                cells = [a["cells"][size] for a in arms]
                print(f"| {size} | " + " | ".join(
                    f"{x['ratio']:.2f}x [{x['interval'][0]:.2f}, {x['interval'][1]:.2f}] "
                    f"{x['verdict']}" for x in cells) + " |")
            print("\noverall: " + "; ".join(f"{a['arm']}: {a['ratio']:.2f}x {a['verdict']}"
                                             for a in arms))
    finally:
        c.down()


if __name__ == "__main__":
    if os.geteuid() != 0:
        raise SystemExit("run as root: the test cluster needs network namespaces")
    ap = argparse.ArgumentParser()
    ap.add_argument("--collective", default="reduce")
    ap.add_argument("--sizes", default="8,1K,16K,64K,256K")
    ap.add_argument("--rounds", type=int, default=8)
    a = ap.parse_args()
    main(a.collective, a.sizes, a.rounds)

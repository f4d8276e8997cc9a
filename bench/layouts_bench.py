"""Issue 62's numbers: on the test cluster (tests/testcluster.py: 2 nodes as network
namespaces, TCP between them, shared memory inside each), `tune COLL --layouts 2x2,1x4`
with Open MPI 4.1 (one classic file per layout), then in each layout `tune compare` of
its own file against the other layout's file and the library's default, in alternating
fresh launches of that layout. Prints the choices per layout and what running the other
layout's file costs, as ratios measured in the same run.

Run as root: python bench/layouts_bench.py [--layouts 2x2,1x4] [--collective reduce]
[--sizes 8,1K,16K,64K,256K] [--rounds 8] [--link 1gbit] (--link: every node's port shaped by
that profile, testcluster.LINKS; unshaped veth without it)"""

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


def run(c: testcluster.Cluster, argv: list[str], cwd: Path, env: dict[str, str]) -> str:
    r = c.on("node1", argv, env=env, cwd=cwd, timeout=3600)
    if r.returncode not in (0, 5):  # 5: compare could not decide everything
        raise SystemExit(f"{' '.join(argv)} failed: {r.stderr[-3000:]}")
    return r.stderr


def label(c: dict[str, object] | None) -> str:
    if not c or not c["algorithm"]:
        return "default"
    return f"{c['name']}" + "".join(f" {k}={v}" for k, v in c["params"].items())  # type: ignore[union-attr]


def choices(summary: dict[str, object], coll: str, np: int) -> dict[str, str]:
    """size -> what the layout's file runs there and its verdict, and the sweep's fastest
    with its lead over the default in the sweep."""
    out = {}
    for row in summary["collectives"][coll][str(np)]:  # type: ignore[index]
        lead = row["default_median"] / row["best_median"] if row.get("best_median") else 1.0
        out[str(row["size"])] = (f"{label(row['chosen'])} ({row['verdict']}); sweep: "
                                 f"{label(row['best'])} {lead:.2f}x")
    return out


def main(layouts: dict[str, tuple[int, int]], coll: str, sizes: str, rounds: int,
         link: str | None) -> None:
    c = testcluster.make(2)
    env = c.env(PYTHONPATH=str(REPO / "src"))
    work = c.home / "layouts"
    work.mkdir()
    where = ["--hostfile", c.hostfile(4), "--launcher-args",
             f"--mca plm_rsh_agent {c.agent} --bind-to none"]
    try:
        if link:
            c.shape(testcluster.LINKS[link])
        run(c, [*TUNE, coll, "--layouts", ",".join(layouts), "--mpi", "/usr", *where,
                "--sizes", sizes, "--db", "db.sqlite", "--out", "r.conf", "--summary-json",
                "s.json", "--quiet"], work, env)
        summary = json.loads((work / "s.json").read_text())["layouts"]
        picked = {name: choices(summary[name], coll, n * p) for name, (n, p) in layouts.items()}
        first, second = layouts
        print(f"| size | {first} file runs | {second} file runs |\n|---|---|---|")
        for size in picked[first]:
            print(f"| {size} | {picked[first][size]} | {picked[second].get(size, '-')} |")
        for name, (nodes, ppn) in layouts.items():
            other = next(n for n in layouts if n != name)
            run(c, [*TUNE, "compare", "--lib", f"openmpi:/usr=r.{name}.conf", "--lib",
                    f"openmpi:/usr=r.{other}.conf", "--lib", "openmpi:/usr", "--collective",
                    coll, "--sizes", sizes, "--np", str(nodes * ppn), "--nodes", str(nodes),
                    "--ppn", str(ppn), *where, "--rounds", str(rounds), "--json", f"c.{name}.json",
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
    ap.add_argument("--layouts", default="2x2,1x4", help="two layouts, NODESxPPN")
    ap.add_argument("--collective", default="reduce")
    ap.add_argument("--sizes", default="8,1K,16K,64K,256K")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--link", choices=sorted(testcluster.LINKS),
                    help="shape every node's port so (default: memory-speed veth)")
    a = ap.parse_args()
    pairs = [w.split("x") for w in a.layouts.split(",")]
    main({w: (int(n), int(p)) for w, (n, p) in zip(a.layouts.split(","), pairs, strict=True)},
         a.collective, a.sizes, a.rounds, a.link)

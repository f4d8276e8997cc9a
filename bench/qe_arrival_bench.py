"""The application loop on Quantum ESPRESSO's pw.x (tests/qe_app.py) with the kernel
replaying pw.x's own arrival pattern: per layout of 4 ranks on the test cluster
(tests/testcluster.py, run as root), `tune profile`, `tune app --arrival both` (each group
whose ranks entered far apart measured replaying the pattern and with the ranks entering
together; timed), then `tune verify --app` three times on the application's own runs: the
replayed file against the default, the together file against the default, and the two
files against each other (--baseline). Prints markdown rows.

    python bench/qe_arrival_bench.py [--layouts 1x4,2x2] [--pairs 8] [--max-rounds 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from gromacs_loop_bench import tune_runner  # noqa: E402

import testcluster  # noqa: E402
from qe_app import prepare  # noqa: E402


def _row(name: str, what: str, v: dict) -> str:  # type: ignore[type-arg]
    x = v["measures"]["wall"]
    lo, hi = x["interval"]
    return (f"| {name} | {what} | {v['pairs']} | {statistics.median(x['default_s']):.3f} s | "
            f"{statistics.median(x['tuned_s']):.3f} s | {x['ratio']:.3f} | {lo:.3f}-{hi:.3f} "
            f"| {x['could_see'] or float('inf'):.2f}x | {x['verdict']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layouts", default="1x4,2x2")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--max-rounds", type=int, default=16)
    a = ap.parse_args()
    c = testcluster.make(2, slurm=False)
    env = c.env(PYTHONPATH=str(REPO / "src"))
    layouts = {
        "2x2": (["--hostfile", c.hostfile(2), "--launcher-args",
                 f"--mca plm_rsh_agent {c.agent}"],
                ["--hostfile", c.hostfile(2), "--map-by", "ppr:2:node", "--mca",
                 "plm_rsh_agent", c.agent]),
        "1x4": (["--oversubscribe"], ["--oversubscribe"])}
    rows = []
    try:
        for name in a.layouts.split(","):
            where, launch = layouts[name]
            work = c.home / f"qe-arrival-{name}"
            inp = prepare(work)
            cmd = ["mpirun", "-np", "4", *launch, "pw.x", "-in", inp.name]

            run = tune_runner(c, env, work, 5000)

            run("profile", "-o", "p.json", "--mpi", "/usr", "--", *cmd)
            t_app = run("app", "p.json", "--mpi", "/usr", "--db", "db.sqlite", "--out",
                        "r.conf", "--arrival", "both", "--json", "app.json", "--quiet", *where)
            res = json.loads((work / "app.json").read_text())
            print(f"\n{name}: tune app --arrival both {t_app:.0f} s")
            for g in res["groups"]:
                rep = g.get("replayed_spread_s")
                print(f"  {g['collective']}@{g['comm_size']} {g.get('layout')}: {g['status']}; "
                      f"{g['arrival']}" + (f"; replayed {rep * 1e6:.0f} us against "
                                           f"{g['profiled_spread_s'] * 1e6:.0f} us"
                                           if rep else ""))
            for e in res["entries"]:
                if e["together"] is not None and e["together"] != e["chosen"]:
                    print(f"  differs: {e['collective']}@{e['comm_size']} {e['size']} B: "
                          f"replayed {e['chosen']}, together {e['together']}")
            print(f"  expected saving (replayed file): {res['expected_saving_s'] * 1e3:.2f} ms "
                  f"of {res['wall_s']:.3f} s")
            judge = ["--mpi", "/usr", "--pairs", str(a.pairs), "--max-rounds",
                     str(a.max_rounds), "--quiet", "--allow-inconclusive"]
            for what, extra, out in (
                    ("replayed vs default", ["--rules", "r.conf"], "v-arrival.json"),
                    ("together vs default", ["--rules", "r.together.conf"], "v-together.json"),
                    ("replayed vs together", ["--rules", "r.conf", "--baseline",
                                              "r.together.conf"], "v-both.json")):
                if not (work / extra[1]).exists():
                    print(f"  {what}: no {extra[1]} (nothing replayed)")
                    continue
                t_v = run("verify", "--app", *extra, *judge, "--json", out, "--", *cmd)
                v = json.loads((work / out).read_text())
                rows.append(_row(name, what, v) + f" {t_v:.0f} s |")
    finally:
        c.down()
    print("\n| layout | files | pairs | first arm (median) | second arm (median) | "
          "second/first | interval | could see | verdict | took |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()

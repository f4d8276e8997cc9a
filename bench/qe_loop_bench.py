"""The application loop on Quantum ESPRESSO's pw.x (tests/qe_app.py) in both layouts of 4
ranks on the test cluster (tests/testcluster.py, run as root): 2 nodes x 2 ranks and 1 node
x 4. Per layout: `tune profile` (share in collectives), `tune app` with its default
settings in the profile's layout (timed), `tune verify --app` judging sequentially. Prints
markdown rows.

    python bench/qe_loop_bench.py [--pairs 8] [--max-rounds 16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from clirun import TUNE  # noqa: E402

import testcluster  # noqa: E402
from qe_app import prepare  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--max-rounds", type=int, default=16)
    a = ap.parse_args()
    c = testcluster.make(2, slurm=False)
    env = c.env(PYTHONPATH=str(REPO / "src"))
    try:
        for name, where, launch in (
                ("2x2", ["--hostfile", c.hostfile(2), "--launcher-args",
                         f"--mca plm_rsh_agent {c.agent}"],
                 ["--hostfile", c.hostfile(2), "--map-by", "ppr:2:node", "--mca",
                  "plm_rsh_agent", c.agent]),
                ("1x4", ["--oversubscribe"], ["--oversubscribe"])):
            work = c.home / f"qe-{name}"
            inp = prepare(work)
            cmd = ["mpirun", "-np", "4", *launch, "pw.x", "-in", inp.name]

            def run(*argv: str, work: Path = work) -> tuple[float, dict[str, object]]:
                t = time.monotonic()
                r = c.on("node1", [*TUNE, *argv], env=env, cwd=work, timeout=3000)
                took = time.monotonic() - t
                if r.returncode not in (0, 1, 5):
                    raise SystemExit(f"tune {argv[0]} failed: {r.stderr[-2000:]}")
                return took, {}

            run("profile", "-o", "p.json", "--mpi", "/usr", "--", *cmd)
            prof = json.loads((work / "p.json").read_text())
            t_app, _ = run("app", "p.json", "--mpi", "/usr", "--db", "db.sqlite", "--out",
                           "r.conf", "--json", "app.json", "--quiet", *where)
            res = json.loads((work / "app.json").read_text())
            t_v, _ = run("verify", "--app", "--rules", "r.conf", "--mpi", "/usr", "--pairs",
                         str(a.pairs), "--max-rounds", str(a.max_rounds), "--json", "v.json",
                         "--quiet", "--", *cmd)
            v = json.loads((work / "v.json").read_text())
            wall, coll = prof["wall_s"]["mean"], prof["collective_s"]["mean"]
            changed = [e for e in res["entries"] if e["speedup"] != 1.0]
            print(f"\n{name}: profiled wall {wall:.3f} s per rank, collectives "
                  f"{coll:.3f} s ({coll / wall:.0%}); tune app {t_app:.0f} s, groups "
                  + ", ".join(f"{g['collective']}@{g['comm_size']} {g.get('layout')}: "
                              f"{g['status']}" for g in res["groups"]))
            print("changed: " + (", ".join(
                f"{e['collective']} {e['size']} B {e['chosen']} {e['speedup']:.2f}x"
                for e in changed) or "nothing") + f"; expected saving "
                f"{res['expected_saving_s'] * 1e3:.2f} ms")
            print(f"verify --app: {t_v:.0f} s, {v['pairs']} pairs, "
                  f"{v['disturbed_pairs']} run again")
            print("| layout | measure | default (median) | rules (median) | rules/default | "
                  "interval | could see | verdict |")
            for m, x in v["measures"].items():
                lo, hi = x["interval"]
                print(f"| {name} | {m} | {statistics.median(x['default_s']):.3f} s | "
                      f"{statistics.median(x['tuned_s']):.3f} s | {x['ratio']:.3f} | "
                      f"{lo:.3f}-{hi:.3f} | {x['could_see'] or float('inf'):.2f}x | "
                      f"{x['verdict']} |")
            ms = v["measures"]
            for arm in ("default_s", "tuned_s"):
                share = [cc / w for cc, w in zip(ms["collectives"][arm], ms["wall"][arm],
                                                 strict=True)]
                print(f"{name} share in collectives, {arm[:-2]}: "
                      f"{statistics.median(share):.1%}")
    finally:
        c.down()


if __name__ == "__main__":
    main()

"""The application loop on Quantum ESPRESSO's pw.x (tests/qe_app.py) in both layouts of 4
ranks on the test cluster (tests/testcluster.py, run as root): 2 nodes x 2 ranks and 1 node
x 4. Per layout: `tune profile` (share in collectives), `tune app` with its default
settings in the profile's layout (timed), `tune verify --app` judging sequentially. Prints
markdown rows.

    python bench/qe_loop_bench.py [--pairs 8] [--max-rounds 16] [--link 1gbit]
        [--layouts 2x2,1x4] [--kpoints "4 4 4"] [--rounds N] [--no-app]
        [--online-runs N]

--link shapes every node's port by a profile of tests/testcluster.py's LINKS (issue 85);
--rounds N first runs pw.x's own oracle (bench/gromacs_loop_bench.py's).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from gromacs_loop_bench import (  # noqa: E402
    Run,
    online_and_verify,
    oracle,
    oracle_rows,
    tune_runner,
    verify_rows,
)

import testcluster  # noqa: E402
from qe_app import prepare  # noqa: E402


def app_and_verify(run: Run, cmd: list[str], where: list[str], a: argparse.Namespace,  # noqa: PLR0913 (the bench's run, as it stands)
                   name: str, work: Path, prof: dict) -> None:  # type: ignore[type-arg]
    """`tune app` in the profile's layout, then `tune verify --app` of its file: what each
    group did and what changed, a row per measure, the share in collectives."""
    t_app = run("app", "p.json", "--mpi", "/usr", "--db", "db.sqlite", "--out",
                "r.conf", "--json", "app.json", "--quiet", *where)
    res = json.loads((work / "app.json").read_text())
    t_v = run("verify", "--app", "--rules", "r.conf", "--mpi", "/usr", "--pairs",
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
    print("\n".join(verify_rows(name, v)))
    ms = v["measures"]
    for arm in ("default_s", "tuned_s"):
        share = [cc / w for cc, w in zip(ms["collectives"][arm], ms["wall"][arm],
                                         strict=True)]
        print(f"{name} share in collectives, {arm[:-2]}: "
              f"{statistics.median(share):.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--max-rounds", type=int, default=16)
    ap.add_argument("--link", default=None, help="a link profile (default: unshaped veth)")
    ap.add_argument("--layouts", default="2x2,1x4")
    ap.add_argument("--kpoints", default="2 2 2",
                    help="pw.x's k-point grid: a finer one makes each run longer (the same "
                         "collectives, more calls), so that a run averages its stalls")
    ap.add_argument("--rounds", type=int, default=0,
                    help="rounds of the oracle: each algorithm of pw.x's costliest "
                         "collective forced, alternating with the default (0: none)")
    ap.add_argument("--no-app", action="store_true",
                    help="no tune app and verify --app (the oracle and online only)")
    ap.add_argument("--online-runs", type=int, default=0,
                    help="runs of tune online on the same command, then verify --app of "
                         "its file (0: none)")
    a = ap.parse_args()
    c = testcluster.make(2, slurm=False)
    env = c.env(PYTHONPATH=str(REPO / "src"))
    try:
        if a.link:
            c.shape(testcluster.LINKS[a.link])
        for name, where, launch in (
                ("2x2", ["--hostfile", c.hostfile(2), "--launcher-args",
                         f"--mca plm_rsh_agent {c.agent}"],
                 ["--hostfile", c.hostfile(2), "--map-by", "ppr:2:node", "--mca",
                  "plm_rsh_agent", c.agent]),
                ("1x4", ["--oversubscribe"], ["--oversubscribe"])):
            if name not in a.layouts.split(","):
                continue
            work = c.home / f"qe-{name}"
            inp = prepare(work, a.kpoints)
            cmd = ["mpirun", "-np", "4", *launch, "pw.x", "-in", inp.name]

            run = tune_runner(c, env, work, 3000)

            run("profile", "-o", "p.json", "--mpi", "/usr", "--", *cmd)
            prof = json.loads((work / "p.json").read_text())
            if a.rounds:  # the application's own oracle for its costliest collective
                top = max(prof["entries"], key=lambda e: e["time_s"]["mean"])["collective"]
                print(f"| layout | {top} forced | wall (median) | default (median) | "
                      "forced/default | 95% interval | p |")
                print("\n".join(oracle_rows(name, oracle(c, cmd, work, a.rounds, top))),
                      flush=True)
            if not a.no_app:
                app_and_verify(run, cmd, where, a, name, work, prof)
            online_and_verify(run, cmd, a, name, work)
    finally:
        c.down()


if __name__ == "__main__":
    main()

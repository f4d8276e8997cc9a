"""The application loop on GROMACS (tests/gmx_app.py: Debian's gmx_mpi, PME water) across
the test cluster's nodes with every port shaped like Gigabit Ethernet (issue 85, item 3;
root). Per layout: `tune profile` (what the run spends in which collective), the
application's own oracle (its runs with the library's default and with each all-to-all
algorithm forced, alternating in rounds: the wall time of each against the default's in
the same round), `tune app` in the profile's layout (timed), and `tune verify --app` of
its file, judging sequentially; optionally `tune online` on the same command. Prints
markdown rows.

    .venv/bin/python bench/gromacs_loop_bench.py --layouts 2x2,4x1 --rounds 4 \\
        --pairs 6 --max-rounds 12

Ranks are not bound (`--bind-to none`), as in bench/network_bench.py.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from scipy import stats

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from clirun import TUNE  # noqa: E402
from network_bench import Layout, arms, launcher  # noqa: E402

import testcluster  # noqa: E402
from gmx_app import mdrun, prepare  # noqa: E402

REPO = HERE.parent


def oracle(c: testcluster.Cluster, cmd: list[str], work: Path, rounds: int,
           coll: str = "alltoall") -> dict[str, list[float]]:
    """Wall seconds of each arm's runs (the library's default, each of `coll`'s algorithms
    forced for the whole job), the arms alternating within each round (the default first
    in even rounds, last in odd ones)."""
    envs = {k: v for k, v in arms(coll, work / "unused.conf").items() if k != "file"}
    times: dict[str, list[float]] = {a: [] for a in envs}
    for rnd in range(rounds):
        order = list(envs) if rnd % 2 == 0 else list(reversed(envs))
        for arm in order:
            t = time.monotonic()
            r = c.on("node1", cmd, env=c.env(**envs[arm]), cwd=work, timeout=1800)
            if r.returncode != 0:
                raise SystemExit(f"{arm}: {r.stderr[-2000:]}")
            times[arm].append(time.monotonic() - t)
    return times


def oracle_rows(name: str, times: dict[str, list[float]]) -> list[str]:
    """Per forced algorithm: wall time / the default's (geometric mean over rounds), its
    95% interval and a two-sided paired t-test over rounds on the log ratio."""
    rows = []
    d = times["default"]
    for arm, t in times.items():
        if arm == "default":
            continue
        x = [math.log(a / b) for a, b in zip(t, d, strict=True)]
        m = statistics.fmean(x)
        se = statistics.stdev(x) / math.sqrt(len(x)) if len(x) > 1 else math.inf
        h = float(stats.t.ppf(0.975, len(x) - 1)) * se if len(x) > 1 else math.inf
        p = float(stats.ttest_1samp(x, 0.0).pvalue) if len(x) > 1 and se > 0 else 1.0
        rows.append(f"| {name} | {arm} | {statistics.median(t):.2f} s | "
                    f"{statistics.median(d):.2f} s | {math.exp(m):.3f} | "
                    f"{math.exp(m - h):.3f}-{math.exp(m + h):.3f} | {p:.3f} |")
    return rows


Run = Callable[..., float]


def tune_runner(c: testcluster.Cluster, env: dict[str, str], work: Path, timeout: float
                ) -> Run:
    """`run(*argv)`: `tune ARGV` on node 1 in `work`, its seconds; exits on a failure (a
    verdict's exit codes 1 and 5 are results)."""
    def run(*argv: str) -> float:
        t = time.monotonic()
        r = c.on("node1", [*TUNE, *argv], env=env, cwd=work, timeout=timeout)
        if r.returncode not in (0, 1, 5):
            raise SystemExit(f"tune {argv[0]} failed: {r.stderr[-3000:]}")
        return time.monotonic() - t
    return run


def app_and_verify(run: Run, cmd: list[str], where: list[str], a: argparse.Namespace,
                   name: str, work: Path) -> None:
    """`tune app` of the profile in its layout, then `tune verify --app` of its file."""
    t_app = run("app", "p.json", "--mpi", "/usr", "--db", "db.sqlite", "--out", "r.conf",
                "--json", "app.json", "--quiet", *where)
    res = json.loads((work / "app.json").read_text())
    changed = [e for e in res["entries"] if e["speedup"] != 1.0]
    print(f"tune app {t_app:.0f} s, groups " + ", ".join(
        f"{g['collective']}@{g['comm_size']} {g.get('layout')}: {g['status']}"
        for g in res["groups"]))
    print("the file: " + (", ".join(
        f"{e['collective']} {e['size']} B {e['chosen']} {e['speedup']:.2f}x"
        for e in changed) or "nothing changed") + f"; expected saving "
        f"{res['expected_saving_s'] * 1e3:.1f} ms", flush=True)
    verify_app(run, cmd, a, name, work / "r.conf")


def verify_app(run: Run, cmd: list[str], a: argparse.Namespace, name: str, rules: Path
               ) -> None:
    """`tune verify --app` of `rules` on the application's own runs: a row per measure."""
    t_v = run("verify", "--app", "--rules", str(rules), "--mpi", "/usr", "--pairs",
              str(a.pairs), "--max-rounds", str(a.max_rounds), "--json", "v.json", "--quiet",
              "--", *cmd)
    v = json.loads((rules.parent / "v.json").read_text())
    print(f"verify --app of {rules.name}: {t_v:.0f} s, {v['pairs']} pairs")
    print("\n".join(verify_rows(name, v)), flush=True)


def online_and_verify(run: Run, cmd: list[str], a: argparse.Namespace, name: str,
                      work: Path) -> None:
    """--online-runs runs of `tune online` on the application's command, then `tune verify
    --app` of the file they wrote (if any)."""
    for i in range(a.online_runs):
        t_o = run("online", "-o", "o.conf", "--mpi", "/usr", "--db", "db.sqlite", "--", *cmd)
        print(f"tune online run {i + 1}: {t_o:.0f} s", flush=True)
    if a.online_runs and (work / "o.conf").exists():
        print((work / "o.conf").read_text())
        verify_app(run, cmd, a, name, work / "o.conf")


def verify_rows(name: str, v: dict) -> list[str]:  # type: ignore[type-arg]
    """A verify --app result (its JSON) as markdown rows, one per measure."""
    rows = ["| layout | measure | default (median) | rules (median) | rules/default | "
            "interval | could see | verdict |"]
    for m, x in v["measures"].items():
        lo, hi = x["interval"]
        rows.append(f"| {name} | {m} | {statistics.median(x['default_s']):.3f} s | "
                    f"{statistics.median(x['tuned_s']):.3f} s | {x['ratio']:.3f} | "
                    f"{lo:.3f}-{hi:.3f} | {x['could_see'] or math.inf:.2f}x | "
                    f"{x['verdict']} |")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layouts", default="2x2,4x1")
    ap.add_argument("--link", default="1gbit")
    ap.add_argument("--rounds", type=int, default=4, help="oracle rounds (0: none)")
    ap.add_argument("--pairs", type=int, default=6)
    ap.add_argument("--max-rounds", type=int, default=12)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--spacing", type=float, default=0.06)
    ap.add_argument("--online-runs", type=int, default=0,
                    help="runs of tune online on the same command (0: none)")
    ap.add_argument("--no-app", action="store_true",
                    help="no tune app and verify --app (the oracle and online only)")
    a = ap.parse_args()
    c = testcluster.make(4, slurm=False)
    env = c.env(PYTHONPATH=str(REPO / "src"))
    try:
        c.shape(testcluster.LINKS[a.link])
        for lay in [Layout(*map(int, s.split("x"))) for s in a.layouts.split(",")]:
            work = c.home / f"gmx-{lay.name}"
            tpr = prepare(work, spacing=a.spacing, steps=a.steps)
            cmd = [*launcher(c, lay), *mdrun(tpr)]
            where = ["--hostfile", c.hostfile(lay.ppn), "--launcher-args",
                     f"--mca plm_rsh_agent {c.agent} --bind-to none"]

            run = tune_runner(c, env, work, 7200)
            run("profile", "-o", "p.json", "--mpi", "/usr", "--", *cmd)
            prof = json.loads((work / "p.json").read_text())
            wall, coll = prof["wall_s"]["mean"], prof["collective_s"]["mean"]
            print(f"\n{lay.name}: profiled wall {wall:.2f} s per rank, collectives "
                  f"{coll:.2f} s ({coll / wall:.0%})", flush=True)
            if a.rounds:
                print("| layout | alltoall forced | wall (median) | default (median) | "
                      "forced/default | 95% interval | p |")
                print("\n".join(oracle_rows(lay.name, oracle(c, cmd, work, a.rounds))),
                      flush=True)
            if not a.no_app:
                app_and_verify(run, cmd, where, a, lay.name, work)
            online_and_verify(run, cmd, a, lay.name, work)
    finally:
        c.down()


if __name__ == "__main__":
    main()

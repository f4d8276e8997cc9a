"""Benchmark for docs/benchmarks.md (issue 36): how a launch's first calls of a small
collective compare with the rest, per Intel MPI setting, in an application-style loop.

    python bench/first_calls.py --mpi .venv-impi --np 2 --coll alltoall --chunks 20 \\
        --arm default= --arm p3=I_MPI_ADJUST_ALLTOALL=3 --rounds 3

Each launch of bench/apploop.c times `--chunks` stretches of `--calls` calls back to back,
one after the other from MPI_Init on (each stretch a size of its own, 9 B, 10 B, ...: the
loop measures per size; the sizes are so close that a call's work does not change), and
prints per stretch the median over `--rounds` launches per arm. A judge that measures a
size in the launch's first few hundred calls times this transient, not the steady state.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# bench/ (clirun, impi_vs_mpitune) and this folder, run from anywhere
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from impi_vs_mpitune import build_loop, clean_env  # noqa: E402

from colltune.backends.impi.install import find_impi, launch_command  # noqa: E402
from colltune.launchers import Launch  # noqa: E402
from colltune.slots import place  # noqa: E402


def arm(text: str) -> tuple[str, dict[str, str]]:
    name, _, assigns = text.partition("=")
    env = dict(kv.split("=", 1) for kv in assigns.split(",") if kv)
    if not name or any(not re.fullmatch(r"(I_MPI|MPIR_CVAR)_[A-Z0-9_]+", k) for k in env):
        raise SystemExit(f"--arm {text!r}: NAME=[I_MPI_VAR=VALUE[,...]]")
    return name, env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", default=".venv-impi")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--coll", default="alltoall")
    ap.add_argument("--chunks", type=int, default=20)
    ap.add_argument("--calls", type=int, default=100, help="calls per stretch (after the "
                    "loop program's 10 untimed calls per size)")
    ap.add_argument("--first", type=int, default=9, help="bytes of the first stretch")
    ap.add_argument("--arm", action="append", type=arm, default=[])
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    mpi = find_impi(a.mpi)
    arms = dict(a.arm or [("default", {})])
    sizes = [a.first + i for i in range(a.chunks)]
    got: dict[str, list[list[float]]] = {n: [] for n in arms}
    with tempfile.TemporaryDirectory(prefix="first-calls-") as tmp:
        exe = build_loop(mpi, Path(tmp))
        cmd = [*launch_command(mpi, place(a.np, None, launch=Launch("mpiexec"))), str(exe),
               a.coll, str(a.calls), *map(str, sizes)]
        for _ in range(a.rounds):
            for name, env in arms.items():  # arms alternate launch by launch
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                                   env=clean_env(mpi, env), check=True)
                per = {d["size"]: d["completion"] for d in map(json.loads, r.stdout.split())}
                got[name].append([per[s] for s in sizes])
    print(f"Intel MPI {mpi.version}, {a.coll}, {a.np} ranks, stretches of {a.calls} calls "
          f"(+10 untimed each), median us per call over {a.rounds} launches per arm\n")
    print("| calls since MPI_Init | " + " | ".join(arms) + " |")
    print("|---|" + "---|" * len(arms))
    for i in range(a.chunks):
        first = i * (a.calls + 10) + 10
        cells = [sorted(runs[i] for runs in got[n])[a.rounds // 2] * 1e6 for n in arms]
        print(f"| {first}-{first + a.calls - 1} | " + " | ".join(f"{c:.2f}" for c in cells)
              + " |")


if __name__ == "__main__":
    main()

"""What tune profile's PMPI wrappers cost per call: a program making a million calls of
MPI_Barrier and of an 8-byte MPI_Allreduce on MPI_COMM_SELF (almost no work in the library,
so the wrapper's share is what shows), run alternately with and without the profiler
preloaded, one rank, several rounds; the difference of the medians per call.

    python bench/profiler_overhead.py --mpi /usr --rounds 7
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
from pathlib import Path

from colltune.backends import registry
from colltune.kernel.build import build_kernel

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpi", default="/usr", help="Open MPI prefix")
    ap.add_argument("--backend", default="openmpi")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=1000000)
    args = ap.parse_args()
    backend = registry.named(args.backend)
    mpi = backend.with_apps().find(args.mpi)
    lib = build_kernel(mpi, name="collprof")
    env = {**os.environ, **mpi.tool_env()}
    with tempfile.TemporaryDirectory() as tmp:
        exe = Path(tmp) / "overhead"
        subprocess.run([str(mpi.mpicc), "-std=c99", "-O2", "-o", str(exe),
                        str(HERE / "profiler_overhead.c")], check=True, env=env)
        times: dict[str, list[tuple[float, float]]] = {"plain": [], "profiled": []}
        for _ in range(args.rounds):
            for arm in ("plain", "profiled"):
                extra = backend.with_apps().launcher_env({"LD_PRELOAD": str(lib),
                                              "COLLTUNE_PROFILE_DIR": tmp}
                                             ) if arm == "profiled" else []
                out = subprocess.run([str(mpi.mpirun), *extra, "-np", "1", str(exe),
                                      str(args.calls)], capture_output=True, text=True,
                                     env=env, check=True).stdout.split()
                times[arm].append((float(out[1]), float(out[3])))
    print(f"{mpi.describe()}, {args.rounds} rounds of {args.calls} calls, one rank")
    for i, name in enumerate(("MPI_Barrier(SELF)", "MPI_Allreduce(8 B, SELF)")):
        plain = statistics.median(t[i] for t in times["plain"])
        prof = statistics.median(t[i] for t in times["profiled"])
        print(f"| {name} | {plain * 1e9:.1f} ns | {prof * 1e9:.1f} ns | "
              f"{(prof - plain) * 1e9:.1f} ns |")


if __name__ == "__main__":
    main()

"""Benchmark for docs/benchmarks.md (issue 35, item 5): libraries side by side with
`tune compare`, as a site runs it.

    python bench/compare_bench.py --case kernel --rounds 8
    python bench/compare_bench.py --case melt --rules41 R41 --rules50 R50 --rounds 8 \\
        [--metric 'Loop time of (\\S+)']
    python bench/compare_bench.py --case hpcc --rules41 R41 --rules50 R50 --rounds 8

kernel: allreduce and bcast per call at 8 B, 1 KiB, 64 KiB, 4 ranks, on every library
installed here (Open MPI 4.1.4 and 5.0.11, MPICH 4.0.2 and 5.0.2, Intel MPI 2021.18), each
built with its own mpicc. melt/hpcc: Debian's LAMMPS and HPCC (linked to Open MPI 4.1.4)
at 4 ranks on 4.1.4 and 5.0.11 (the same binary: one ABI), each at its defaults and with
the algorithm rules `tune app` wrote for it (bench/runtime_bench.py keeps them in its work
directory). Prints markdown: per arm the library read back, the median, the ratio to the
first arm with its interval, the verdict and the smallest slowdown it could see.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OMPI41, OMPI50 = "/usr", str(ROOT / ".venv")
INPUTS = {"melt": Path("/usr/share/lammps/examples/melt/in.melt"),
          "hpcc": Path("/usr/share/doc/hpcc/examples/_hpccinf.txt")}


def arms(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    if args.case == "kernel":
        libs = [f"openmpi:{OMPI41}", f"openmpi:{OMPI50}", "mpich:/usr",
                f"mpich:{ROOT / '.venv-mpich'}", f"impi:{ROOT / '.venv-impi'}"]
        return libs, ["--collective", args.collective, "--sizes", "8,1K,64K"]
    libs = [f"openmpi:{OMPI41}", f"openmpi:{OMPI41}={args.rules41}", f"openmpi:{OMPI50}",
            f"openmpi:{OMPI50}={args.rules50}"]
    prog = ["lmp", "-in", "in.melt", "-log", "none"] if args.case == "melt" else ["hpcc"]
    return libs, [*(["--metric", args.metric] if args.metric else []), "--", *prog]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=("kernel", "melt", "hpcc"), required=True)
    ap.add_argument("--collective", default="allreduce")
    ap.add_argument("--rules41", type=Path)
    ap.add_argument("--rules50", type=Path)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--metric", help="tune compare --metric (melt: 'Loop time of (\\S+)')")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix=f"colltune-cmpbench-{args.case}-"))
    if args.case in INPUTS:
        shutil.copy(INPUTS[args.case], work / ("in.melt" if args.case == "melt"
                                               else "hpccinf.txt"))
    libs, objective = arms(args)
    js = work / "compare.json"
    cmd = [str(ROOT / ".venv" / "bin" / "tune"), "compare", "--np", str(args.np), "--rounds",
           str(args.rounds), "--json", str(js), "-q",
           *[a for lib in libs for a in ("--lib", lib)], *objective]
    env = {**os.environ, "OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}
    start = time.monotonic()
    res = subprocess.run(cmd, cwd=work, env=env, check=False)  # HPCC reads its cwd
    if res.returncode != 0:
        sys.exit(res.returncode)
    doc = json.loads(js.read_text())
    print(f"`{' '.join(cmd[1:]).replace(str(ROOT) + '/', '')}` "
          f"({time.monotonic() - start:.0f} s)\n")
    print("| arm | library (read back) | median | vs first | interval | verdict | sees |")
    print("|---|---|---|---|---|---|---|")
    for a in doc["arms"]:
        med = ", ".join(f"{float(t):.3g} s" if c == "0" else f"{c} B {float(t) * 1e6:.3g} us"
                        for c, t in a["median_s"].items())
        lo, hi = a["interval"]
        first = a["verdict"] == "baseline"
        name = a["arm"].replace(str(ROOT) + "/", "").replace(str(work) + "/", "")
        span = "-" if first else f"{lo:.3f}-{hi:.3f}"
        sees = "-" if first else f"{a['mde']:.2f}x"
        ways = [c["verdict"] for c in a["cells"].values()]
        tally = ", ".join(f"{w} at {ways.count(w)}" for w in ("faster", "slower", "same")
                          if ways.count(w)) if len(ways) > 1 else ""
        print(f"| {name} | {a['library'][:40]} | {med} | {a['ratio']:.3f} | {span} | "
              f"{a['verdict']}{f' ({tally} of {len(ways)})' if tally else ''} | {sees} |")
    print(f"\n{doc['summary']}")


if __name__ == "__main__":
    main()

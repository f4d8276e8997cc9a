"""Which allreduce algorithm Open MPI's default runs, by datatype (issue 85, item 2): the
same byte size is 8 MPI_CHARs in OSU (its default type), 2 MPI_FLOATs with `-T
mpi_float`, and one MPI_DOUBLE in colltune's kernel; coll/tuned's decision reads the bytes,
but its ring falls back to recursive doubling when the count is below the ranks. Rank 0
runs under gdb, counting the calls into coll/base's allreduce functions (as the kernel's
own proof does, backends/openmpi/serving.count_calls); beside it, OSU's average with the
default and with recursive doubling forced, in the same run.

    .venv/bin/python bench/datatype_probe.py --osu /root/osu74 --sizes 4,8,16 --np 4
"""

from __future__ import annotations

import argparse
import ast
import os
import re
import subprocess
import tempfile
from pathlib import Path

from colltune.backends.openmpi.install import find_openmpi
from colltune.backends.openmpi.serving import count_calls
from colltune.slots import Placement

FUNCS = r"ompi_coll_base_allreduce_intra_(\w+)"
ROOT = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}

# one gdb Breakpoint per coll/base allreduce function, pending until coll/base loads; the
# counts printed when the program exits
GDB = """set pagination off
set confirm off
set breakpoint pending on
python
import gdb
counts = {}
class Count(gdb.Breakpoint):
    def stop(self):
        counts[self.location] = counts.get(self.location, 0) + 1
        return False
for name in ("basic_linear", "nonoverlapping", "recursivedoubling", "ring",
             "ring_segmented", "redscat_allgather"):
    Count("ompi_coll_base_allreduce_intra_" + name)
gdb.events.exited.connect(lambda e: print("COUNTS", counts))
end
run
"""


def _names(counts: dict[str, int]) -> str:
    got = sorted({m.group(1) for fn in counts if (m := re.fullmatch(FUNCS, fn))})
    return " + ".join(got) or "-"


def osu_functions(mpirun: str, osu: Path, np: int, size: int, dtype: str) -> str:
    """The coll/base functions rank 0 of OSU's allreduce entered at `size` bytes."""
    with tempfile.TemporaryDirectory() as tmp:
        script, out = Path(tmp) / "count.gdb", Path(tmp) / "rank0.out"
        script.write_text(GDB)
        argv = f"{osu} -m {size}:{size} -i 10 -x 1 -T {dtype}"
        wrap = (f'if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then gdb -q -batch -x {script} '
                f"--args {argv} > {out} 2>&1; else exec {argv}; fi")
        subprocess.run([mpirun, "-np", str(np), "--oversubscribe", "sh", "-c", wrap],
                       capture_output=True, check=False, env={**os.environ, **ROOT})
        line = next((ln for ln in out.read_text().splitlines() if ln.startswith("COUNTS")),
                    "COUNTS {}")
    return _names(ast.literal_eval(line.split(" ", 1)[1]))


def osu_average(mpirun: str, osu: Path, np: int, size: int, dtype: str, alg: int) -> float:
    """OSU's average latency (us) with coll/tuned's algorithm `alg` (0: its decision)."""
    r = subprocess.run([mpirun, "-np", str(np), "--oversubscribe", "--mca",
                        "coll_tuned_use_dynamic_rules", "1", "--mca",
                        "coll_tuned_allreduce_algorithm", str(alg), str(osu), "-m",
                        f"{size}:{size}", "-i", "500", "-x", "50", "-T", dtype],
                       capture_output=True, text=True, check=True, env={**os.environ, **ROOT})
    return float(next(ln.split()[1] for ln in r.stdout.splitlines()
                      if ln.split()[:1] == [str(size)]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--osu", type=Path, required=True, help="OSU built for Open MPI 4.1.4")
    ap.add_argument("--mpi", default="/usr")
    ap.add_argument("--sizes", default="4,8,16")
    ap.add_argument("--np", type=int, default=4)
    args = ap.parse_args()
    os.environ.update(ROOT)
    mpi = find_openmpi(args.mpi)
    osu = next(iter(sorted(args.osu.rglob("osu_allreduce"))))
    sizes = [int(s) for s in args.sizes.split(",")]
    kernel = count_calls(mpi, Placement(args.np, True, None, 1, args.np), "allreduce",
                         [s for s in sizes if s % 8 == 0],
                         {"OMPI_MCA_coll_tuned_use_dynamic_rules": "0"},
                         ("ompi_coll_base_allreduce_intra_", FUNCS))
    print("| size | caller, datatype (count) | the default ran | OSU default us "
          "| OSU recursive doubling us |")
    print("|---|---|---|---|---|")
    for size in sizes:
        for dtype, width in (("mpi_char", 1), ("mpi_float", 4)):
            if size % width:
                continue
            ran = osu_functions(mpi.mpirun, osu, args.np, size, dtype)
            d, rd = (osu_average(mpi.mpirun, osu, args.np, size, dtype, a) for a in (0, 3))
            print(f"| {size} B | OSU, {dtype.upper()} ({size // width}) | {ran} | {d:.1f} "
                  f"| {rd:.1f} |", flush=True)
        if size in kernel:
            print(f"| {size} B | kernel, MPI_DOUBLE ({size // 8}) | {_names(kernel[size])} "
                  "| | |", flush=True)


if __name__ == "__main__":
    main()

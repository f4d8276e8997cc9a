"""A choice at one size against the library's own entry at another, in one launch: Intel
MPI's own table with one choice spliced in (default: reduce preset 1 at 0-8 B, the
library's own entry at every other size), against the default, at --np ranks:

 1. the application-style loop (bench/apploop.c: each size in turn, `iters` calls back to
    back after 10 warm-up calls), in windows of several lengths, the arms alternating in
    fresh launches: default/table per size, geometric mean and 95% interval;
 2. `tune verify` of the same table at those sizes with `--step` of them: each size alone
    (the kernel's three timing modes) and the application step of both.

    python bench/step_bench.py --np 4 --rounds 6
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# bench/ (clirun, impi_vs_mpitune) and this folder, run from anywhere
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from clirun import TUNE  # noqa: E402
from impi_vs_mpitune import build_loop, loop  # noqa: E402

from colltune.backends.impi import install as impi  # noqa: E402
from colltune.backends.impi.files import write_table  # noqa: E402
from colltune.backends.impi.splice import Splicer  # noqa: E402
from colltune.rules.impi_tuning import LIBRARY, Rules  # noqa: E402
from colltune.slots import Launch, place  # noqa: E402


def judge(ratios: list[float]) -> str:
    """default/table over pairs: geometric mean, its 95% t interval, and a verdict."""
    import math

    from scipy import stats

    logs = [math.log(x) for x in ratios]
    mean = sum(logs) / len(logs)
    if len(logs) < 2 or len(set(logs)) == 1:
        return f"{math.exp(mean):.2f}x"
    lo, hi = stats.t.interval(0.95, len(logs) - 1, loc=mean, scale=stats.sem(logs))
    verdict = "faster" if lo > 0 else "slower" if hi < 0 else "none"
    return f"{math.exp(mean):.2f}x ({math.exp(lo):.2f}-{math.exp(hi):.2f}) {verdict}"

def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", default=os.environ.get("COLLTUNE_IMPI_PREFIX", ".venv-impi"))
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--coll", default="reduce")
    ap.add_argument("--preset", type=int, default=1)
    ap.add_argument("--upto", type=int, default=8, help="the preset from 0 to this size")
    ap.add_argument("--sizes", default="8,65536")
    ap.add_argument("--iters", default="200,2000,10000")
    ap.add_argument("--rounds", type=int, default=6)
    a = ap.parse_args()
    mpi = impi.find_impi(a.mpi)
    sizes = [int(s) for s in a.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="step-bench-"))
    placement = place(a.np, None, launch=Launch(launcher="mpiexec"))
    spl = Splicer(mpi, placement, {a.coll: sorted(impi.catalog(mpi, [a.coll]).algorithms[a.coll])})
    table = work / "t.dat"
    rules = Rules([(a.upto, a.preset), (None, LIBRARY)])
    write_table(table, {a.np: {a.coll: {a.np: rules}}}, spl, ["step bench"], [])
    exe = build_loop(mpi, work)
    arms = {"default": {}, "table": {"I_MPI_TUNING_BIN": str(table)}}
    print(f"{mpi.describe()}, {a.np} ranks, {a.coll}: preset {a.preset} at 0-{a.upto} B, "
          f"the library's own entry elsewhere; {a.rounds} launch pairs per row\n")
    print("| calls per size | " + " | ".join(f"{s} B default/table" for s in sizes) + " |")
    print("|---|" + "---|" * len(sizes))
    for iters in (int(i) for i in a.iters.split(",")):
        got: dict[str, dict[int, list[float]]] = {arm: {s: [] for s in sizes} for arm in arms}
        for r in range(a.rounds):
            for arm in (list(arms) if r % 2 == 0 else list(arms)[::-1]):
                for s, t in loop(mpi, exe, a.coll, a.np, sizes, arms[arm], iters).items():
                    got[arm][s].append(t)
        print(f"| {iters} | " + " | ".join(
            judge([d / t for d, t in zip(got["default"][s], got["table"][s], strict=True)])
            for s in sizes) + " |", flush=True)
    v = work / "v.json"
    spec = ",".join(map(str, sizes))
    subprocess.run([*TUNE, "verify", str(table), "--mpi",
                    str(mpi.prefix), "--np", str(a.np), "--sizes", spec, "--step", spec,
                    "--allow-inconclusive", "--json", str(v), "--quiet"],
                   capture_output=True, check=False, timeout=3600)
    (c,) = json.loads(v.read_text())["collectives"]
    print(f"\ntune verify {table.name} --sizes {spec} --step {spec}: {c['applied']}")
    for k in c["kernel"] + c["step"]:
        modes = ", ".join(f"{m} {float(x['ratio']):.3f}" for m, x in k["modes"].items())
        lo, hi = (f"{x:.2f}" if x is not None else "-" for x in k["ratio_ci"])
        print(f"- {k['what'] or str(k['size']) + ' B'}: table/default {k['ratio']:.3f} "
              f"({lo}-{hi}) {k['verdict']}, "
              f"{k['rounds']} pairs{'; ' + modes if modes else ''}")


if __name__ == "__main__":
    main()

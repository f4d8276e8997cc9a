"""tune --tune-ucc judged on one node: per collective, the tune's time and the string it
wrote, then UCC's own choice against that string, beside the oracle (each tl/ucp algorithm
forced, the fastest per size) and coll/tuned's default (UCC off), by colltune's kernel.

Needs an Open MPI 5.0 built with UCC (docs/ucc.md; never committed):

    .venv/bin/python bench/ucc_tune_bench.py --mpi $HOME/ompi5ucc --np 4 --rounds 5

The tune runs as a user runs it (`tune C --np N --tune-ucc --sizes ...`: sweep, boundaries,
fresh launch pairs). The arms are then measured as bench/ucc_bench.py measures them (one
launch per arm and round, every size in it, the order shuffled each round, an arm's time at
a size the median of its launches' medians), at the sizes the tune was given: ratios to
UCC's own choice in the same run (above 1: faster)."""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from ucc_bench import UCC_ON, arms_for, geomean, measure  # noqa: E402

from colltune.rules import ucc_tune as u  # noqa: E402

TUNE = Path(sys.executable).with_name("tune")


def tuned_string(args: argparse.Namespace, coll: str, work: Path) -> tuple[str, float]:
    """The string `tune --tune-ucc` writes for `coll`, and the tune's wall time."""
    out = work / f"{coll}.env"
    start = time.monotonic()
    r = subprocess.run([str(TUNE), coll, "--np", str(args.np), "--tune-ucc", "--mpi",
                        args.mpi, "--sizes", args.sizes, "--out", str(out), "--db",
                        str(work / "s.db"), "--quiet"], capture_output=True, text=True,
                       timeout=3600)
    took = time.monotonic() - start
    if r.returncode != 0:
        sys.exit(f"tune {coll} failed: {r.stderr[-2000:]}")
    ((_, _, value),) = u.env_lines(out.read_text()) or [(0, "", "")]
    return value, took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mpi", required=True, help="Open MPI 5 prefix built --with-ucc")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--collectives", default="bcast,allreduce,reduce,allgather,alltoall")
    ap.add_argument("--sizes", default="8,64,512,4096,32768,262144,1048576")
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    print("| collective | tune | string / UCC | oracle / UCC | share | worst size | "
          "coll/tuned / UCC | string |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="ucc-tune-bench-") as tmp:
        for coll in args.collectives.split(","):
            value, took = tuned_string(args, coll, Path(tmp))
            arms = arms_for(coll)
            arms["string"] = {**UCC_ON, u.TL_UCP: value} if value else dict(UCC_ON)
            t = measure(args, coll, arms, sizes)
            forced = [a for a in t if a.startswith("@")]
            ok = [s for s in sizes if s in t["ucc"] and s in t["string"]
                  and all(s in t[a] for a in forced)]
            best = {s: min(t[a][s] for a in forced) for s in ok}
            mine = geomean([t["ucc"][s] / t["string"][s] for s in ok])
            oracle = geomean([t["ucc"][s] / best[s] for s in ok])
            # the oracle's gain captured, in log terms; a gain below 1% is not a share
            share = (f"{math.log(mine) / math.log(oracle):.0%}" if oracle > 1.01 else "-")
            worst = min(ok, key=lambda s: t["ucc"][s] / t["string"][s])
            tuned = geomean([t["ucc"][s] / t["tuned"][s] for s in ok if s in t["tuned"]])
            print(f"| {coll} | {took:.0f} s | {mine:.2f}x | {oracle:.2f}x | {share} | "
                  f"{t['ucc'][worst] / t['string'][worst]:.2f}x at {worst} B | "
                  f"{tuned:.2f}x | `{value or '(none: UCC own)'}` |", flush=True)


if __name__ == "__main__":
    main()

"""`tune report` on a store of many contexts (a synthetic store: reduce at N communicator
sizes, two sizes and two configurations each): its time and the files it writes, with the
default --max-plots and with every context plotted. Prints markdown rows.

    python bench/report_bench.py --contexts 20 200
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from clirun import tune

from colltune.core.config import Config
from colltune.core.records import PointResult
from colltune.store import Context, Store


def store(path: Path, contexts: int) -> None:
    s = Store(path)
    for np_ in range(2, 2 + contexts):
        ctx = Context("openmpi-4.1.4@/usr", "Open MPI", "4.1.4", "/usr", "node1", np_, np_, 1,
                      "reduce", "openmpi")
        for size in (8, 1024):
            for cfg, t in ((Config(0), 2e-6), (Config(2), 1e-6)):
                xs = [t * (1 + 0.01 * i) for i in range(9)]
                s.add(ctx, cfg, PointResult(0, size, "ok", n=9, median=xs[4], ci_lo=xs[2],
                                            ci_hi=xs[6], mean=sum(xs) / 9, min=xs[0],
                                            max=xs[-1], samples=xs), "mpit")
    s.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--contexts", type=int, nargs="+", default=[20, 200])
    a = ap.parse_args()
    print("| contexts | --max-plots | seconds | files written |\n|---|---|---|---|")
    for n in a.contexts:
        with tempfile.TemporaryDirectory() as tmp:
            db = Path(tmp) / "s.db"
            store(db, n)
            for plots in ("12", str(n)) if n <= 40 else ("12",):
                out = Path(tmp) / f"rep-{plots}"
                t = time.monotonic()
                r, _ = tune("report", "--db", str(db), "--out", str(out), "--max-plots", plots)
                took = time.monotonic() - t
                if r.returncode != 0:
                    raise SystemExit(r.stderr)
                files = sum(1 for _ in out.iterdir())
                print(f"| {n} | {plots}{' (all)' if plots == str(n) else ''} | {took:.1f} | "
                      f"{files} |")


if __name__ == "__main__":
    main()

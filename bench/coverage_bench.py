"""Coverage between sizes (issue 21): `tune C --np 4` with the dense default grid and the
measured boundaries, timed, then `tune verify` of what it wrote at every power of two and on
both sides of every rule boundary: reproduced regressions (target: 0) and tune's wall time
(target: under 60 s). Prints markdown rows.

    python bench/coverage_bench.py --mpi /usr --mpi .venv --colls reduce,bcast,allreduce,gather
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

from clirun import TUNE


def run(*args: str) -> tuple[float, subprocess.CompletedProcess[str]]:
    t0 = time.monotonic()
    r = subprocess.run([*TUNE, *args], capture_output=True,
                       text=True, check=False)
    return time.monotonic() - t0, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpi", action="append", required=True)
    ap.add_argument("--colls", default="reduce,bcast,allreduce,gather")
    ap.add_argument("--np", default="4")
    ap.add_argument("--keep", type=Path, help="keep each row's store, rules and verify JSON "
                                              "here (DIR/MPI-COLL/), to see which size a "
                                              "regression was at")
    a = ap.parse_args()
    print("| MPI | collective | tune s | sizes decided (grid 19) | non-default | verify s | "
          "sizes verified (edges) | slower (reproduced) | faster |")
    print("|---|---|---|---|---|---|---|---|---|")
    for mpi in a.mpi:
        for coll in a.colls.split(","):
            with tempfile.TemporaryDirectory() as tmp:
                t = Path(tmp)
                if a.keep:
                    t = a.keep / f"{Path(mpi).resolve().name}-{coll}"
                    t.mkdir(parents=True, exist_ok=True)
                dt, r = run(coll, "--np", a.np, "--mpi", mpi, "--db", str(t / "s.db"),
                            "--out", str(t / "r.conf"), "--summary-json", str(t / "s.json"),
                            "--quiet")
                if r.returncode != 0:
                    print(f"| {mpi} | {coll} | tune failed: {r.stderr.strip()[:80]} |")
                    continue
                ds = json.loads((t / "s.json").read_text())["collectives"][coll][a.np]
                nondef = sum(1 for d in ds if d["chosen"]["algorithm"])
                vt, v = run("verify", str(t / "r.conf"), "--np", a.np, "--mpi", mpi,
                            "--json", str(t / "v.json"), "--quiet")
                doc = json.loads((t / "v.json").read_text())
                rows = doc["collectives"][0]["kernel"] if doc["collectives"] else []
                edges = sum(1 for k in rows if k["boundary"])
                slower = sum(1 for k in rows if k["verdict"] == "slower")
                faster = sum(1 for k in rows if k["verdict"] == "faster")
                name = json.loads((t / "s.json").read_text())["mpi"]["version"]
                print(f"| {name} | {coll} | {dt:.0f} | {len(ds)} | {nondef} | {vt:.0f} | "
                      f"{len(rows)} ({edges}) | {slower} | {faster} |", flush=True)


if __name__ == "__main__":
    main()

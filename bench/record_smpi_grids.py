"""Record exhaustive SMPI grids at scale: every algorithm SMPI implements for a collective,
at every size of a dense list (powers of two, the sizes a tune's --boundaries measure may
ask between them, and 3 x 2^k), simulated once by the tuner itself, kept as test data for
tests/test_smpi_replay.py (issue 84, items 4 and 5).

    python bench/record_smpi_grids.py --np 512 --platform docs/platforms/fattree-32x16.xml \\
        --colls reduce,bcast --timeout 600

Writes tests/data/smpi/<platform>-<coll>-np<N>.csv (config_key, algorithm, size, status,
seconds: the simulated time of one call, "" where the point did not finish) and appends
a row per recording to tests/data/smpi/README.md: the command, the wall time here, the
peak memory and the allocation the recording itself held (one launch, its simulated
time plus a real launch's start-up). SimGrid simulates on one core: `--jobs N` deals
the sizes between N simulations at once (alltoall's basic linear at 512 ranks takes about
three minutes of wall time a point).
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from clirun import TUNE

from colltune.backends.smpi.install import largest_buffer, memory_available, memory_needed
from colltune.collectives import get_collective
from colltune.core.space import MAX_BUFFER_BYTES
from colltune.tuner.boundaries import bisection, rounds_to_locate

OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "smpi"


def dense_sizes(coll: str, largest: int = 1 << 20) -> list[int]:
    """8 B .. `largest`: every power of two (what a tune measures by default), the sizes
    its --boundaries measure would measure between two of them (two rounds of the middle
    in log size: x1.19, x1.41, x1.68, at the collective's granularity), and 3 x 2^k."""
    g = get_collective(coll).granularity
    out: set[int] = set()
    for k in range(3, largest.bit_length()):
        a, b = 1 << k, 1 << (k + 1)
        out |= {a, b, 3 << (k - 1), *bisection(a, b, g, rounds_to_locate(a, b))}
    return sorted(s for s in out if 8 <= s <= largest)


def sizes_that_fit(coll: str, np: int, memory: float, largest: int = 1 << 20) -> list[int]:
    """The dense sizes up to `largest` a simulation of `np` ranks holds in `memory` bytes,
    by the model tune itself refuses with (backends/smpi/install.memory_needed)."""
    return [s for s in dense_sizes(coll, largest) if memory_needed(coll, np, s) <= memory
            and largest_buffer(coll, np, s) <= MAX_BUFFER_BYTES]


# How close a point simulated again must come to its first time to count as the same
# oracle: within a millionth of it, or 50 ns. A simulation is deterministic launch for
# launch, but a point's time moves by a few nanoseconds (up to 20 ns seen) with what ran
# before it in the launch (the simulated clock's rounding: alltoall's bruck at 181 B took
# 1225.67268 us in a launch of 2 sizes and 1225.67673 us in one of 38, each the same when
# run again). Far below any difference a tune acts on (--min-gain 3%), far above what
# another model gives
SAME, SAME_S = 1e-6, 5e-8


def same_where_finished(name: str, earlier: list[list[str]], fresh: list[list[str]]
                        ) -> list[list[str]]:
    """The rows of `earlier` that `fresh` does not replace, after checking that every point
    both finished has the same simulated time (within SAME of it, or SAME_S): only then is
    the other simulation the same oracle (a SimGrid built differently, e.g. without the
    quadratic wait, and not another model). Exits, writing nothing, where one differs more."""
    again = {(row[1], row[2]): row for row in fresh}
    both = [(row, again[row[1], row[2]]) for row in earlier
            if row[3] == "ok" and (row[1], row[2]) in again and again[row[1], row[2]][3] == "ok"]
    apart = [(abs(float(b[4]) - float(a[4])), a, b) for a, b in both]
    differ = [f"{a[1]} at {a[2]} B: {a[4]} s then {b[4]} s" for d, a, b in apart
              if d > max(SAME * float(a[4]), SAME_S)]
    if differ:
        sys.exit(f"{name}: the simulation differs where both finished, not written: "
                 + "; ".join(differ[:10]))
    moved = [(d, d / float(a[4])) for d, a, _ in apart if d > 0]
    print(f"{name}: {len(both)} points that finished before came out the same: "
          + (f"{len(moved)} differ, by at most {max(m[0] for m in moved) * 1e9:.1f} ns or "
             f"{max(m[1] for m in moved):.1e} of their time" if moved
             else "to the last digit"), flush=True)
    redone = {row[2] for row in fresh}
    return [row for row in earlier if row[2] not in redone]


def simulate(coll: str, np: int, plat: Path, chunks: list[list[int]],
             args: argparse.Namespace) -> tuple[list[tuple[str, int, int, str, str]], float,
                                                dict[str, float]]:
    """Every algorithm at every size of `chunks`, one tune a chunk, all at once (SimGrid
    runs a simulation on one core: --jobs N records N times faster on N cores); each
    tune's store is --db's, or a chunk's own beside it (`grid.sqlite` -> `grid.1.sqlite`),
    so the same command resumes each. Returns the stores' rows, the wall time, and the
    allocation the tunes held together (launches, node-seconds)."""
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        jobs = []
        t0 = time.monotonic()
        for i, sizes in enumerate(chunks):
            db = (Path(args.db) if args.db else t / "grid.sqlite")
            db = db if i == 0 else db.with_suffix(f".{i}{db.suffix}")
            summary = t / f"summary{i}.json"
            cmd = [*TUNE, coll, "--np", str(np), "--backend", "smpi", "--platform",
                   str(plat), "--sizes", ",".join(map(str, sizes)), "--boundaries",
                   "midpoint", "--timeout", str(args.timeout), "--db", str(db), "--out",
                   str(t / f"rules{i}.conf"), "--summary-json", str(summary), "--quiet",
                   *(["--mpi", args.mpi] if args.mpi else [])]
            with open(t / f"stderr{i}", "w") as stderr:  # a file: no pipe fills up
                jobs.append((db, summary, subprocess.Popen(
                    cmd, stdout=subprocess.DEVNULL, stderr=stderr)))
        for i, (_, _, proc) in enumerate(jobs):
            if proc.wait() != 0:
                for _, _, other in jobs:
                    other.kill()
                sys.exit(f"{coll}: {(t / f'stderr{i}').read_text()}")
        wall = time.monotonic() - t0
        rows: list[tuple[str, int, int, str, str]] = []
        held = {"launches": 0.0, "node_seconds": 0.0}
        for db, summary, _ in jobs:
            allocation = json.loads(summary.read_text())["allocation"]
            for k in held:
                held[k] += allocation[k]
            with sqlite3.connect(db) as c:
                rows += c.execute(
                    "SELECT config_key, algorithm, size, status, samples FROM measurements "
                    "WHERE collective=? AND np=? ORDER BY size, algorithm",
                    (coll, np)).fetchall()
    return rows, wall, held


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--np", default="512", help="communicator sizes, comma-separated")
    ap.add_argument("--platform", required=True)
    ap.add_argument("--colls", default="reduce,bcast,allreduce,allgather,alltoall")
    ap.add_argument("--timeout", type=float, default=600.0)
    ap.add_argument("--memory-gib", type=float, default=None,
                    help="what one simulation may hold (default: 0.9 of MemAvailable, "
                         "what tune itself allows, shared by --jobs)")
    ap.add_argument("--largest", type=int, default=1 << 20,
                    help="the largest size recorded, in bytes (default 1 MiB; smaller where "
                         "SimGrid cannot simulate the larger ones, said in the README)")
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--db", default=None,
                    help="the store to record into (a recording that stopped resumes "
                         "from it; default: a temporary one)")
    ap.add_argument("--only-missing", action="store_true",
                    help="record only the dense sizes the CSV already there lacks, and add "
                         "them to it (a grid recorded before the list grew)")
    ap.add_argument("--add-sizes", default=None,
                    help="record every algorithm at these sizes too (bytes, comma-separated) "
                         "and add them to the CSV already there: sizes a tune asks beyond "
                         "the dense list (a switch located finer where its stake is large, "
                         "tuner/boundaries.within)")
    ap.add_argument("--redo-unfinished", action="store_true",
                    help="record again, every algorithm, the sizes where the CSV already "
                         "there has a point that did not finish (with --mpi: a SimGrid "
                         "without the quadratic wait); every point that finished before must "
                         "come out the same (within a millionth of its time or 50 ns), or "
                         "nothing is written")
    ap.add_argument("--jobs", type=int, default=1,
                    help="simulations at once, the sizes dealt between them (SimGrid "
                         "simulates on one core; each may hold --memory-gib)")
    ap.add_argument("--mpi", default=None,
                    help="the SimGrid to simulate with (its prefix, as tune's --mpi; "
                         "default: smpirun on PATH)")
    args = ap.parse_args()
    if args.jobs < 1:
        ap.error("--jobs must be 1 or more")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plat = Path(args.platform)
    for coll, np in [(c, int(n)) for c in args.colls.split(",") for n in args.np.split(",")]:
        memory = (args.memory_gib * (1 << 30) if args.memory_gib
                  else 0.9 * (memory_available() or 8 << 30) / args.jobs)
        sizes = sizes_that_fit(coll, np, memory, args.largest)
        name = f"{plat.stem}-{coll}-np{np}.csv"
        earlier: list[list[str]] = []
        if (args.only_missing or args.add_sizes or args.redo_unfinished) and (
                out / name).exists():
            with open(out / name, newline="") as f:
                earlier = list(csv.reader(f))[1:]
        if args.only_missing or args.add_sizes:
            if args.add_sizes:
                sizes = sorted({int(s) for s in args.add_sizes.split(",")})
            sizes = [s for s in sizes if str(s) not in {row[2] for row in earlier}]
        if args.redo_unfinished:
            sizes = sorted({int(row[2]) for row in earlier if row[3] != "ok"})
            if not sizes:
                print(f"{name}: every point finished", flush=True)
                continue
        if not sizes:
            print(f"{name}: no size to record", flush=True)
            continue
        chunks = [sizes[i::args.jobs] for i in range(args.jobs) if sizes[i::args.jobs]]
        rows, wall, held = simulate(coll, np, plat, chunks, args)
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / (1 << 20)
        fresh = [[key, str(alg), str(size), status, repr(got[0]) if got else ""]
                 for key, alg, size, status, samples in rows
                 for got in [json.loads(samples)]]
        if args.redo_unfinished:
            earlier = same_where_finished(name, earlier, fresh)
        with open(out / name, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["config_key", "algorithm", "size", "status", "seconds"])
            w.writerows(sorted(earlier + fresh, key=lambda r: (int(r[2]), int(r[1]))))
        unfinished = sum(1 for row in rows if row[3] != "ok")
        line = (f"| {plat.name} | {coll} | {np} | {len(sizes)} ({sizes[0]} B - "
                f"{sizes[-1]} B) | {len(rows)} | {unfinished} | {wall:.0f} s | "
                f"{peak:.1f} GB | {held['launches']:.0f} | {held['node_seconds']:.1f} |")
        print(line, flush=True)
        readme = out / "README.md"
        if not readme.exists():
            readme.write_text(
                "# Exhaustive SMPI grids at scale\n\n"
                "Recorded with `python bench/record_smpi_grids.py --np N --platform P "
                "--colls C --timeout T` (SimGrid 3.32, Debian; this machine: 2 cores, one "
                "simulation at a time per core). Each CSV: every algorithm SMPI implements "
                "plus SMPI's `ompi` default, at every size listed, simulated once; "
                "`seconds` is one call's simulated time. Replayed by "
                "tests/test_smpi_replay.py.\n\n"
                "| platform | collective | ranks | sizes | points | not finished | wall "
                "time here | peak memory (all recordings so far in the run) | launches | "
                "node-seconds held |\n|---|---|---|---|---|---|---|---|---|---|\n")
        with open(readme, "a") as f:
            f.write(line + "\n")


if __name__ == "__main__":
    main()

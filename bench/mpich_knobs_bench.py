"""Benchmark for docs/benchmarks.md: what searching MPICH's radix (k) and pipeline chunk size
gains over the same algorithm at the library's launch values, and what `tune` decided.

    python bench/mpich_knobs_bench.py --mpi .venv-mpich --np 4 --colls bcast,allreduce

Runs `tune ... --format mpich` once (a grid; every parameterised algorithm with every radix
up to the comm size and the chunk sizes of --segsizes), then reads the medians from its
store. Prints markdown. Timings depend on the machine and its load: compare ratios within
one run.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import subprocess
import tempfile
import time
from pathlib import Path

from clirun import TUNE

from colltune.backends.mpich import install as mb
from colltune.core.config import Config
from colltune.kernel.build import build_kernel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", required=True, help="MPICH prefix")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--colls", default="bcast,allreduce")
    ap.add_argument("--sizes", default="8K,64K,1M")
    ap.add_argument("--segsizes", default="0,4K,32K")
    a = ap.parse_args()
    mpi = mb.find_mpich(a.mpi)
    colls = a.colls.split(",")
    exe = build_kernel(mpi)
    lib = mb.library_path(exe)
    cat = mb.catalog(exe, lib, colls)
    summaries: dict[str, dict] = {}
    walls = []
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "s.sqlite"
        for coll in colls:
            summ = Path(tmp) / f"{coll}.json"
            cmd = [*TUNE, coll, "--np", str(a.np), "--mpi",
                   a.mpi, "--format", "mpich", "--sizes", a.sizes, "--segsizes", a.segsizes,
                   "--out", str(Path(tmp) / f"{coll}.tuning.json"), "--db", str(db),
                   "--summary-json", str(summ), "--quiet"]
            t0 = time.monotonic()
            r = subprocess.run(cmd, capture_output=True, text=True, check=False)
            walls.append(f"{coll} {time.monotonic() - t0:.0f} s")
            if r.returncode != 0:
                raise SystemExit(f"tune {coll} failed: {r.stderr}")
            summaries[coll] = json.loads(summ.read_text())
        con = sqlite3.connect(db)
        rows = con.execute("SELECT collective, size, config_key, median "
                           "FROM measurements WHERE status = 'ok' AND np = ?",
                           (a.np,)).fetchall()
        con.close()
    print(f"`tune COLL --np {a.np} --format mpich --sizes {a.sizes} --segsizes {a.segsizes}` "
          f"on {mpi.describe()}: {len(rows)} points measured ({', '.join(walls)})\n")
    for coll in colls:
        med = {(s, Config.from_key(k)): m for c, s, k, m in rows if c == coll}
        decided = {d["size"]: (Config.from_key(d["chosen"]["key"]), d)
                   for d in summaries[coll]["collectives"][coll][str(a.np)]}
        print(f"### {coll}, {a.np} ranks\n")
        print("| size | algorithm | launch values us | best radix/chunk | us | launch/best |")
        print("|---|---|---|---|---|---|")
        for size in sorted({s for s, _ in med}):
            for alg in sorted((cat.knobs or {}).get(coll, {})):
                variants = {c: m for (s, c), m in med.items() if s == size and c.algorithm == alg}
                base = variants.get(Config(alg))
                if not variants or base is None:
                    continue
                best = min(variants, key=lambda c: variants[c])
                print(f"| {size} | {cat.algorithms[coll][alg]} | {base * 1e6:.1f} | "
                      f"{best.label(cat, coll)} | {variants[best] * 1e6:.1f} | "
                      f"{base / variants[best]:.2f} |")
        print("\n| size | MPICH's own us | decided | us | why |")
        print("|---|---|---|---|---|")
        for size, (c, d) in sorted(decided.items()):
            own = med.get((size, Config(0)))
            print(f"| {size} | {own * 1e6 if own else float('nan'):.1f} | {c.label(cat, coll)} | "
                  f"{(med.get((size, c)) or float('nan')) * 1e6:.1f} | {d['reason']} |")
        print()


if __name__ == "__main__":
    main()

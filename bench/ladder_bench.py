"""A ladder of communicator sizes (issue 21): `tune C --np N --comm-sizes 2:N` (every size
inside one launch of N ranks) against `tune C --np 2,4,...,N` (one launch per size), wall
time of each and how many rules sections decide the same at every measured size. Prints
markdown rows.

    python bench/ladder_bench.py --backend smpi --platform docs/platforms/flat-64x8.xml \
        --np 64 --colls bcast,reduce
    python bench/ladder_bench.py --mpi /usr --np 4 --colls reduce,allreduce
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


def decided(summary: Path, coll: str) -> dict[str, dict[int, object]]:
    doc = json.loads(summary.read_text())["collectives"][coll]
    return {np: {d["size"]: d["chosen"] for d in ds} for np, ds in doc.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpi")
    ap.add_argument("--backend", default="openmpi")
    ap.add_argument("--platform")
    ap.add_argument("--np", type=int, default=64)
    ap.add_argument("--colls", default="bcast,reduce")
    ap.add_argument("--sizes", default="8,1K,64K,1M")
    a = ap.parse_args()
    ladder = ",".join(str(1 << k) for k in range(1, a.np.bit_length()) if 1 << k <= a.np)
    common = ["--backend", a.backend, "--sizes", a.sizes, "--boundaries", "midpoint",
              "--quiet"]
    common += ["--platform", a.platform] if a.platform else []
    common += ["--mpi", a.mpi] if a.mpi else []
    print("| collective | sizes | one launch s | launch per size s | ratio | same decision "
          "(np, size) |")
    print("|---|---|---|---|---|---|")
    for coll in a.colls.split(","):
        with tempfile.TemporaryDirectory() as tmp:
            t = Path(tmp)
            one, r1 = run(coll, "--np", str(a.np), "--comm-sizes", ladder, *common,
                          "--db", str(t / "1.db"), "--summary-json", str(t / "1.json"))
            per, r2 = run(coll, "--np", ladder, *common, "--db", str(t / "2.db"),
                          "--summary-json", str(t / "2.json"))
            if r1.returncode or r2.returncode:
                print(f"| {coll} | failed: {(r1.stderr or r2.stderr).strip()[-120:]} |")
                continue
            d1, d2 = decided(t / "1.json", coll), decided(t / "2.json", coll)
            pairs = [(np, s) for np in d1 for s in d1[np]]
            same = sum(1 for np, s in pairs if d2.get(np, {}).get(s) == d1[np][s])
            print(f"| {coll} | {ladder} | {one:.0f} | {per:.0f} | {per / one:.1f}x | "
                  f"{same} of {len(pairs)} |", flush=True)


if __name__ == "__main__":
    main()

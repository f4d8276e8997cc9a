"""The JSON tuning file against Intel MPI's own table with the wins spliced in (`--format
impi-bin`), in whole tunes: per collective, the two formats alternate (which goes first
alternates too); each tune's wall time, confirmed choices, whether it wrote a file, and
where it did, `tune verify` of that file against the default in fresh launch pairs (sizes
faster, slower, inconclusive; and whether Intel MPI ran it as written).

    python bench/splice_bench.py --np 4 --colls bcast,reduce,allreduce,alltoall --rounds 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

# bench/ (clirun, impi_vs_mpitune) and this folder, run from anywhere
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from bands_bench import tune_once  # noqa: E402
from clirun import TUNE  # noqa: E402

from colltune.backends.impi.install import find_impi  # noqa: E402

FORMATS = {"json": ([], "f.json"), "impi-bin": (["--format", "impi-bin"], "f.dat")}


def verify(mpi, out: Path, np: int, work: Path) -> str:  # noqa: ANN001
    """`tune verify` of a written file: how it ran and what the pairs found per size."""
    v = work / "v.json"
    subprocess.run([*TUNE, "verify", str(out), "--mpi",
                    str(mpi.prefix), "--np", str(np), "--allow-inconclusive", "--json",
                    str(v)], capture_output=True, check=False, timeout=3600)
    if not v.exists():
        return "verify failed"
    (c,) = json.loads(v.read_text())["collectives"]
    tested = [k["verdict"] for k in c["kernel"] if k["verdict"] != "default"]
    count = {w: sum(t == w for t in tested) for w in ("faster", "same", "slower")}
    rest = len(tested) - sum(count.values())
    return (f"{c['applied']}; {count['faster']} faster, {count['slower']} slower, "
            f"{count['same']} same, {rest} inconclusive of {len(tested)} sizes; "
            f"{c['speedup']:.2f}x geo-mean")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--colls", default="bcast,reduce,allreduce,alltoall")
    ap.add_argument("--sizes", default="8,64,512,1K,4K,16K,64K,256K,1M")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--first-round", type=int, default=0,
                    help="number the rounds from here (a later run alternates on)")
    ap.add_argument("--mpi", default=str(Path(__file__).parents[1] / ".venv-impi"))
    a = ap.parse_args()
    mpi = find_impi(a.mpi)
    print("| round | collective | format | wall time (s) | confirmed choices | refuted | file "
          "| verify of the file |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="splice-bench-") as tmp:
        for r in range(a.first_round, a.first_round + a.rounds):
            for i, coll in enumerate(a.colls.split(",")):
                order = list(FORMATS) if (r + i) % 2 == 0 else list(reversed(FORMATS))
                for fmt in order:
                    extra, name = FORMATS[fmt]
                    work = Path(tmp) / f"{fmt}-{coll}-{r}"
                    took, won, refuted, wrote = tune_once(mpi, coll, a.np, a.sizes, extra,
                                                          work, name)
                    said = verify(mpi, work / name, a.np, work) if wrote else "-"
                    print(f"| {r} | {coll} | {fmt} | {took:.0f} | {len(won)} | {refuted} | "
                          f"{'yes' if wrote else 'no'} | {said} |", flush=True)


if __name__ == "__main__":
    main()

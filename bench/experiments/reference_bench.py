"""Benchmark for docs/benchmarks.md (issue 36): the default measured in one launch or
pooled over three, where every configuration has a launch of its own (Intel MPI).

    python bench/reference_bench.py --mpi .venv-impi --np 2 --coll alltoall --launches 12
    python bench/reference_bench.py --mpi .venv-impi --np 2 --tunes alltoall,bcast \
        --sizes 8,1K,16K,64K,1M --rounds 2

A sweep compares every preset with the default's median at each size. First mode: the
default alone in --launches fresh launches, back to back, through colltune's own
`measure` (the sweep's code path and settings), each into a store of its own. Then, per
size, how far the default's median in one sweep sits from the next sweep's: for one
launch, over every pair of launches; for three pooled (their samples together, as
`--default-launches 3` stores them), over pairs of disjoint triples. Printed: the median
and 90th percentile of max(a/b, b/a), and the largest.

With --tunes, whole tunes (`tune C --backend impi --default-launches 1|3`), alternating,
round after round: wall time, what was confirmed, refuted (proposed by the sweep, not
confirmed) and whether a file was written.
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import tempfile
import time
from pathlib import Path

# bench/ (clirun, impi_vs_mpitune) and this folder, run from anywhere
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from bands_bench import tune_once  # noqa: E402

from colltune.backends.impi.install import catalog, find_impi  # noqa: E402
from colltune.collectives import get_collective  # noqa: E402
from colltune.core.config import DEFAULT  # noqa: E402
from colltune.core.space import parse_sizes, sizes_for  # noqa: E402
from colltune.launchers import Launch  # noqa: E402
from colltune.options import MeasureSettings  # noqa: E402
from colltune.slots import place  # noqa: E402
from colltune.store import Store  # noqa: E402
from colltune.tuner.measure import Lab, context_for, measure  # noqa: E402


def launches(mpi, coll, np: int, sizes: list[int], n: int) -> list[dict[int, list[float]]]:  # noqa: ANN001
    """The default's samples per size, one dict per fresh launch."""
    cat = catalog(mpi, [coll.name])
    placement = place(np, None, launch=Launch(launcher="mpiexec"))
    out = []
    with tempfile.TemporaryDirectory(prefix="reference-bench-") as tmp:
        for i in range(n):
            store = Store(Path(tmp) / f"{i}.db")
            measure(Lab(mpi, cat, store, MeasureSettings(default_launches=1), "relaunch"),
                    coll, placement, [(DEFAULT, s) for s in sizes])
            out.append({m.size: m.samples for m in
                        store.measurements(context_for(mpi, coll, placement))
                        if m.status == "ok" and m.samples})
            print(f"launch {i + 1}/{n}", file=sys.stderr, flush=True)
    return out


def spread(per_launch: list[dict[int, list[float]]], size: int, k: int,
           pool: bool = True) -> list[float]:
    """max(a/b, b/a) of the medians of two disjoint sets of k launches: of their samples
    pooled, or (pool=False) the median launch's."""
    idx = range(len(per_launch))
    pooled = {c: statistics.median([x for i in c for x in per_launch[i][size]]) if pool
              else statistics.median(statistics.median(per_launch[i][size]) for i in c)
              for c in itertools.combinations(idx, k)}
    out = []
    for a, b in itertools.combinations(pooled, 2):
        if not set(a) & set(b):
            r = pooled[a] / pooled[b]
            out.append(max(r, 1 / r))
    return out


def reference(mpi, coll_name: str, np: int, sizes: list[int] | None, n: int) -> None:  # noqa: ANN001
    coll = get_collective(coll_name)
    sizes = sizes or sizes_for(coll, np)
    t = time.monotonic()
    got = launches(mpi, coll, np, sizes, n)
    print(f"\n{coll.name}, {np} ranks: the default in {n} fresh launches "
          f"({time.monotonic() - t:.0f} s); the default's median in one sweep against the "
          "next's, max(a/b, b/a)\n")
    print("| size (B) | median over launches (us) | 1 launch: median, 90th pct, max | "
          "3 pooled: median, 90th pct, max | 3, the median launch: median, 90th pct, max |")
    print("|---|---|---|---|---|")
    for s in sizes:
        if not all(s in g for g in got):
            continue
        cells = []
        for k, pool in ((1, True), (3, True), (3, False)):
            r = spread(got, s, k, pool)
            q = statistics.quantiles(r, n=10)[-1] if len(r) > 10 else max(r)
            cells.append(f"{statistics.median(r):.2f}, {q:.2f}, {max(r):.2f}")
        mid = statistics.median(statistics.median(g[s]) for g in got) * 1e6
        print(f"| {s} | {mid:.2f} | {' | '.join(cells)} |")


def tunes(mpi, colls: list[str], np: int, sizes: str, rounds: int) -> None:  # noqa: ANN001
    print("| round | collective | default launches | wall time (s) | confirmed | refuted "
          "| file |")
    print("|---|---|---|---|---|---|---|")
    total = {1: [0, 0, 0, 0.0], 3: [0, 0, 0, 0.0]}
    with tempfile.TemporaryDirectory(prefix="reference-tunes-") as tmp:
        for r in range(rounds):
            for i, coll in enumerate(colls):
                for k in (1, 3) if (r + i) % 2 == 0 else (3, 1):
                    took, won, refuted, wrote = tune_once(
                        mpi, coll, np, sizes, ["--default-launches", str(k)],
                        Path(tmp) / f"{k}-{coll}-{r}")
                    tot = total[k]
                    tot[0] += len(won)
                    tot[1] += refuted
                    tot[2] += wrote
                    tot[3] += took
                    print(f"| {r + 1} | {coll} | {k} | {took:.0f} | {', '.join(won) or 'none'}"
                          f" | {refuted} | {'yes' if wrote else 'no'} |", flush=True)
    for k, (won, refuted, files, took) in total.items():
        print(f"\n{k} default launch(es): {won} confirmed, {refuted} refuted, {files} files "
              f"in {rounds * len(colls)} tunes, {took:.0f} s", end="")
    print()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", default=".venv-impi")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--coll", default="alltoall")
    ap.add_argument("--launches", type=int, default=12)
    ap.add_argument("--sizes", help="default: the tune's; with --tunes: 8,1K,16K,64K,1M")
    ap.add_argument("--tunes", help="whole tunes of these collectives instead")
    ap.add_argument("--rounds", type=int, default=2, help="with --tunes")
    a = ap.parse_args()
    mpi = find_impi(a.mpi)
    if a.tunes:
        tunes(mpi, a.tunes.split(","), a.np, a.sizes or "8,1K,16K,64K,1M", a.rounds)
    else:
        reference(mpi, a.coll, a.np, parse_sizes(a.sizes) if a.sizes else None, a.launches)


if __name__ == "__main__":
    main()

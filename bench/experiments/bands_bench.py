"""Benchmark for docs/benchmarks.md (issue 36): Intel MPI's sweep in shared launches (a
tuning file naming a preset per size band, tuner/bands.py) against a launch per preset.

    python bench/bands_bench.py --mpi .venv-impi --np 4 --coll bcast --rounds 2
    python bench/bands_bench.py --mpi .venv-impi --np 2 --tunes bcast,reduce,alltoall \
        --sizes 8,1K,16K,64K,1M --rounds 2

Each round measures the default and every preset at every size twice over, once per mode,
through colltune's own `measure` (the sweep's code path, its settings), the two modes
alternating, each into a store of its own. Printed per mode: the wall time of each sweep
and how many launches it took; then, between two sweeps of the same mode, how well they
agree: per size, Spearman's rank correlation of the presets' medians and the spread of
one preset's median from one sweep to the next (the ratio's 10th-90th percentiles over
presets and sizes). A sweep ranks presets for fresh launches to judge; one whose ranking
changes from sweep to sweep sends them the wrong candidates. Last, a preset's median in a
shared launch over its median in a launch of its own, and the default's from one sweep
to the next (what every preset is compared with).

With --tunes, whole tunes instead (`tune C --backend impi --sweep bands|relaunch`), the
two sweeps alternating per collective, round after round: what each confirmed and
whether it wrote a file, and its wall time; what a sweep is for.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# bench/ (clirun, impi_vs_mpitune) and this folder, run from anywhere
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).parent)]

from clirun import TUNE  # noqa: E402
from scipy import stats  # noqa: E402

from colltune.backends.impi.install import catalog, find_impi  # noqa: E402
from colltune.collectives import get_collective  # noqa: E402
from colltune.core.config import DEFAULT, Config  # noqa: E402
from colltune.core.space import sizes_for  # noqa: E402
from colltune.launchers import Launch  # noqa: E402
from colltune.options import MeasureSettings  # noqa: E402
from colltune.slots import place  # noqa: E402
from colltune.store import Store  # noqa: E402
from colltune.tuner import measure as measuring  # noqa: E402
from colltune.tuner.measure import Lab, context_for, measure  # noqa: E402

Medians = dict[tuple[int, int], float]  # (preset, size) -> median (s)


def sweep(mpi, cat, coll, placement, sizes: list[int], mode: str, db: Path,  # noqa: ANN001
          warmup: int) -> tuple[float, int, Medians]:
    """One sweep into a new store: its wall time, its launches, its medians."""
    presets = [DEFAULT, *(Config(p) for p in sorted(cat.algorithms[coll.name]) if p)]
    launches = 0
    real = measuring.run_kernel

    def counted(*a, **k):  # noqa: ANN002, ANN003, ANN202
        nonlocal launches
        launches += 1
        return real(*a, **k)

    measuring.run_kernel = counted  # type: ignore[assignment]
    store = Store(db)
    t = time.monotonic()
    try:
        measure(Lab(mpi, cat, store, MeasureSettings(warmup=warmup), mode), coll, placement,
                [(c, s) for c in presets for s in sizes])
    finally:
        measuring.run_kernel = real  # type: ignore[assignment]
    wall = time.monotonic() - t
    got = {(m.config.algorithm, m.size): m.median
           for m in store.measurements(context_for(mpi, coll, placement))
           if m.status == "ok" and m.median}
    return wall, launches, got


def agreement(a: Medians, b: Medians, sizes: list[int]) -> tuple[list[float], list[float]]:
    rhos, ratios = [], []
    for s in sizes:
        keys = sorted(k for k in a if k[1] == s and k in b and k[0] != 0)
        if len(keys) >= 3:
            rhos.append(float(stats.spearmanr([a[k] for k in keys],
                                              [b[k] for k in keys])[0]))
        ratios += [b[k] / a[k] for k in keys]
    return rhos, ratios


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpi", default=".venv-impi")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--coll", default="bcast")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--warmup", type=int, default=MeasureSettings.warmup,
                    help="warm-up calls before each point, in both sweeps (the tune's: 2)")
    ap.add_argument("--tunes", help="whole tunes of these collectives instead")
    ap.add_argument("--sizes", default="8,1K,16K,64K,1M", help="with --tunes")
    a = ap.parse_args()
    mpi = find_impi(a.mpi)
    if a.tunes:
        tunes(mpi, a.tunes.split(","), a.np, a.sizes, a.rounds)
        return
    coll = get_collective(a.coll)
    cat = catalog(mpi, [coll.name])
    placement = place(a.np, None, launch=Launch(launcher="mpiexec"))
    sizes = sizes_for(coll, a.np)
    runs: dict[str, list[tuple[float, int, Medians]]] = {"bands": [], "relaunch": []}
    with tempfile.TemporaryDirectory(prefix="bands-bench-") as tmp:
        for r in range(a.rounds):
            for mode in ("bands", "relaunch") if r % 2 == 0 else ("relaunch", "bands"):
                runs[mode].append(sweep(mpi, cat, coll, placement, sizes, mode,
                                        Path(tmp) / f"{mode}{r}.db", a.warmup))
                wall, n, _ = runs[mode][-1]
                print(f"round {r + 1} {mode}: {wall:.1f} s, {n} launches", flush=True)
    print(f"\n{coll.name}, {a.np} ranks, {len(sizes)} sizes, "
          f"{len(cat.algorithms[coll.name])} presets and the default, "
          f"{a.warmup} warm-up calls a point\n")
    print("| sweep | wall time (s) | launches | Spearman between two sweeps, per size "
          "(median, min) | one preset's median, sweep to sweep (10th-90th pct) |")
    print("|---|---|---|---|---|")
    for mode, got in runs.items():
        rhos, ratios = [], []
        for x, y in zip(got, got[1:], strict=False):
            r_, q = agreement(x[2], y[2], sizes)
            rhos += r_
            ratios += q
        dec = statistics.quantiles(ratios, n=10) if len(ratios) > 10 else [0.0] * 9
        print(f"| {mode} | {', '.join(f'{w:.1f}' for w, _, _ in got)} | "
              f"{', '.join(str(n) for _, n, _ in got)} | "
              f"{statistics.median(rhos):.2f}, {min(rhos):.2f} | "
              f"{dec[0]:.2f}-{dec[-1]:.2f}x |" if rhos else f"| {mode} | - |")
    print()
    cross(runs, sizes)


def cross(runs: dict[str, list[tuple[float, int, Medians]]], sizes: list[int]) -> None:
    """One preset's median in a shared launch over the same in a launch of its own (every
    pair of sweeps of the two modes), and the default's from one sweep to the next: what
    a sweep compares a preset with, and how much it moves."""
    presets, default = [], []
    for _, _, a in runs["relaunch"]:
        for _, _, b in runs["bands"]:
            presets += [b[k] / a[k] for k in a if k in b and k[0] != 0]
    sweeps = [m for mode in runs.values() for _, _, m in mode]
    for x, y in zip(sweeps, sweeps[1:], strict=False):
        default += [y[(0, s)] / x[(0, s)] for s in sizes if (0, s) in x and (0, s) in y]
    for what, r in (("a preset, shared launch / own launch", presets),
                    ("the default, one sweep / the previous", default)):
        if len(r) > 10:
            q = statistics.quantiles(r, n=10)
            print(f"{what}: median {statistics.median(r):.2f}x, 10th-90th pct "
                  f"{q[0]:.2f}-{q[-1]:.2f}x ({len(r)} pairs)")


def tune_once(mpi, coll: str, np: int, sizes: str, extra: list[str], work: Path,  # noqa: ANN001
              out_name: str = "f.json") -> tuple[float, list[str], int, bool]:
    """One `tune C --backend impi` in `work`: its wall time, the choices it confirmed, how
    many proposals fresh launches refuted, whether it wrote a file (`work/out_name`)."""
    work.mkdir()
    out, summ = work / out_name, work / "s.json"
    t = time.monotonic()
    subprocess.run([*TUNE, coll, "--backend", "impi", "--mpi",
                    str(mpi.prefix), "--np", str(np), "--sizes", sizes, *extra, "--out",
                    str(out), "--summary-json", str(summ), "--db", str(work / "d.db"), "-q"],
                   capture_output=True, check=True, timeout=3600)
    took = time.monotonic() - t
    ds = json.loads(summ.read_text())["collectives"].get(coll, {}).get(str(np), [])
    won = [f"{d['size']} B p{d['chosen']['algorithm']}" for d in ds
           if d.get("verdict") == "tuned"]
    return took, won, sum(d.get("verdict") == "refuted" for d in ds), out.exists()


def tunes(mpi, colls: list[str], np: int, sizes: str, rounds: int) -> None:  # noqa: ANN001
    print("| round | collective | sweep | wall time (s) | confirmed choices | file |")
    print("|---|---|---|---|---|---|")
    total: dict[str, list[int]] = {"bands": [0, 0], "relaunch": [0, 0]}
    with tempfile.TemporaryDirectory(prefix="bands-tunes-") as tmp:
        for r in range(rounds):
            for i, coll in enumerate(colls):
                order = ("bands", "relaunch") if (r + i) % 2 == 0 else ("relaunch", "bands")
                for mode in order:
                    took, won, _, wrote = tune_once(mpi, coll, np, sizes, ["--sweep", mode],
                                                    Path(tmp) / f"{mode}-{coll}-{r}")
                    total[mode][0] += len(won)
                    total[mode][1] += wrote
                    print(f"| {r + 1} | {coll} | {mode} | {took:.0f} | "
                          f"{', '.join(won) or 'none'} | {'yes' if wrote else 'no'} |",
                          flush=True)
    for mode, (won, files) in total.items():
        print(f"\n{mode}: {won} confirmed choices, {files} files in "
              f"{rounds * len(colls)} tunes", end="")
    print()


if __name__ == "__main__":
    main()

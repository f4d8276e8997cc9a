"""The cost models without noise: fit Hockney and LogGP on a simulated ping-pong between
two hosts of a SimGrid platform, simulate every algorithm of reduce, bcast and allreduce
at larger communicator sizes on the same platform, and report the models' errors and
picks there (what `tune model validate` reports on real runs).

    python bench/smpi_model_bench.py --platform docs/platforms/flat-64x8.xml --np 16,64
    python bench/smpi_model_bench.py --np 8,16,64 --fit collectives

`--fit probe` (default): parameters from the simulated ping-pong. `--fit collectives`:
parameters fitted on the simulated collectives at every --np but the largest
(`models.collfit`, per collective), judged at the largest: the extrapolation check
without noise.

One rank per host, so every message crosses the network the probe measured (the formulas
are single-level). The configurations are predicted with the segment sizes and fanouts
SMPI's ports use internally (backends.smpi.smpi_segsize), since those are what ran.
Prints markdown.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from colltune.backends.smpi import install as smpi
from colltune.collectives import get_collective
from colltune.launchers import Launch
from colltune.models.collfit import Observation, fit_on_collectives
from colltune.models.hockney import fit_hockney
from colltune.models.loggp import fit_loggp
from colltune.models.predict import MODELS, Models
from colltune.models.probe import run_probe
from colltune.models.validate import validate
from colltune.options import TuneOptions
from colltune.store import Measurement, Store
from colltune.tuner.measure import context_for
from colltune.tuner.run import tune


def as_ran(m: Measurement, coll: str, np: int) -> Measurement:
    """The measurement with the segment size and fanout SMPI's port really used."""
    if not m.config.algorithm:
        return m
    seg, fan = smpi.smpi_segsize(coll, m.config.algorithm, np, m.size)
    return replace(m, config=replace(m.config, segsize=seg, fanout=fan))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--platform", default="docs/platforms/flat-64x8.xml")
    ap.add_argument("--np", default="16,64")
    ap.add_argument("--collectives", default="reduce,bcast,allreduce")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--fit", choices=("probe", "collectives"), default="probe")
    args = ap.parse_args()
    inst = smpi.find_smpi(None, args.platform)
    cat = smpi.catalog()
    t0 = time.monotonic()
    data = run_probe(inst, smpi.place(inst, 2, Launch(ppn=1)), reps=args.reps)
    h, lg = fit_hockney(data), fit_loggp(data)
    models = Models(h, lg, f"simulated ping-pong on {Path(args.platform).name}")
    print(f"probe ({time.monotonic() - t0:.0f} s): Hockney {h.as_json()}\n")
    print(f"LogGP {lg.as_json()}\n")
    print("| collective | np | algorithm | median error Hockney | LogGP | worst Hockney |"
          " LogGP |")
    print("|---|---|---|---|---|---|---|")
    picks = []
    nps = [int(x) for x in args.np.split(",")]
    ran: dict[tuple[str, int], list[Measurement]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "m.sqlite"
        for np in nps:
            for name in args.collectives.split(","):
                coll = get_collective(name)
                opts = TuneOptions([name], [np], backend="smpi", platform=Path(args.platform),
                                   db=db, launch=Launch(ppn=1))
                opts.settings.timeout = 60.0
                tune(opts)
                store = Store(db)
                try:
                    ms = store.measurements(context_for(inst, coll,
                                                        smpi.place(inst, np, Launch(ppn=1))))
                finally:
                    store.close()
                ran[(name, np)] = [as_ran(m, name, np) for m in ms]
    judged = nps if args.fit == "probe" else nps[-1:]
    for np in judged:
        for name in args.collectives.split(","):
            coll = get_collective(name)
            if args.fit == "collectives":
                obs = [Observation(coll, n, m.config, m.size, m.median)
                       for n in nps[:-1] for m in ran[(name, n)] if m.status == "ok" and m.median]
                models = fit_on_collectives(obs, cat)
            v = validate(models, coll, cat, np, ran[(name, np)])
            for a in v.per_algorithm:
                print(f"| {name} | {np} | {a.algorithm} | "
                      + " | ".join(f"{a.median[k]:.0%}" for k in MODELS) + " | "
                      + " | ".join(f"{a.worst[k]:.0%}" for k in MODELS) + " |")
            picks.append((name, np, v))
    print("\n| collective | np | sizes | median error Hockney | LogGP | pick within 5% "
          "Hockney | LogGP |")
    print("|---|---|---|---|---|---|---|")
    for name, np, v in picks:
        print(f"| {name} | {np} | {v.sizes} | "
              + " | ".join(f"{v.overall_median[k]:.0%}" for k in MODELS) + " | "
              + " | ".join(f"{v.picks_within[k]}/{v.sizes}" for k in MODELS) + " |")
    print(f"\nwall time {time.monotonic() - t0:.0f} s")


if __name__ == "__main__":
    main()

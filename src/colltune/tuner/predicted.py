"""Decisions from the cost models fitted on what was measured, at the communicator sizes
asked (`tune --predict`): stage 3 without measuring there."""

from __future__ import annotations

from colltune.backends import registry
from colltune.backends.base import Decisions
from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.plan import Plan
from colltune.core.records import Decision
from colltune.core.toolchain import Installation
from colltune.slots import Placement
from colltune.store import Store
from colltune.tuner.context import Run
from colltune.tuner.measure import context_for


def predict_all(run: Run, colls: list[str]) -> Decisions:
    """Stage 3 with --predict: choose at each --np what the models fitted on the measured
    sizes predict fastest."""
    decisions: Decisions = {}
    for name in colls:
        for np, (ds, text) in predict_decisions(run.store, run.mpi, run.plan,
                                                run.collective(name), run.sess.placements,
                                                run.opts.nps).items():
            decisions.setdefault(name, {})[np] = ds
            run.predicted[(name, np)] = text
            run.rep.note(f"{name} np={np}: {text}")
    return decisions


def has_formulas(catalog: Catalog) -> bool:
    from colltune.models.formulas import has_formulas  # numpy: only when models are asked

    return has_formulas(catalog)


def predict_decisions(store: Store, mpi: Installation, plan: Plan, coll: Collective,
                      measured: list[Placement], targets: list[int]
                      ) -> dict[int, tuple[list[Decision], str]]:
    """Fit both models on what was measured at the `measured` sizes, keep the one with the
    smaller median error, and choose at each target size what it predicts fastest."""
    from colltune.models.collfit import Observation, fit_on_collectives
    from colltune.models.predict import predict

    obs = [Observation(coll, pl.np, m.config, m.size, m.median)
           for pl in measured for m in store.measurements(context_for(mpi, coll, pl))
           if m.status == "ok" and m.median]
    catalog, rule_size = plan.catalog, registry.of(mpi).rule_size
    models = fit_on_collectives(obs, catalog)
    err = {"hockney": models.hockney.quality.median_rel, "loggp": models.loggp.quality.median_rel}
    which = min(err, key=lambda k: err[k])
    out: dict[int, tuple[list[Decision], str]] = {}
    for np in targets:
        ds = []
        for size in plan.sizes_at(coll, np):
            cands = plan.candidates(coll, np, size)
            ranked = predict(models, coll, catalog, np, size, cands, rank_by=which)
            if not ranked:
                continue
            top = ranked[0]
            ds.append(Decision(size, rule_size(coll, size, np), top.config, top.config,
                               top.time(which), None, None, False,
                               reason=f"predicted {top.time(which) * 1e6:.1f} us by {which}",
                               predicted=True))
        text = (f"{which} model {models.source} (median error there "
                f"{100 * err[which]:.0f}%); the library default cannot be predicted and "
                "was not compared; check with tune verify at this size before relying on it")
        out[np] = (ds, text)
    return out

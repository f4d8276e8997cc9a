"""The search strategies by name (`--strategy`), a registry like the backends': each entry
starts one search over a collective's candidates at one communicator size."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.options import TuneOptions
from colltune.store import Store
from colltune.tuner.asktell import Outcome, Strategy, grid
from colltune.tuner.bayes import BayesSettings, bayesian
from colltune.tuner.guided import guided, shortlist
from colltune.tuner.race import RaceSettings, racing

if TYPE_CHECKING:  # numpy, which the models need, stays out of every CLI start
    from colltune.models.predict import Prediction


@dataclass(frozen=True)
class Request:
    """What a strategy may look at when it starts: the candidates per size, and for a
    model-guided search the store's fits of this installation."""

    opts: TuneOptions
    cands: dict[int, list[Config]]  # size -> configurations worth measuring there
    store: Store
    mpi: Installation
    catalog: Catalog
    coll: Collective
    np: int


@dataclass
class Started:
    strategy: Strategy[Outcome]
    note: str | None = None  # what the user is told before it runs
    record: dict[str, object] = field(default_factory=dict)  # added to the search's record


def _grid(r: Request) -> Started:
    return Started(grid(r.cands))


def _race(r: Request) -> Started:
    return Started(racing(r.cands, RaceSettings(budget=r.opts.budget)))


def _bayes(r: Request) -> Started:
    if r.opts.budget and r.opts.budget < len(r.cands):
        raise ColltuneError(
            f"--budget {r.opts.budget} is less than the {len(r.cands)} sizes of {r.coll.name}: "
            "the default is always measured at every size",
            f"use --budget {len(r.cands)} or more, or fewer --sizes")
    return Started(bayesian(r.cands, BayesSettings(budget=r.opts.budget, ei_stop=r.opts.ei_stop,
                                                   seed=r.opts.settings.seed)))


def model_ranking(r: Request) -> dict[int, list[Prediction]]:
    """Per size, the candidates the fitted Hockney model can price, fastest first;
    configurations without a formula are left out: nothing says they are good."""
    from colltune.models.predict import load_models, predict

    models = load_models(r.store, r.mpi)
    return {size: predict(models, r.coll, r.catalog, r.np, size, r.cands[size])
            for size in sorted(r.cands)}


def _model(r: Request) -> Started:
    ranked = model_ranking(r)
    k = r.opts.top_k
    short = sum(1 + len(shortlist(p, k)) for p in ranked.values())
    points = sum(len(c) for c in r.cands.values())
    return Started(guided(ranked, k, RaceSettings(budget=r.opts.budget)),
                   f"model: racing {short} of {points} points (per size the fitted model's "
                   f"top {k}, each algorithm's best-predicted variant, and the default)",
                   {"top_k": k, "shortlisted": short})


STRATEGIES: dict[str, Callable[[Request], Started]] = {
    "grid": _grid, "race": _race, "bayes": _bayes, "model": _model}

"""Predicted times of every configuration of a collective from the fitted models in the
store, ranked: what `tune model predict` prints and what `--strategy model` measures."""

from __future__ import annotations

import socket
from dataclasses import dataclass

from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.space import useful_at
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.models.formulas import cost
from colltune.models.hockney import Hockney
from colltune.models.loggp import LogGP
from colltune.models.network import HockneyNet, LogGPNet
from colltune.store import Store


@dataclass(frozen=True)
class Models:
    hockney: Hockney
    loggp: LogGP
    source: str  # which fit: MPI, host, ranks, when
    gamma_loggp: float | None = None  # LogGP's own gamma when fitted apart from Hockney's

    @property
    def loggp_gamma(self) -> float:
        return self.hockney.gamma if self.gamma_loggp is None else self.gamma_loggp


@dataclass(frozen=True)
class Prediction:
    config: Config
    hockney: float  # seconds
    loggp: float

    def time(self, model: str) -> float:
        return self.hockney if model == "hockney" else self.loggp


def load_models(store: Store, mpi: Installation, host: str | None = None) -> Models:
    """The latest Hockney and LogGP fit for this MPI on this host."""
    host = host or socket.gethostname()
    fits = [f for f in store.models() if f.mpi_key == mpi.key and f.host == host]
    if not fits:
        raise ColltuneError(f"no fitted models for {mpi.describe()} on {host}",
                            "run `tune model fit --mpi PREFIX` first (a few seconds)")
    latest = max(f.created for f in fits)
    by = {f.model: f for f in fits if f.created == latest}
    if "hockney" not in by or "loggp" not in by:
        raise ColltuneError("the store holds only part of a model fit",
                            "run `tune model fit` again")
    h = by["hockney"]
    return Models(Hockney.from_json(h.params), LogGP.from_json(by["loggp"].params),
                  f"fit on {h.np} ranks of {h.host} ({mpi.name} {h.mpi_version}), {latest}")


MODELS = ("hockney", "loggp")


def predict(models: Models, coll: Collective, catalog: Catalog, np: int, size: int,
            configs: list[Config], rank_by: str = "hockney") -> list[Prediction]:
    """Every configuration of `configs` (a plan's, at this size) with a formula, fastest
    first by the model `rank_by`."""
    h, lg = HockneyNet(models.hockney), LogGPNet(models.loggp, models.loggp_gamma)
    out = []
    for c in configs:
        # the library's own decision has no formula: it is measured
        found = cost(catalog, coll.name, c, np, float(size)) if useful_at(c, size, catalog) \
            else None
        if found is not None:
            fn, shape = found
            out.append(Prediction(c, fn(h, shape), fn(lg, shape)))
    return sorted(out, key=lambda p: (p.time(rank_by), p.config))

"""Model-guided search (`--strategy model`): the cost models shortlist the configurations
worth measuring at each size, and a race among them (and the library default) decides.

Why a shortlist of this shape: a model ranks the variants of one algorithm (segment size,
fanout: the same pattern, more or less pipelined) far better than it ranks different
algorithms against each other, which on a node can differ by less than the model's error
(docs/benchmarks.md, "Cost models"). So every algorithm keeps its best-predicted variant,
and the k configurations predicted fastest overall join them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from colltune.core.config import DEFAULT, Config
from colltune.tuner.asktell import Strategy
from colltune.tuner.race import RaceOutcome, RaceSettings, racing

if TYPE_CHECKING:  # numpy, which the models need, stays out of every CLI start
    from colltune.models.predict import Prediction


def guided(ranked: dict[int, list[Prediction]], k: int, settings: RaceSettings | None = None
           ) -> Strategy[RaceOutcome]:
    """Race, per size, the default and the shortlist of the model's ranking there."""
    return (yield from racing({size: [DEFAULT] + shortlist(r, k)
                               for size, r in ranked.items()}, settings))


def shortlist(ranked: list[Prediction], k: int) -> list[Config]:
    """The k fastest predictions and each algorithm's fastest one; `ranked` fastest first."""
    keep = {p.config for p in ranked[:k]}
    seen: set[int] = set()
    for p in ranked:
        if p.config.algorithm not in seen:
            seen.add(p.config.algorithm)
            keep.add(p.config)
    return sorted(keep)

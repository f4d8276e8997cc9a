"""Predicted against measured: for every configuration and size in the store, the relative
error of each model, summarised per algorithm, and how often each model's pick is within
5% of the measured best (`tune model validate`)."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT
from colltune.models.predict import MODELS, Models, predict
from colltune.store import Measurement


@dataclass
class AlgorithmError:
    algorithm: str
    points: int
    median: dict[str, float]  # model -> median relative error
    worst: dict[str, float]


@dataclass
class Validation:
    collective: str
    np: int
    per_algorithm: list[AlgorithmError] = field(default_factory=list)
    picks_within: dict[str, int] = field(default_factory=dict)  # model -> sizes
    sizes: int = 0
    overall_median: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, object]:
        return {"collective": self.collective, "np": self.np, "sizes": self.sizes,
                "picks_within_5pct": self.picks_within, "overall_median": self.overall_median,
                "per_algorithm": [a.__dict__ for a in self.per_algorithm]}


def validate(models: Models, coll: Collective, catalog: Catalog, np: int,
             ms: list[Measurement], tolerance: float = 0.05) -> Validation:
    ok = [m for m in ms if m.status == "ok" and m.median]
    out = Validation(coll.name, np, picks_within={k: 0 for k in MODELS})
    errors: dict[str, dict[str, list[float]]] = {}
    for size in sorted({m.size for m in ok}):
        here = {m.config: m for m in ok if m.size == size}
        preds = predict(models, coll, catalog, np, size, [c for c in here if c != DEFAULT])
        if not preds:
            continue
        out.sizes += 1
        best = min(m.median for m in here.values() if m.median)
        for p in preds:
            measured = here[p.config].median or 0.0
            name = catalog.algorithm_name(coll.name, p.config.algorithm)
            for k in MODELS:
                errors.setdefault(name, {}).setdefault(k, []).append(
                    abs(p.time(k) - measured) / measured)
        for k in MODELS:
            pick = sorted(preds, key=lambda p: p.time(k))[0].config  # noqa: B023 (used here)
            out.picks_within[k] += (here[pick].median or 0.0) <= best * (1 + tolerance)
    for name, per in sorted(errors.items()):
        out.per_algorithm.append(AlgorithmError(
            name, len(per[MODELS[0]]), {k: statistics.median(v) for k, v in per.items()},
            {k: max(v) for k, v in per.items()}))
    for k in MODELS:
        allv = [e for per in errors.values() for e in per[k]]
        out.overall_median[k] = statistics.median(allv) if allv else float("nan")
    return out

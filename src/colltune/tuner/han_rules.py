"""Turn per-size decisions among coll/han's choices into han's rules file and settings.

han takes its component and algorithm per message size from its file, but the modules of
its levels only per collective. So the level modules are chosen once per collective (the
pair with the lowest geometric-mean time over the sizes that run han's default algorithm,
if it beats han's own modules by the minimum gain), and every size that runs han's default
algorithm runs with that pair.
"""

from __future__ import annotations

import math
from dataclasses import replace
from statistics import median

from colltune.backends.han import BASELINE, Choice, HanCatalog, HanRules
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.store import Measurement
from colltune.tuner.decide import boundaries


def _medians(ms: list[Measurement]) -> dict[tuple[int, int], float]:
    out: dict[tuple[int, int], float] = {}
    for m in ms:
        if m.status == "ok" and m.samples:
            out[(m.config.algorithm, m.size)] = median(m.samples)
    return out


def choose_modules(coll: str, catalog: HanCatalog, ds: list[Decision],
                   ms: list[Measurement], min_gain: float) -> tuple[tuple[int, int], list[str]]:
    """The collective's (up, low) modules, and what that choice overrode."""
    med = _medians(ms)
    chosen = {d.size: catalog.choice(coll, d.chosen.algorithm) for d in ds}
    sizes = [s for s, c in chosen.items() if c.component == "han" and c.algorithm == "default"]
    variants = {c.modules: i for i, c in catalog.choices.get(coll, {}).items()
                if c.component == "han" and c.algorithm == "default"}
    best, best_score = (0, 0), 0.0
    for pair, alg in sorted(variants.items()):
        logs = [math.log(med[(alg, s)] / med[(0, s)]) for s in sizes
                if (alg, s) in med and (0, s) in med]
        if pair == (0, 0) or len(logs) < len(sizes) or not logs:
            continue
        score = sum(logs) / len(logs)
        if score < math.log(1 - min_gain) and score < best_score:
            best, best_score = pair, score
    notes = [f"{coll} {s} B: {chosen[s].label} was fastest; han's level modules are one "
             f"setting per collective ({Choice('han', 'default', *best).label})"
             for s in sizes if chosen[s].modules not in ((0, 0), best)]
    return best, notes


def apply_modules(coll: str, catalog: HanCatalog, ds: list[Decision],
                  modules: tuple[int, int]) -> list[Decision]:
    """Decisions as Open MPI will run them once the collective's modules are set: every
    size on han's default algorithm uses `modules`."""
    ids = {c: i for i, c in catalog.choices.get(coll, {}).items()}
    target = Config(ids[Choice("han", "default", *modules)]) if modules != (0, 0) else DEFAULT
    out = []
    for d in ds:
        c = catalog.choice(coll, d.chosen.algorithm)
        if c.component == "han" and c.algorithm == "default" and d.chosen != target:
            d = replace(d, chosen=target)
        out.append(d)
    return out


def keep_confirmed_modules(coll: str, catalog: HanCatalog, ds: list[Decision],
                           modules: tuple[int, int]) -> tuple[list[Decision], str | None]:
    """After fresh-launch confirmation: if any size on han's default algorithm went back
    to han's own modules, the collective's modules cannot be set (they would apply there
    too), so every size on han's default algorithm goes back to han's own."""
    family = [d for d in ds if catalog.choice(coll, d.chosen.algorithm).algorithm == "default"
              and catalog.choice(coll, d.chosen.algorithm).component == "han"]
    if all(d.chosen != DEFAULT for d in family):
        return ds, None
    label = Choice("han", "default", *modules).label
    note = (f"{coll}: {label} was not confirmed at every size that runs han's default "
            "algorithm; han's own level modules kept")
    out = [replace(new, reason=f"{label} not set: refuted at another size")
           if new.chosen != old.chosen else new
           for old, new in zip(ds, apply_modules(coll, catalog, ds, (0, 0)), strict=True)]
    return out, note


def han_rules(coll: str, catalog: HanCatalog, per_np: dict[int, list[Decision]]) -> HanRules:
    """Message-size rules per communicator size; thresholds between measured sizes as for
    coll/tuned (the geometric midpoint), on the per-rank block han compares."""
    out: HanRules = {coll: {}}
    for np, ds in sorted(per_np.items()):
        ordered = sorted(ds, key=lambda d: d.size)
        rows: list[tuple[int, Choice]] = []
        for start, d in zip(boundaries([max(d.size, 0) for d in ordered]), ordered,
                            strict=False):
            c = catalog.choice(coll, d.chosen.algorithm)
            entry = Choice(c.component, c.algorithm)  # modules are not per size
            if not rows or rows[-1][1] != entry:
                rows.append((start, entry))
        out[coll][np] = rows or [(0, BASELINE)]
    return out

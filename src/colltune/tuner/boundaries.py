"""Measured boundaries: where two neighbouring measured sizes decide differently, both
configurations (and the library default) are measured between them, in the middle in log
size, until the switch is located within a factor of FACTOR or the neighbours agree. The
writers put a boundary between the two closest measured sizes that decide differently, so
every range they write has a measurement of its configuration at both of its ends, and the
boundary is where the measurements switch, not at a guessed midpoint eight times wide.

Each round is one measuring launch for every open boundary of the collective (the MPI_T
sweep); the points are stored like any other, so --from-db and a resumed run see them."""

from __future__ import annotations

import math
from collections.abc import Callable

from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.core.space import sizes_for, useful_at
from colltune.tuner.context import Run, Target
from colltune.tuner.decide import decide
from colltune.tuner.measure import measure

FACTOR = 1.25  # a switch located within this factor in size is located
MAX_ROUNDS = 8  # from a factor of 8 between grid sizes, 4 rounds reach 1.25; noise may add


def between(a: int, b: int, granularity: int) -> int | None:
    """The size in the middle of (a, b) in log size, a multiple of the granularity; None
    when no such size lies strictly between."""
    mid = math.sqrt(a * b) if a > 0 else b / 2
    m = max(granularity, round(mid / granularity) * granularity)
    return m if a < m < b else None


def refine(run: Run, t: Target, view: Callable[[], list[Decision]] | None = None) -> int:
    """Measure between differing neighbours until every switch is located; returns the
    points measured. `view` gives the decisions to compare (by default the sweep's; after
    confirmation, the confirmed ones: a refuted switch is not located)."""
    coll, placement, opts = t.coll, t.placement, run.opts
    if not coll.size_dependent:
        return 0
    ctx = run.context(t)
    backend, failed = run.backend, run.failed(t)
    added = 0
    for _ in range(MAX_ROUNDS):
        now = view() if view else decide(coll, placement.np, run.store.measurements(ctx),
                                         opts.alpha, opts.min_gain, backend.traits.exact,
                                         backend.rule_size, opts.min_samples)
        ds = sorted((d for d in now if d.size >= 0), key=lambda d: d.size)
        todo: set[tuple[Config, int]] = set()
        for a, b in zip(ds, ds[1:], strict=False):
            if a.chosen == b.chosen or b.size <= a.size * FACTOR:
                continue
            mid = between(a.size, b.size, coll.granularity)
            if mid is None or sizes_for(coll, placement.np, [mid]) != [mid]:
                continue  # no size between, or too large a buffer for this collective
            todo |= {(c, mid) for c in (DEFAULT, a.chosen, b.chosen)
                     if useful_at(c, mid, run.catalog)}
        done = run.store.done(ctx)
        todo = {p for p in todo if (p[0].key, p[1]) not in done}
        if not todo:
            break
        run.rep.note(f"{t.where}: locating "
                     f"{len({s for _, s in todo})} boundary(ies) between measured sizes")
        for cfg, r in measure(run.lab, coll, placement, sorted(todo)):
            failed(cfg, r)
        added += len(todo)
    return added

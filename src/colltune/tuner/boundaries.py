"""Measured boundaries: where two neighbouring measured sizes decide differently, both
configurations (and the library default) are measured between them, in the middle in log
size, until the switch is located within a factor of FACTOR or the neighbours agree. The
writers put a boundary between the two closest measured sizes that decide differently, so
every range they write has a measurement of its configuration at both of its ends, and the
boundary is where the measurements switch, not at a guessed midpoint eight times wide.

Each round is one measuring launch for every open boundary of the collective (the MPI_T
sweep); the points are stored like any other, so --from-db and a resumed run see them.
Where a launch costs more than the points it would save (at scale a launch's start-up on
32 nodes is seconds of every node, a simulated point milliseconds), one round asks every
size the bisection's later rounds could ask, instead of one round each."""

from __future__ import annotations

import math
from collections.abc import Callable

from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.core.space import sizes_for, useful_at
from colltune.tuner import forecast
from colltune.tuner.context import Run, Target
from colltune.tuner.decide import decide
from colltune.tuner.forecast import Prices
from colltune.tuner.measure import measure

FACTOR = 1.25  # a switch located within this factor in size is located
# where a side of a switch runs this many times faster than the default, the range left to
# the library between the two closest measured sizes may lose all of it: such a switch is
# located finer, within FACTOR ** (1 / log_STAKE(stake)): x1.14 at 10x, x1.12 at 16x
STAKE = 4.0
MAX_ROUNDS = 8  # from a factor of 8 between grid sizes, 4 rounds reach 1.25; noise may add


def between(a: int, b: int, granularity: int) -> int | None:
    """The size in the middle of (a, b) in log size, a multiple of the granularity; None
    when no such size lies strictly between."""
    mid = math.sqrt(a * b) if a > 0 else b / 2
    m = max(granularity, round(mid / granularity) * granularity)
    return m if a < m < b else None


def within(a: Decision, b: Decision) -> float:
    """The factor in size within which the switch between neighbours `a` and `b` is
    located: FACTOR, finer where a side's choice gains STAKE or more over the default."""
    stake = max(a.speedup or 1.0, b.speedup or 1.0)
    return FACTOR ** (1 / max(1.0, math.log(stake, STAKE)))


def rounds_to_locate(a: int, b: int, factor: float = FACTOR) -> int:
    """The rounds of bisection in log size that bring a switch between `a` and `b` within
    `factor` (at least one)."""
    rounds, ratio = 1, math.sqrt(b / a) if a > 0 else 2.0
    while ratio > factor:
        rounds, ratio = rounds + 1, math.sqrt(ratio)
    return rounds


def bisection(a: int, b: int, granularity: int, rounds: int) -> list[int]:
    """Every size `rounds` rounds of bisection between `a` and `b` could ask, in order:
    the middle, then the middles of both halves, and so on (2^rounds - 1 at most)."""
    mid = between(a, b, granularity)
    if mid is None:
        return []
    if rounds <= 1:
        return [mid]
    return [*bisection(a, mid, granularity, rounds - 1), mid,
            *bisection(mid, b, granularity, rounds - 1)]


Points = set[tuple[Config, int]]


def next_round(coll: Collective, np: int, ds: list[Decision], catalog: Catalog,
               done: set[tuple[str, int]], pr: Prices) -> tuple[Points, bool]:
    """The points the next round measures between neighbouring sizes `ds` decide
    differently (the default and both choices; none held in `done` as (configuration key,
    size)), and whether the round asks every size later rounds of bisection could, because
    the launches that saves cost more than the extra points at the prices `pr`."""
    ds = sorted((d for d in ds if d.size >= 0), key=lambda d: d.size)
    one: Points = set()  # the middle of each switch
    deep: Points = set()  # every size its later rounds could ask
    rounds = 0  # the most rounds one switch would take, one size a round
    for a, b in zip(ds, ds[1:], strict=False):
        factor = within(a, b)
        if a.chosen == b.chosen or b.size <= a.size * factor:
            continue
        need = rounds_to_locate(a.size, b.size, factor)
        rounds = max(rounds, need)
        sizes = [m for m in bisection(a.size, b.size, coll.granularity, need)
                 if sizes_for(coll, np, [m]) == [m]]  # not too large a buffer here
        asked = {(c, m) for m in sizes for c in (DEFAULT, a.chosen, b.chosen)
                 if useful_at(c, m, catalog) and (c.key, m) not in done}
        deep |= asked
        mid = between(a.size, b.size, coll.granularity)
        one |= {p for p in asked if p[1] == mid}
    extra = deep - one
    saved = rounds - 1
    at_once = bool(one) and bool(extra) and saved * pr.startup > sum(
        pr.at(coll.name, size) for _, size in extra)
    return (deep if at_once else one), at_once


def prices_for(run: Run, t: Target) -> Prices:
    """A launch's and a point's price for this run, as its plan and budget price them."""
    return run.budget.prices if run.budget is not None else forecast.prices(
        forecast.store_path(run.opts), run.mpi.key, t.placement.nodes, run.exact, run.opts)


def refine(run: Run, t: Target, view: Callable[[], list[Decision]] | None = None) -> int:
    """Measure between differing neighbours until every switch is located; returns the
    points measured. `view` gives the decisions to compare (by default the sweep's; after
    confirmation, the confirmed ones: a refuted switch is not located)."""
    coll, placement, opts = t.coll, t.placement, run.opts
    if not coll.size_dependent:
        return 0
    ctx = run.context(t)
    backend, failed = run.backend, run.failed(t)
    pr = prices_for(run, t)
    added = 0
    for _ in range(MAX_ROUNDS):
        now = view() if view else decide(coll, placement.np, run.store.measurements(ctx),
                                         opts.alpha, opts.min_gain, backend.traits.exact,
                                         backend.rule_size, opts.min_samples)
        todo, at_once = next_round(coll, placement.np, now, run.catalog,
                                   run.store.done(ctx), pr)
        if not todo:
            break
        run.rep.note(f"{t.where}: locating "
                     f"{len({s for _, s in todo})} boundary(ies) between measured sizes"
                     + (" in one round (a launch costs more than the points it saves)"
                        if at_once else ""))
        for cfg, r in measure(run.lab, coll, placement, sorted(todo)):
            failed(cfg, r)
        added += len(todo)
    return added

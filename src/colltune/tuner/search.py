"""One collective at one communicator size, searched with the chosen strategy: the
candidates, the strategy (by name from tuner/strategies.py), and the ask/tell driver's
measure."""

from __future__ import annotations

from colltune.collectives import Collective
from colltune.core.config import Config
from colltune.slots import Placement
from colltune.tuner.asktell import drive
from colltune.tuner.context import Run, Target
from colltune.tuner.live import store_measure
from colltune.tuner.measure import measure_lanes
from colltune.tuner.strategies import STRATEGIES, Request


def sweep_ladder(run: Run, coll: Collective, rungs: list[Placement]) -> None:
    """The grid of every rung of a ladder of communicator sizes in one launch (per
    configuration where the library cannot switch inside one): each rung's search then
    finds its points stored."""
    lanes = [(p, run.plan.points(coll, p.np)) for p in rungs]
    for p, cfg, r in measure_lanes(run.lab, coll, lanes):
        run.failed(Target(coll, p))(cfg, r)


def search_one(run: Run, t: Target) -> None:
    """Measure one collective at one communicator size with the chosen strategy (every
    strategy through the same ask/tell driver); failed points go to the run's failures,
    what a search did to its searches."""
    opts, np = run.opts, t.placement.np
    pts = run.plan.points(t.coll, np)
    cands: dict[int, list[Config]] = {}
    for c, sz in pts:
        cands.setdefault(sz, []).append(c)
    started = STRATEGIES[opts.strategy](Request(opts, cands, run.store, run.mpi, run.catalog,
                                                t.coll, np))
    if started.note:
        run.rep.note(f"{t.where}: {started.note}")
    m = store_measure(run.lab, t.coll, t.placement, run.failed(t))
    out = drive(started.strategy, m)
    record, line = out.record(len(pts)), out.describe(len(pts))
    if record is not None:
        run.searches[t.where] = {**record, **started.record}
    if line is not None:
        run.rep.note(f"{t.where}: {opts.strategy} {line}")

"""One collective at one communicator size, searched with the chosen strategy: the
candidates, the strategy (by name from tuner/strategies.py), and the ask/tell driver's
measure."""

from __future__ import annotations

from collections.abc import Callable

from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.plan import Plan
from colltune.core.records import PointResult
from colltune.core.toolchain import Installation
from colltune.options import TuneOptions
from colltune.slots import Placement
from colltune.store import Store
from colltune.tuner.asktell import drive
from colltune.tuner.live import store_measure
from colltune.tuner.measure import Reporter, measure_lanes
from colltune.tuner.strategies import STRATEGIES, Request


def failure_note(failures: list[str], coll: Collective, placement: Placement,
                 catalog: Catalog) -> Callable[[Config, PointResult], None]:
    """What records a failed point in `failures`, one line each."""
    where = f"{coll.name} np={placement.np}"

    def failed(cfg: Config, r: PointResult) -> None:
        failures.append(f"{where} {cfg.label(catalog, coll.name)} {r.size} B: {r.status}"
                        + (f" ({r.message})" if r.message else ""))
    return failed


def sweep_ladder(opts: TuneOptions, mpi: Installation, plan: Plan, coll: Collective,
                 rungs: list[Placement], store: Store, sweep: str, rep: Reporter,
                 failures: list[str]) -> None:
    """The grid of every rung of a ladder of communicator sizes in one launch (per
    configuration where the library cannot switch inside one): each rung's search then
    finds its points stored."""
    catalog = plan.catalog
    lanes = [(p, plan.points(coll, p.np)) for p in rungs]
    for p, cfg, r in measure_lanes(mpi, catalog, coll, lanes, store, opts.settings, sweep,
                                   rep):
        failure_note(failures, coll, p, catalog)(cfg, r)


def search_one(opts: TuneOptions, mpi: Installation, plan: Plan, coll: Collective,
               placement: Placement, store: Store, sweep: str, rep: Reporter,
               failures: list[str], searches: dict[str, dict[str, object]]) -> None:
    """Measure one collective at one communicator size with the chosen strategy (every
    strategy through the same ask/tell driver); failed points go to `failures`, what a
    search did to `searches`."""
    catalog = plan.catalog
    pts = plan.points(coll, placement.np)
    where = f"{coll.name} np={placement.np}"

    failed = failure_note(failures, coll, placement, catalog)

    cands: dict[int, list[Config]] = {}
    for c, sz in pts:
        cands.setdefault(sz, []).append(c)
    started = STRATEGIES[opts.strategy](Request(opts, cands, store, mpi, catalog, coll,
                                                placement.np))
    if started.note:
        rep.note(f"{where}: {started.note}")
    m = store_measure(mpi, catalog, coll, placement, store, opts.settings, sweep, rep, failed)
    out = drive(started.strategy, m)
    record, line = out.record(len(pts)), out.describe(len(pts))
    if record is not None:
        searches[where] = {**record, **started.record}
    if line is not None:
        rep.note(f"{where}: {opts.strategy} {line}")



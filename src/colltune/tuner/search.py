"""One collective at one communicator size, searched with the chosen strategy: the
candidates, the strategy (by name from tuner/strategies.py), and the ask/tell driver's
measure."""

from __future__ import annotations

from collections.abc import Callable

from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.records import PointResult
from colltune.core.space import configurations, sizes_for, useful_at
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


def candidates(opts: TuneOptions, catalog: Catalog, grid: dict[str, list[int]],
               coll: Collective, np: int) -> list[tuple[Config, int]]:
    """Every (configuration, size) worth measuring at communicator size `np` (`grid`: the
    values the user and the family's output allow per parameter, Session.grid)."""
    cfgs = configurations(coll, catalog, np, grid)
    return [(c, s) for c in cfgs for s in sizes_for(coll, np, opts.sizes)
            if useful_at(c, s, catalog)]


def sweep_ladder(opts: TuneOptions, mpi: Installation, catalog: Catalog,
                 grid: dict[str, list[int]],
                 coll: Collective, rungs: list[Placement], store: Store, sweep: str,
                 rep: Reporter, failures: list[str]) -> None:
    """The grid of every rung of a ladder of communicator sizes in one launch (per
    configuration where the library cannot switch inside one): each rung's search then
    finds its points stored."""
    lanes = [(p, candidates(opts, catalog, grid, coll, p.np)) for p in rungs]
    for p, cfg, r in measure_lanes(mpi, catalog, coll, lanes, store, opts.settings, sweep,
                                   rep):
        failure_note(failures, coll, p, catalog)(cfg, r)


def search_one(opts: TuneOptions, mpi: Installation, catalog: Catalog,
               grid: dict[str, list[int]],
               coll: Collective, placement: Placement, store: Store, sweep: str,
               rep: Reporter, failures: list[str], searches: dict[str, dict[str, object]]
               ) -> None:
    """Measure one collective at one communicator size with the chosen strategy (every
    strategy through the same ask/tell driver); failed points go to `failures`, what a
    search did to `searches`."""
    pts = candidates(opts, catalog, grid, coll, placement.np)
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



"""What a tune will hold of its allocation, said before it runs (`tune ... --dry-run`, and
the time limit of `--slurm-script`): the tune's own plan of points and the launches its
sweep groups them in, each priced from the store's earlier accounts of the installation
(core/account.py) where it has them, else from stated defaults; the stages after the sweep
(fresh launch pairs, locating switches) as the share of the sweep they took before."""

from __future__ import annotations

import math
import socket
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colltune.collectives import Collective, get_collective
from colltune.core import account
from colltune.core.clock import PAIRS, SWEEP, SWITCHES
from colltune.core.plan import Plan
from colltune.options import MeasureSettings, TuneOptions
from colltune.slots import Placement
from colltune.store import Store, default_db_path
from colltune.tuner.bayes import BayesSettings
from colltune.tuner.race import RaceSettings

REST = "the rest"
# the stages after the sweep as shares of it, where no earlier tune says: measured here
# (docs/benchmarks.md, "What a tune holds of its allocation"): Open MPI 4.1 reduce at 4
# ranks spent 0.8-0.9 of its sweep on launch pairs. SMPI sweeps in one launch and locates
# switches in one round of one launch where a launch costs more than the points it saves
# (tuner/boundaries.next_round): reduce on the fat tree at 64 ranks spent 0.67 of its
# sweep there; at scale, where start-up is nearly all, it tends to 1 (a launch for one)
REAL_SHARES = {PAIRS: 0.8, SWITCHES: 0.05, REST: 0.25}
SIMULATED_SHARES = {SWITCHES: 1.0}
# the share of its time budget (--point-time) a point takes where no earlier tune priced
# it: most stop early, their confidence interval narrow enough (measured here: Open MPI 4.1
# reduce at 4 ranks, 474 points in 46.5 s at --point-time 0.25)
POINT_SHARE = 0.4
SIMULATED_POINT = 0.001  # simulated seconds a point takes where no earlier tune priced it


@dataclass(frozen=True)
class Prices:
    """What a launch and a point cost, and the stages after the sweep as its shares."""

    startup: float  # seconds per launch
    per_point: dict[tuple[str, int], float]  # (collective, size) -> seconds per point
    point: float  # a size no earlier tune priced
    shares: dict[str, float]
    source: str  # where the prices came from, said with the forecast
    # a collective's own shares, from earlier tunes of it alone: how many of its sizes a
    # win had to be confirmed at, and in how many rounds, is the collective's (Open MPI
    # 4.1 at 4 ranks: pairs 0.9 of the sweep for reduce, 6.4 for bcast)
    shares_by_coll: dict[str, dict[str, float]] = field(default_factory=dict)

    def shares_of(self, colls: set[str]) -> dict[str, float]:
        """The stages' shares for a sweep of `colls`: one collective's own where earlier
        tunes of it alone said them, else those of every earlier tune."""
        if len(colls) == 1:
            return self.shares_by_coll.get(next(iter(colls)), self.shares)
        return self.shares

    def at(self, coll: str, size: int) -> float:
        """A point of `coll` at `size`: as earlier tunes of it took; between sizes they
        priced, interpolated in log size (beyond them, the nearest): a point's time is the
        collective's more than the size's (Open MPI 4.1 at 4 ranks: allreduce's points took
        7 times bcast's at the same sizes); else as long as the other collectives' took at
        that size (the median), else the default."""
        if (coll, size) in self.per_point:
            return self.per_point[(coll, size)]
        own = sorted((s, t) for (c, s), t in self.per_point.items() if c == coll and s > 0)
        if own and size > 0:
            below = [(s, t) for s, t in own if s < size]
            above = [(s, t) for s, t in own if s > size]
            if not below or not above:  # beyond them: the nearest
                return above[0][1] if above else below[-1][1]
            (s0, t0), (s1, t1) = below[-1], above[0]
            w = math.log(size / s0) / math.log(s1 / s0)
            return t0 + w * (t1 - t0)
        same = [t for (_, s), t in self.per_point.items() if s == size]
        return statistics.median(same) if same else self.point


@dataclass(frozen=True)
class Target:
    """One collective at one placement, as the sweep measures it."""

    coll: Collective
    placement: Placement
    points: list[int]  # the size of every point the sweep measures
    launches: int


Done = Callable[[Collective, Placement], set[tuple[str, int]]]


def sweep_targets(opts: TuneOptions, plan: Plan, placements: list[Placement], sweep: str,
                  colls: list[str], done: Done | None = None) -> list[Target]:
    """The sweep's launches and points per collective and placement: one launch for what
    MPI_T switches, one per configuration otherwise (and the default's further launches);
    a ladder's communicator sizes share their launch. `done`: the (configuration key,
    size) points the store holds already, which a tune does not measure again."""
    out = []
    for name in colls:
        coll = get_collective(name).summing(opts.settings.datatype)
        for i, p in enumerate(placements):
            held = done(coll, p) if done is not None else set()
            pts = [s for c, s in plan.points(coll, p.np) if (c.key, s) not in held]
            if not pts:
                continue
            if opts.strategy == "bayes":  # the budget, or the expected-improvement stop
                pts = pts[:opts.budget] if opts.budget else pts[:max(1, len(pts) // 2)]
            per_config = 1 if sweep == "mpit" else len(plan.configs(coll, p.np)) + max(
                0, opts.settings.default_launches - 1)
            launches = 0 if opts.comm_sizes and i > 0 else per_config * _rounds(opts, pts)
            out.append(Target(coll, p, pts, launches))
    return out


def _rounds(opts: TuneOptions, points: list[int]) -> int:
    """The measuring rounds of a search, each a launch of what it asks (the grid: one; a
    race: as many as its repetitions may double within their cap; bayes: the defaults,
    then a batch at a time). An estimate for race and bayes: they stop early too."""
    if opts.strategy == "bayes":
        return 1 + -(-max(len(points) - len(set(points)), 0) // BayesSettings().batch)
    if opts.strategy in ("race", "model"):
        st, rounds, reps, total = RaceSettings(), 0, RaceSettings().first_reps, 0
        while total + reps <= st.max_reps:
            total, reps, rounds = total + reps, reps * st.growth, rounds + 1
        return rounds
    return 1


def launch_cost(opts: TuneOptions) -> account.LaunchCost:
    """The start-up a simulated launch is charged (--launch-cost, else the measured one)."""
    return account.LaunchCost.parse(opts.launch_cost) if opts.launch_cost \
        else account.LaunchCost()


def prices(store: Path | None, mpi_key: str, nodes: int, simulated: bool,
           opts: TuneOptions) -> Prices:
    """Prices from the store's earlier tunes of this installation on as many nodes (the
    median of each), else the defaults, said in `source`."""
    held = _earlier(store, mpi_key, nodes, simulated)
    cost = launch_cost(opts)
    default_point = SIMULATED_POINT if simulated else opts.settings.point_time * POINT_SHARE
    shares = dict(SIMULATED_SHARES if simulated else REAL_SHARES)
    if opts.confirm_rounds == 0 or simulated:
        shares.pop(PAIRS, None)
    if opts.boundaries != "measure":
        shares.pop(SWITCHES, None)
    if not held:
        return Prices(cost.seconds(nodes), {}, default_point, shares,
                      "defaults: " + (f"a launch starts in {cost.text()} s, " if simulated
                                      else "a launch starts in the measured time here, ")
                      + "a point takes " + ("1 simulated ms" if simulated else
                                            f"{POINT_SHARE:g} of its --point-time")
                      + ", the stages after the sweep their share measured here")
    startup = cost.seconds(nodes) if simulated else statistics.median(
        float(str(a["startup_each"])) for a in held)
    per_size: dict[tuple[str, int], list[float]] = {}
    for a in held:
        for key, t in _numbers(a, "per_point").items():
            coll, size = key.split("/")
            per_size.setdefault((coll, int(size)), []).append(t)
    # a tune of one collective names it alone ("reduce"; `tune all`: "bcast,reduce,...")
    by_coll = {coll: _shares([a for a in held if a.get("collectives") == coll], shares)
               for coll in {str(a.get("collectives", "")) for a in held}
               if coll and "," not in coll}
    own = (f"; the stages after the sweep of {', '.join(sorted(by_coll))} from their own "
           "earlier tunes" if by_coll else "")
    return Prices(startup, {s: statistics.median(v) for s, v in per_size.items()},
                  default_point, _shares(held, shares), f"the store's {len(held)} earlier "
                  f"tune(s) of this installation on {nodes} node(s){own}", by_coll)


def _shares(held: list[dict[str, object]], stages: dict[str, float]) -> dict[str, float]:
    """Each of `stages` as the median share of the sweep it took in the accounts `held`."""
    return {stage: statistics.median(_numbers(a, "stages").get(stage, 0.0)
                                     / _numbers(a, "stages")[SWEEP] for a in held)
            for stage in stages}


def _earlier(store: Path | None, mpi_key: str, nodes: int, simulated: bool
             ) -> list[dict[str, object]]:
    """The store's accounts of tunes like this one that swept (none: no store)."""
    if store is None or not store.is_file():
        return []
    db = Store(store, readonly=True)
    try:
        rows = db.allocations()
    finally:
        db.close()
    return [a for a in rows if a.get("mpi_key") == mpi_key and a["nodes"] == nodes
            and a["simulated"] == simulated and _numbers(a, "stages").get(SWEEP, 0.0) > 0]


def _numbers(summary: dict[str, object], key: str) -> dict[str, float]:
    """A mapping of an account's summary (checked when read: core/account.stored_summary)."""
    got = summary.get(key)
    return {str(k): float(v) for k, v in got.items()} if isinstance(got, dict) else {}


def stage_seconds(pr: Prices, launches: int, points: list[tuple[str, int]]
                  ) -> dict[str, float]:
    """Seconds per stage on each node: the sweep's launches and its points (collective,
    size), and the stages after it as their shares of it."""
    sweep = launches * pr.startup + sum(pr.at(c, s) for c, s in points)
    shares = pr.shares_of({c for c, _ in points})
    return {SWEEP: sweep, **{k: v * sweep for k, v in shares.items()}}


def forecast(targets: list[Target], pr: Prices, nodes: int, simulated: bool
             ) -> dict[str, object]:
    """The allocation the tune is expected to hold, by stage, in the account's own terms."""
    launches = sum(t.launches for t in targets)
    points = sum(len(t.points) for t in targets)
    stages: dict[str, float] = {}
    for t in targets:  # each with its collective's shares
        for k, v in stage_seconds(pr, t.launches, [(t.coll.name, s) for s in t.points]).items():
            stages[k] = stages.get(k, 0.0) + v
    total = nodes * sum(stages.values())
    return {
        "nodes": nodes,
        "node_seconds": round(total, 3),
        "node_hours": total / 3600.0,
        "wall_seconds": round(total / nodes, 1),
        "stages": {k: round(nodes * v, 3) for k, v in stages.items()},
        "sweep_launches": launches,
        "points": points,
        "startup_each": round(pr.startup, 4),
        "simulated": simulated,
        "priced_from": pr.source,
        "host": socket.gethostname(),
    }


def if_stalls(targets: list[Target], pr: Prices, nodes: int, per_size: float
              ) -> dict[str, object]:
    """What the stage after the sweep that measures a stalling default again
    (tuner/stalls.py: `per_size` seconds a size) would add, which no plan can know before
    the network is measured: a launch for each collective and placement where the default
    stalls, at most at every size the sweep measures. Said beside the forecast as a
    bound, not in it."""
    where = [t for t in targets if t.coll.size_dependent]
    sizes = sum(len(set(t.points)) for t in where)
    worst = nodes * (len(where) * pr.startup + sizes * per_size)
    return {"node_seconds_per_size": round(nodes * per_size, 3),
            "node_seconds_at_most": round(worst, 3), "sizes": sizes}


def time_limit(points: int, point_time: float, launches: int, nodes: int = 1
               ) -> tuple[int, str]:
    """Seconds a batch job of the plan asks for (--slurm-script), and the plan in words:
    the forecast with no earlier tune to price it, doubled for safety, at least 10 minutes.
    A job killed at its limit loses nothing measured: the next one resumes."""
    opts = TuneOptions([], [], settings=MeasureSettings(point_time=point_time))
    pr = prices(None, "", nodes, False, opts)
    # the plan's sizes are not known here: every point at the price of a size not priced
    held = stage_seconds(pr, launches, [("", 0)] * points)
    return (max(600, int(2 * sum(held.values()))),
            f"{points} (configuration, size) points in about {launches} launches at "
            f"{point_time} s per point, forecast {sum(held.values()):.0f} s")


def store_path(opts: TuneOptions) -> Path:
    return opts.db or default_db_path()

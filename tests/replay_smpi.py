"""Replay of exhaustive SMPI grids at scale (tests/data/smpi, bench/record_smpi_grids.py):
the real tune decides from a store that holds the recorded points its plan asks for, and
its rules file is judged at every recorded size against the grid's own oracle, with the
allocation each approach would hold (issue 84, item 5)."""

from __future__ import annotations

import csv
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colltune.backends import registry
from colltune.backends.smpi import install as smpi
from colltune.collectives import get_collective
from colltune.core.account import LaunchCost
from colltune.core.config import Config
from colltune.core.records import PointResult
from colltune.errors import FormatError
from colltune.options import TuneOptions
from colltune.rules import ompi_classic as rules
from colltune.store import Store
from colltune.tuner import forecast
from colltune.tuner.boundaries import MAX_ROUNDS, between, next_round
from colltune.tuner.decide import decide
from colltune.tuner.measure import context_for
from colltune.tuner.run import tune

DATA = Path(__file__).resolve().parent / "data" / "smpi"
PLATFORMS = Path(__file__).resolve().parents[1] / "docs" / "platforms"

# OSU micro-benchmarks' iteration counts (osu_util.h): warm-up calls and timed calls,
# below and from 8 KiB on: what an exhaustive OSU-driven sweep runs at every size
OSU_SMALL, OSU_LARGE, OSU_LARGE_FROM = 200 + 1000, 10 + 100, 8192
# the kernel's calls per simulated point: the correctness call and the timed one
CALLS_PER_POINT = 2
MIN_GAIN = 0.03  # TuneOptions.min_gain's default


@dataclass
class Grid:
    """One recording: simulated seconds of one call per (algorithm, size); None where the
    simulation did not finish."""

    platform: str
    coll: str
    np: int
    times: dict[tuple[int, int], float | None] = field(default_factory=dict)

    @property
    def sizes(self) -> list[int]:
        return sorted({s for _, s in self.times})

    @property
    def algorithms(self) -> list[int]:
        return sorted({a for a, _ in self.times})

    def t(self, alg: int, size: int) -> float | None:
        return self.times.get((alg, size))

    def judged(self) -> list[int]:
        """Sizes where the default and at least one other algorithm finished."""
        return [s for s in self.sizes if self.t(0, s) is not None]

    def best(self, size: int) -> tuple[int, float]:
        done = [(t, a) for a in self.algorithms if (t := self.t(a, size)) is not None]
        t, a = min(done)
        return a, t


def load(path: Path) -> Grid:
    plat, _, rest = path.stem.rpartition("-np")
    platform, _, coll = plat.rpartition("-")
    grid = Grid(platform, coll, int(rest))
    with open(path, newline="") as f:
        for no, row in enumerate(csv.DictReader(f), 2):
            try:
                alg, size = int(row["algorithm"]), int(row["size"])
                ok = row["status"] == "ok"
                grid.times[(alg, size)] = float(row["seconds"]) if ok else None
            except (KeyError, ValueError) as e:
                raise FormatError(str(path), no, f"not a grid row: {e}") from None
    return grid


def grids() -> list[Path]:
    return sorted(DATA.glob("*.csv"))


# issue 84, item 4: the same collective and platform recorded at other communicator sizes
COMMSIZES = DATA / "commsizes"


def commsizes() -> list[Path]:
    """The recordings at other communicator sizes (item 4)."""
    return sorted(COMMSIZES.glob("*.csv"))


def ladders() -> dict[tuple[str, str], list[Grid]]:
    """Per (platform, collective): every communicator size recorded for item 4, smallest
    first, with the 512-rank grid of the same platform and collective where there is one
    (the largest anchor)."""
    out: dict[tuple[str, str], list[Grid]] = {}
    for path in commsizes():
        g = load(path)
        out.setdefault((g.platform, g.coll), []).append(g)
    for (platform, coll), gs in out.items():
        gs += [g for g in map(load, grids()) if (g.platform, g.coll) == (platform, coll)]
        gs.sort(key=lambda g: g.np)
    return out


@dataclass
class Replayed:
    """What the tune's file does at every recorded size, and what it cost."""

    grid: Grid
    plan: list[int]  # the sizes the tune measured
    chosen: dict[int, int]  # size -> the algorithm the file runs there
    launches: int  # what the replayed tune launched (0: every point came from the store)
    rounds: int = 1  # its measuring launches had it simulated: the sweep, switch rounds
    # the (algorithm, size) points it would have simulated (None: every algorithm at
    # every size of the plan, an upper bound)
    points: set[tuple[int, int]] | None = None

    def speedup(self, size: int) -> float:
        base = self.grid.t(0, size)
        got = self.grid.t(self.chosen[size], size)
        assert base is not None
        return base / got if got is not None else 0.0

    def oracle(self, size: int) -> float:
        """The best algorithm's speed-up over the default at `size`, where it is worth a
        rule: a choice less than MIN_GAIN faster is no gain a tuner keeps (the tune's own
        --min-gain, and the issue's bound on being slower), so there the oracle is 1."""
        base = self.grid.t(0, size)
        assert base is not None
        best = base / self.grid.best(size)[1]
        return best if best >= 1 / (1 - MIN_GAIN) else 1.0

    def raw_oracle(self, size: int) -> float:
        """The best algorithm's speed-up over the default, however small."""
        base = self.grid.t(0, size)
        assert base is not None
        return base / self.grid.best(size)[1]

    def gm(self, f: Callable[[int], float]) -> float:
        values = [f(s) for s in self.grid.judged()]
        if min(values) <= 0:
            return 0.0  # a size whose chosen algorithm never finished: nothing to vouch for
        return math.exp(sum(math.log(v) for v in values) / len(values))

    @property
    def captured(self) -> float:
        """The file's geometric-mean gain over the default, as a share of the oracle's
        (1.0 where the oracle gains nothing)."""
        oracle = self.gm(self.oracle)
        return 1.0 if oracle <= 1.0 else (self.gm(self.speedup) - 1) / (oracle - 1)

    @property
    def worst(self) -> float:
        """The file's worst size: its time over the default's (above 1: slower)."""
        return max(1 / max(self.speedup(s), 1e-9) for s in self.grid.judged())

    def nodes(self) -> int:
        platform = PLATFORMS / f"{self.grid.platform}.xml"
        mpi = smpi.SMPI("", Path("/usr"), Path(), Path(), platform)
        return smpi.layout(mpi, self.grid.np)[1]

    def held(self, cost: LaunchCost) -> float:
        """Node-seconds the tune holds: its measuring launches (the sweep's one, and a
        launch per round locating switches) and the points they simulate, with the
        kernel's calls; points that did not finish are not counted, as in the grid."""
        n = self.nodes()
        pts = self.points if self.points is not None else {
            (a, s) for a in self.grid.algorithms for s in self.plan}
        points = sum(t for a, s in pts if (t := self.grid.t(a, s)) is not None)
        return n * (self.rounds * cost.seconds(n) + CALLS_PER_POINT * points)

    def exhaustive(self, cost: LaunchCost) -> float:
        """Node-seconds an OSU-driven exhaustive sweep holds: one launch per algorithm
        (forced at launch), OSU's sizes (the powers of two; the sizes between them it
        never runs, so they are not charged: the smaller ceiling) at its iteration
        counts."""
        n = self.nodes()
        total = 0.0
        for a in self.grid.algorithms:
            total += cost.seconds(n)
            for s in powers_of_two(self.grid):
                t = self.grid.t(a, s)
                if t is not None:
                    total += t * (OSU_SMALL if s < OSU_LARGE_FROM else OSU_LARGE)
        return n * total


def powers_of_two(grid: Grid) -> list[int]:
    """The sizes a tune measures by default: the powers of two (the grid's sizes between
    them are what its file's ranges answer for)."""
    return [s for s in grid.sizes if s & (s - 1) == 0]


def bisected(grid: Grid) -> bool:
    """Whether the grid holds every size a tune's --boundaries measure may ask between
    two of its powers of two (tuner/boundaries.py: two rounds of the middle in log size):
    then the replay locates switches as the tune does by default, else at the midpoint."""
    g = get_collective(grid.coll).granularity
    have = set(grid.sizes)
    plan = powers_of_two(grid)
    for a, b in zip(plan, plan[1:], strict=False):
        mid = between(a, b, g)
        if mid is None:
            continue
        if any(m is not None and m not in have
               for m in (mid, between(a, mid, g), between(mid, b, g))):
            return False
    return True


@dataclass
class Tuned:
    """A replayed tune: its file, what it launched (0: the store held every point), the
    sizes it asked, the measuring launches it would have made and their points."""

    rules: rules.RulesFile
    launches: int
    sizes: list[int]
    rounds: int
    points: set[tuple[int, int]]
    added: list[int] = field(default_factory=list)  # sizes --between measure added
    measured: list[int] = field(default_factory=list)  # every communicator size measured


def located(grid: Grid, opts: TuneOptions, plan: list[int], db: Path
            ) -> tuple[set[tuple[int, int]], int]:
    """The points a tune at `grid`'s size measures and its measuring launches: the sweep
    (every algorithm at the powers of two), then each round locating switches as
    tuner/boundaries.next_round plans it from the decisions so far, priced as that tune
    priced it. Emulated on the store made from the recording (`db`): it holds every
    point, so the replayed tune launches nothing and locates nothing it could count."""
    mpi = smpi.find_smpi(None, PLATFORMS / f"{grid.platform}.xml")
    coll, place = get_collective(grid.coll), smpi.place(mpi, grid.np)
    store = Store(db, readonly=True)
    try:
        ms = store.measurements(context_for(mpi, coll, place))
    finally:
        store.close()
    known = {(m.config.key, m.size) for m in ms if m.size in plan}
    pr = forecast.prices(None, mpi.key, place.nodes, True, opts)
    rounds = 1
    for _ in range(MAX_ROUNDS):
        ds = decide(coll, grid.np, [m for m in ms if (m.config.key, m.size) in known],
                    opts.alpha, opts.min_gain, True, registry.of(mpi).rule_size,
                    opts.min_samples)
        todo, _ = next_round(coll, grid.np, ds, smpi.catalog(), known, pr)
        if not todo:
            break
        known |= {(c.key, size) for c, size in todo}
        rounds += 1
    return {(Config.from_key(k).algorithm, size) for k, size in known}, rounds


def unrecorded(grid: Grid, tmp: Path) -> list[int]:
    """The sizes a tune at the grid's communicator size would measure (`located`: the
    sweep, then its rounds locating switches) that the grid does not hold: what
    bench/record_smpi_grids.py --add-sizes must record before the replay can run as the
    tune does. Empty where the grid is not bisected (its replay uses the midpoint)."""
    if not bisected(grid):
        return []
    plan = powers_of_two(grid)
    opts = TuneOptions([grid.coll], [grid.np], backend="smpi",
                       platform=PLATFORMS / f"{grid.platform}.xml", db=tmp / "x.sqlite",
                       sizes=plan, boundaries="measure")
    _fill(tmp / "recorded.sqlite", [grid], None)
    points, _ = located(grid, opts, plan, tmp / "recorded.sqlite")
    return sorted({s for a, s in points if (a, s) not in grid.times})


def thirds(grid: Grid) -> set[int]:
    """The 3 x 2^k sizes: judged only, never asked by a tune."""
    return {s for s in grid.sizes if s % 3 == 0 and (s // 3) & (s // 3 - 1) == 0}


def _fill(db: Path, anchors: list[Grid], keep: dict[int, set[tuple[int, int]]] | None
          ) -> None:
    """A store holding the recorded points of each anchor (`keep`: per communicator
    size, only those (algorithm, size) points; None: all)."""
    first = anchors[0]
    mpi = smpi.find_smpi(None, PLATFORMS / f"{first.platform}.xml")
    coll = get_collective(first.coll)
    store = Store(db)
    try:
        for grid in anchors:
            ctx = context_for(mpi, coll, smpi.place(mpi, grid.np))
            for (alg, size), t in grid.times.items():
                if keep is not None and (alg, size) not in keep[grid.np]:
                    continue  # what the tune did not measure stays out of its store
                r = (PointResult(0, size, "ok", 1, t, t, t, t, t, t, [t]) if t is not None
                     else PointResult(0, size, "timeout", message="recorded: not finished"))
                store.add(ctx, Config(alg), r, "mpit")
    finally:
        store.close()


def tune_from(anchors: list[Grid], tmp: Path, spare: list[Grid] | None = None) -> Tuned:
    """The real tune (grid; switches located as the tune does where the grids hold the
    sizes it would ask, else at the midpoint) at the anchors' communicator sizes and their
    powers of two, every point it measures served by a store made from the recordings
    (the points it would measure: `located`); its file read back, and the launches it
    made (0: nothing simulated again, asserted by the tests: a point the emulation missed
    would be simulated). With `spare`, recordings at other communicator sizes, the tune
    runs with --between measure, and a size it adds is served from them."""
    first = anchors[0]
    platform = PLATFORMS / f"{first.platform}.xml"
    plan = powers_of_two(first)
    recorded = anchors + (spare or [])
    measured = all(bisected(g) for g in recorded)
    db, out = tmp / f"{first.coll}.sqlite", tmp / f"{first.coll}.conf"
    opts = TuneOptions([first.coll], sorted(g.np for g in anchors), backend="smpi",
                       platform=platform, db=db, out=out, sizes=plan,
                       boundaries="measure" if measured else "midpoint",
                       between="measure" if spare is not None else "rule")
    keep = {g.np: {(a, s) for a in g.algorithms for s in plan} for g in recorded}
    rounds = 1
    if measured:
        _fill(tmp / "recorded.sqlite", recorded, None)
        for g in recorded:
            keep[g.np], r = located(g, opts, plan, tmp / "recorded.sqlite")
            rounds = r if g is first else rounds
    _fill(db, recorded, keep)
    res = tune(opts)
    added = sorted({int(str(p["halfway"])) for p in res.summary.get("between", [])})
    return Tuned(rules.read(out, allow_v2=False), int(res.summary["allocation"]["launches"]),
                 sorted({s for _, s in keep[first.np]}), rounds, keep[first.np], added,
                 sorted({g.np for g in anchors} | set(added)))


def judge(grid: Grid, tuned: Tuned, below: bool = False) -> Replayed:
    """What the tuned file runs at every size of `grid` (a communicator size it may not
    have been tuned at: Open MPI's section for the largest size at or below it). With
    `below`, what a file without sections between the measured sizes runs (colltune's
    before rules.agreed): the section of the largest measured size at or below it."""
    coll = get_collective(grid.coll)
    cid = rules.COLLTYPE[grid.coll]
    np = grid.np
    if below:
        measured = {int(m) for m in tuned.measured}
        np = max((m for m in measured if m <= grid.np), default=grid.np)
    chosen = {}
    for s in grid.sizes:
        found = rules.lookup(tuned.rules, cid, np, rules.lookup_size(coll, s, grid.np))
        chosen[s] = found[1].alg if found is not None else 0
    return Replayed(grid, tuned.sizes, chosen, tuned.launches, tuned.rounds,
                    tuned.points)


def replay(grid: Grid, tmp: Path) -> Replayed:
    """The tune at the grid's own communicator size, judged on the grid."""
    return judge(grid, tune_from([grid], tmp))

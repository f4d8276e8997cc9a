"""Racing search (successive halving) per message size: every candidate gets a few
repetitions, the clearly slower ones are dropped by a rank test against the current leader
(never by one sample), survivors get more repetitions, until one is left or the budget
ends. The library default is never dropped: every decision needs a measured baseline."""

from __future__ import annotations

from dataclasses import dataclass, field

from colltune.core.config import DEFAULT, Config
from colltune.core.stats import mann_whitney_less, median
from colltune.tuner.asktell import Ask, Measure, Point, Strategy, drive


@dataclass
class RaceSettings:
    first_reps: int = 5  # repetitions per candidate in the first round
    growth: int = 2  # each round gives survivors this many times more repetitions
    alpha: float = 0.01  # a candidate is dropped when it is slower than the leader at alpha
    budget: int | None = None  # cap on repetitions over all points and rounds
    max_reps: int = 60  # no point gets more: candidates still tied then are equivalent


@dataclass
class RaceOutcome:
    samples: dict[Point, list[float]] = field(default_factory=dict)
    survivors: dict[int, list[Config]] = field(default_factory=dict)
    rounds: int = 0
    cost: int = 0  # repetitions measured

    def best(self, size: int) -> Config:
        alive = self.survivors[size]
        return min(alive, key=lambda c: (median(self.samples[(c, size)]), c))

    def describe(self, grid_points: int) -> str | None:
        return f"{self.rounds} rounds, {self.cost} repetitions over {grid_points} points"

    def record(self, grid_points: int) -> dict[str, object] | None:
        return {"grid_points": grid_points, "points": len(self.samples),
                "repetitions": self.cost, "rounds": self.rounds,
                "survivors": {str(s): len(c) for s, c in sorted(self.survivors.items())}}


def race(candidates: dict[int, list[Config]], measure: Measure,
         settings: RaceSettings | None = None) -> RaceOutcome:
    return drive(racing(candidates, settings), measure)


def racing(candidates: dict[int, list[Config]], settings: RaceSettings | None = None
           ) -> Strategy[RaceOutcome]:
    """Race every size (key of `candidates`) among its own candidates, all sizes in the
    same rounds, so each round is one measuring launch."""
    s = settings or RaceSettings()
    sizes = sorted(candidates)
    out = RaceOutcome(survivors={size: sorted(set(candidates[size]) | {DEFAULT})
                                 for size in sizes})
    reps = s.first_reps
    while True:
        points = [(c, size) for size in sizes for c in out.survivors[size]
                  if len(out.survivors[size]) > 1
                  and len(out.samples.get((c, size), [])) + reps <= s.max_reps]
        if not points:
            break
        if s.budget is not None:
            left = s.budget - out.cost
            if left < len(points):
                break  # not enough left to give every survivor one more repetition
            reps = min(reps, left // len(points))
        got = yield Ask(points, reps)
        out.rounds += 1
        for p in points:
            new = got.get(p, [])
            out.samples.setdefault(p, []).extend(new)
            out.cost += len(new)
        for size in sizes:
            out.survivors[size] = _keep(out, size, s.alpha)
        reps *= s.growth
    return out


def _keep(out: RaceOutcome, size: int, alpha: float) -> list[Config]:
    alive = [c for c in out.survivors[size] if out.samples.get((c, size))]
    if len(alive) <= 1:
        return alive or out.survivors[size]
    leader = min(alive, key=lambda c: (median(out.samples[(c, size)]), c))
    lead = out.samples[(leader, size)]
    keep = []
    for c in alive:
        if c == leader or c == DEFAULT:
            keep.append(c)
        elif mann_whitney_less(lead, out.samples[(c, size)]) >= alpha:
            keep.append(c)  # not clearly slower than the leader: stays in the race
    return sorted(keep)

"""Bayesian search with scikit-optimize: one Gaussian process over (algorithm, log2 of each
parameter the candidates set, log2 message size), so a point measured at one size
informs its neighbours, and expected improvement chosen per message size.

What is modelled is log(median / default median at the same size): sizes differ by orders
of magnitude in time, but the question at each size is only "how much better than the
default". skopt's own `ask` would minimise that over all sizes at once and spend the budget
on the one size with the largest gain; we want the best configuration at every size, so the
batch is picked from the finite set of unmeasured points by skopt's EI with each size's own
incumbent, at most a few points per size per batch."""

from __future__ import annotations

import math
import random
import warnings
from collections.abc import Callable, Generator
from dataclasses import dataclass, field

from colltune.core.config import DEFAULT, Config
from colltune.core.stats import median
from colltune.tuner.asktell import Ask, Measure, Point, Samples, Strategy, drive


@dataclass
class BayesSettings:
    budget: int | None = None  # measured (configuration, size) points, defaults included
    batch: int = 8  # points per kernel launch
    initial: int | None = None  # cap on the initial design's points; None: all of it
    stride: int = 2  # the initial design measures each algorithm at every stride-th size
    ei_stop: float = 0.0005  # stop when no point is expected to gain this much (log ratio)
    seed: int = 1
    reps: int = 10  # repetitions per point: the GP models the noise, so a few are enough
    polish: int = 3  # finally, each size's best few measured points get more repetitions...
    polish_reps: int = 30  # ... this many, so the choice is not one lucky median


@dataclass
class BayesOutcome:
    samples: dict[Point, list[float]] = field(default_factory=dict)
    order: list[Point] = field(default_factory=list)  # measured points, in measuring order
    batches: int = 0
    stopped: str = ""  # "budget", "expected improvement", "every point measured"
    failed: set[Point] = field(default_factory=set)

    def best(self, size: int) -> Config:
        here = [(median(v), c) for (c, s), v in self.samples.items() if s == size]
        return min(here)[1] if here else DEFAULT

    def describe(self, grid_points: int) -> str | None:
        return (f"measured {len(self.order)} of {grid_points} points in {self.batches} "
                f"launches (stopped: {self.stopped})")

    def record(self, grid_points: int) -> dict[str, object] | None:
        return {"grid_points": grid_points, "points": len(self.order),
                "repetitions": sum(len(v) for v in self.samples.values()),
                "launches": self.batches, "stopped": self.stopped,
                "failed_points": len(self.failed)}


def _log2(x: int) -> int:
    return int(math.log2(x)) + 1 if x > 0 else 0


def _encoder(points: list[Point]) -> Callable[[Point], list[int]]:
    """A point as numbers: its algorithm, then every parameter any of `points` sets (the
    values a catalog offers double: segment sizes, radices, request counts), then its
    message size."""
    names = sorted({n for c, _ in points for n, _ in c.params})
    return lambda p: ([p[0].algorithm] + [_log2(p[0].get(n)) for n in names]
                      + [_log2(p[1])])


def bayes_search(candidates: dict[int, list[Config]], measure: Measure,
                 settings: BayesSettings | None = None) -> BayesOutcome:
    return drive(bayesian(candidates, settings), measure)


def bayesian(candidates: dict[int, list[Config]], settings: BayesSettings | None = None  # noqa: C901 (the ask/tell loop and its stopping rules in one place)
             ) -> Strategy[BayesOutcome]:
    """Search the points `candidates` names (valid configurations per size). The default is
    measured first at every size, then an initial design, then EI-chosen batches until the
    budget is spent, no point is expected to improve on its size's best, or none are left."""
    s = settings or BayesSettings()
    sizes = sorted(candidates)
    out = BayesOutcome()
    todo: list[Point] = [(c, size) for size in sizes for c in sorted(set(candidates[size]))
                         if c != DEFAULT]
    rng = random.Random(s.seed)

    def room() -> int:
        return len(todo) if s.budget is None else min(len(todo), s.budget - len(out.order))

    def run(points: list[Point]) -> Generator[Ask, Samples, None]:
        got = yield Ask(points, s.reps)
        out.batches += 1
        for p in points:
            out.order.append(p)
            if got.get(p):
                out.samples[p] = got[p]
            else:
                out.failed.add(p)

    yield from run([(DEFAULT, size) for size in sizes])  # the baseline is never optional
    # initial design: each algorithm's plainest variant (no segmentation, fewest chains) at
    # every other size, staggered between algorithms, so the model sees every algorithm's
    # trend over the whole size range before it proposes segment sizes and fanouts
    first: list[Point] = []
    algs = sorted({c.algorithm for c, _ in todo})
    for i, a in enumerate(algs):
        for j, size in enumerate(sizes):
            mine = [c for c, sz in todo if sz == size and c.algorithm == a]
            if mine and (i + j) % s.stride == 0:
                first.append((min(mine), size))
    rng.shuffle(first)
    if s.initial is not None:
        first = first[: s.initial]
    while first and room() > 0:
        chunk, first = first[: min(s.batch, room())], first[s.batch:]
        for p in chunk:
            todo.remove(p)
        yield from run(chunk)
    if not todo:
        out.stopped = "every point measured"
    while not out.stopped:
        if room() <= 0:
            out.stopped = "budget"
            break
        picks = _next_batch(out, todo, sizes, min(s.batch, room()), s)
        if not picks:
            out.stopped = "expected improvement"
            break
        for p in picks:
            todo.remove(p)
        yield from run(picks)
        if not todo:
            out.stopped = "every point measured"
    yield from _polish(out, sizes, s)
    return out


def _polish(out: BayesOutcome, sizes: list[int], s: BayesSettings
            ) -> Generator[Ask, Samples, None]:
    """More repetitions for the default and each size's best few measured points (outside
    the point budget: these points are already measured, only their estimate improves)."""
    if s.polish <= 0 or s.polish_reps <= 0:
        return
    again: list[Point] = []
    for size in sizes:
        here = sorted((median(v), c) for (c, sz), v in out.samples.items() if sz == size)
        top = [c for _, c in here[: s.polish]]
        if len(here) > 1:
            again += [(c, size) for c in sorted(set(top) | {DEFAULT})
                      if (c, size) in out.samples]
    if again:
        got = yield Ask(again, s.polish_reps)
        out.batches += 1
        for p in again:
            out.samples[p] = out.samples[p] + got.get(p, [])


def _next_batch(out: BayesOutcome, todo: list[Point], sizes: list[int], n: int,
                s: BayesSettings) -> list[Point]:
    from skopt import Optimizer
    from skopt.acquisition import gaussian_ei
    from skopt.space import Categorical, Integer
    from skopt.utils import cook_estimator

    base = {size: median(out.samples[(DEFAULT, size)]) for size in sizes
            if (DEFAULT, size) in out.samples}
    known = [(p, math.log(median(v) / base[p[1]])) for p, v in sorted(out.samples.items())
             if p[1] in base]
    _encode = _encoder([p for p, _ in known] + list(todo))
    every = [_encode(p) for p, _ in known] + [_encode(p) for p in todo]
    dims: list[Categorical | Integer] = [Categorical(sorted({e[0] for e in every}))]
    for k in range(1, len(every[0])):
        lo, hi = min(e[k] for e in every), max(e[k] for e in every)
        dims.append(Integer(lo, max(hi, lo + 1)))  # skopt needs lo < hi
    # one hyper-parameter fit per batch, no restarts: measured points cost seconds, but the
    # replay benchmark runs thousands of searches
    gp = cook_estimator("GP", space=dims, n_restarts_optimizer=0)
    opt = Optimizer(dims, base_estimator=gp, n_initial_points=1, acq_optimizer="sampling",
                    acq_optimizer_kwargs={"n_points": 64}, random_state=s.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the GP's convergence chatter on tiny data sets
        opt.tell([_encode(p) for p, _ in known], [y for _, y in known], fit=True)
        model = opt.models[-1]
        incumbent = {size: min([y for p, y in known if p[1] == size], default=0.0)
                     for size in sizes}
        scored: list[tuple[float, Point]] = []
        for size in sizes:
            mine = [p for p in todo if p[1] == size]
            if not mine:
                continue
            xt = opt.space.transform([_encode(p) for p in mine])
            ei = gaussian_ei(xt, model, y_opt=incumbent[size], xi=0.0)
            scored += [(float(e), p) for e, p in zip(ei, mine)]
    scored.sort(key=lambda t: (-t[0], t[1]))
    per_size = max(1, -(-n // max(1, len({p[1] for _, p in scored}))))
    picks: list[Point] = []
    taken: dict[int, int] = {}
    for e, p in scored:
        if e < s.ei_stop or len(picks) >= n:
            break
        if taken.get(p[1], 0) < per_size:
            picks.append(p)
            taken[p[1]] = taken.get(p[1], 0) + 1
    return picks

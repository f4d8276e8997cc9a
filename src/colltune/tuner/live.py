"""The one driver's answers on a real MPI: the measure function every strategy's asks go
to (tuner.asktell) runs the kernel and keeps every repetition in the store, so a killed
search resumes where it stopped.

A strategy asks "`reps` more repetitions of these points". The answer is served from the
store first, in the order the samples were stored, and the kernel is launched only for what
the store does not hold yet. A rerun after a kill therefore replays the same answers, takes
the same decisions, and measures only what was never stored. A grid asks with no count:
each point the store lacks is measured once, to the kernel's own stopping rule.

On a deterministic (simulated) backend a point is simulated once; later repetitions a
strategy asks for are that same time again, so nothing is simulated twice."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

from colltune.backends.registry import of
from colltune.collectives import Collective
from colltune.core.config import Config
from colltune.core.records import PointResult
from colltune.slots import Placement
from colltune.tuner.asktell import Measure, Point
from colltune.tuner.measure import Lab, context_for, measure


def store_measure(lab: Lab, coll: Collective, placement: Placement,
                  on_failure: Callable[[Config, PointResult], None]) -> Measure:
    store = lab.store
    ctx = context_for(lab.mpi, coll, placement, lab.settings)
    exact = of(lab.mpi).traits.exact
    given: dict[Point, int] = {}  # samples already handed to the strategy, per point

    def stored() -> dict[Point, list[float]]:
        return {(m.config, m.size): m.samples for m in store.measurements(ctx)
                if m.status == "ok"}

    def once(points: list[Point], reps: int | None) -> dict[Point, list[float]]:
        known = store.done(ctx)
        todo = [p for p in points if (p[0].key, p[1]) not in known]
        if todo:
            for cfg, r in measure(lab, coll, placement, todo):
                on_failure(cfg, r)
        have = stored()
        if reps is None:
            return {p: have[p] for p in points if p in have}
        return {p: have[p][:1] * reps for p in points if p in have}

    def m(points: list[Point], reps: int | None) -> dict[Point, list[float]]:
        if exact or reps is None:
            return once(points, reps)
        have = stored()
        known = store.done(ctx)  # stored points, failed ones included
        short: dict[int, list[Point]] = {}  # repetitions still missing -> points
        for p in points:
            missing = given.get(p, 0) + reps - len(have.get(p, []))
            # a point stored as failed (hung, crashed, wrong) is never measured again
            if missing > 0 and (p in have or (p[0].key, p[1]) not in known):
                short.setdefault(missing, []).append(p)
        for n, pts in sorted(short.items()):
            # a fixed number of repetitions: the strategy, not the kernel, decides when
            # a point is known well enough (so no cutoff either)
            fixed = dataclasses.replace(lab.settings, min_reps=n, max_reps=n, point_time=1e6,
                                        cutoff=0.0)
            for cfg, r in measure(dataclasses.replace(lab, settings=fixed), coll, placement,
                                  pts, extend=True):
                on_failure(cfg, r)
        have = stored()
        out: dict[Point, list[float]] = {}
        for p in points:
            if p in have:
                start = given.get(p, 0)
                out[p] = have[p][start: start + reps]
                given[p] = start + len(out[p])
        return out

    return m


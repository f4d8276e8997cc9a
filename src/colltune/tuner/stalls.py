"""Where the library's default stalls at a size (a congested link's
retransmission timeouts), its point and those of the configurations that stall less are
measured again with more calls, so that the decision by means (tuner/decide.py) can tell
one stall rate from another: the sweep stops a point after its time budget, a handful of
calls where a call takes 50 ms and a stall 250.

One launch for every such size of the collective, once; the new calls are added to the
stored points (as the searches that come back to a point add theirs), so --from-db and a
resumed run decide from them too."""

from __future__ import annotations

import dataclasses

from colltune.core.config import DEFAULT, Config
from colltune.core.stats import STALL_ALPHA
from colltune.tuner.context import Run, Target
from colltune.tuner.decide import decide, group_by_size, stall_power, stall_suspects
from colltune.tuner.measure import measure

# a point measured again takes this many calls, within this many times the sweep's time
# budget: 30 calls per mode put a stall rate of a third and one of none far apart
# (Fisher's p near 1e-5), where the sweep's 7 could not (p 0.02-0.1). The time bounds the
# calls too (the kernel's floor_time): where calls wait out retransmission timeouts, 30
# of them took minutes a point (a tune app of 550 s in CI); the power of the calls the
# time bought is said instead
CALLS = 30
TIME_FACTOR = 8.0
SUSPECTS = 2  # the candidates measured again with the default


def seconds_per_size(point_time: float) -> float:
    """The longest a size measured again takes: the default and its suspects, each point
    its whole stretched time budget (what `tune plan` states beside its forecast)."""
    return (1 + SUSPECTS) * TIME_FACTOR * point_time


def resample(run: Run, t: Target) -> int:
    """Measure again, with more calls, the default and its best suspects at every size
    where the default stalls; returns the points measured."""
    if run.exact or not t.coll.size_dependent:
        return 0  # simulated times repeat exactly; a size-blind rule has no size to mend
    ms = run.store.measurements(run.context(t))
    # only where the medians keep the default: a size they already decide needs no more
    won = {d.size for d in decide(t.coll, t.placement.np, ms, run.opts.alpha,
                                  run.opts.min_gain, False, None, run.opts.min_samples)
           if d.chosen != DEFAULT and d.statistic == "median"}
    todo: list[tuple[Config, int]] = []
    for size, points in sorted(group_by_size(ms).items()):
        suspects = stall_suspects(points)
        if not suspects or size in won or len(points[DEFAULT].samples) >= CALLS:
            continue  # none, decided already, or measured with calls enough already
        # the fewest stalls first, then the lowest means
        best = sorted(suspects, key=lambda c: (suspects[c], c))[:SUSPECTS]
        todo += [(c, size) for c in (DEFAULT, *best)]
    if not todo:
        return 0
    stretched = TIME_FACTOR * run.lab.settings.point_time
    settings = dataclasses.replace(run.lab.settings, min_reps=CALLS, point_time=stretched,
                                   floor_time=stretched)
    # under --time-budget: only if its longest (every point its whole time) still fits;
    # otherwise those sizes are decided by the sweep's calls
    cost = len(todo) * settings.point_time
    if run.budget is not None and run.budget.prices.startup + cost > run.budget.left():
        run.rep.note(f"{t.where}: the default stalls at {len({s for _, s in todo})} "
                     "size(s), but measuring them again does not fit in --time-budget")
        return 0
    run.rep.note(f"{t.where}: the default stalls at {len({s for _, s in todo})} size(s): "
                 f"measuring it and what stalls less again, {CALLS} calls each")
    failed = run.failed(t)
    for cfg, r in measure(dataclasses.replace(run.lab, settings=settings), t.coll,
                          t.placement, todo, extend=True):
        failed(cfg, r)
    _say_power(run, t, todo)
    return len(todo)


def _say_power(run: Run, t: Target, todo: list[tuple[Config, int]]) -> None:
    """Per size measured again, what its calls could see: the default's stalls against
    each suspect's, and the fewest stalls that would have told the default from a
    configuration that never stalls (where the default stalled fewer times, a decision by
    means cannot be made there, and the medians' verdict stands)."""
    by_size = group_by_size(run.store.measurements(run.context(t)))
    for size in sorted({s for _, s in todo}):
        for c in [c for c, s in todo if s == size and c != DEFAULT]:
            (kd, nd), (kc, nc), least = stall_power(by_size.get(size, {}), c)
            seen = (f"{least} of {nd} would have told it from one that never stalls"
                    if least is not None else "no count in so few calls would have told "
                    "it from one that never stalls")
            run.rep.note(f"{t.where}, {size} B: the default stalled in {kd} of {nd} calls, "
                         f"{c.label(run.catalog, t.coll.name)} in {kc} of {nc} ({seen}, "
                         f"Fisher p < {STALL_ALPHA:g})")

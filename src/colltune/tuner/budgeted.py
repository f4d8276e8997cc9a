"""--time-budget inside the pipeline: the budget opened and priced as a plan is, what a
target still needs measured, and whether the launch pairs of its wins fit (tuner/budget.py
keeps the time; tuner/run.py asks these at its stages)."""

from __future__ import annotations

from typing import TypeVar

from colltune.core.config import DEFAULT
from colltune.errors import ColltuneError
from colltune.store import Measurement
from colltune.tuner import budget, forecast
from colltune.tuner.context import Run, Target
from colltune.tuner.decide import decide

T = TypeVar("T")


def open_budget(run: Run, colls: list[str], seconds: float, started: float
                ) -> budget.Budget:
    """--time-budget: priced as a plan is; refused before anything runs where even the
    cheapest collective's sweep would not fit, saying the budget that would."""
    nodes = max(p.nodes for p in run.sess.placements)
    pr = forecast.prices(forecast.store_path(run.opts), run.mpi.key, nodes, run.exact,
                         run.opts)
    bud = budget.Budget(seconds, pr, started)
    need = min(bud.whole(*to_measure(run, t), pair_rounds(run))
               for t in [Target(run.collective(n), p) for p in run.sess.placements for n in colls])
    if need > bud.left():
        smallest = need + max(budget.RESERVE_MIN, budget.RESERVE * need) + 1
        raise ColltuneError(
            f"--time-budget {seconds:g} s: the cheapest collective here takes about "
            f"{need:.0f} s to measure and confirm (priced from {pr.source})",
            f"give at least --time-budget {smallest:.0f}s, or fewer --sizes")
    return bud


def pair_rounds(run: Run) -> int:
    """The launch pairs a win needs (none where times are exact or none are asked)."""
    return 0 if run.exact or run.opts.from_db else run.opts.confirm_rounds


def to_measure(run: Run, t: Target) -> tuple[int, list[tuple[str, int]]]:
    """The sweep launches and the points a target still needs (what the store holds is
    not measured again)."""
    done = run.store.done(run.context(t))
    found = forecast.sweep_targets(run.opts, run.plan, [t.placement], run.sess.sweep,
                                   [t.coll.name], lambda c, p: done)
    return (found[0].launches, [(t.coll.name, s) for s in found[0].points]) if found \
        else (0, [])


def confirmation_fits(run: Run, t: Target, ms: list[Measurement]) -> bool:
    """Under --time-budget, whether the fresh launch pairs this target's wins need fit in
    what is left (none needed: it fits); a target whose wins cannot be confirmed is left to
    the library, its measurements kept for a run with more budget."""
    bud = run.budget
    if bud is None or pair_rounds(run) == 0:
        return True
    sizes = unconfirmed(run, t, ms)
    # no win to confirm: the time kept for its pairs goes back to the others
    return bud.confirm(t.where, run.opts.confirm_rounds, [(t.coll.name, s) for s in sizes])


def unconfirmed(run: Run, t: Target, ms: list[Measurement]) -> list[int]:
    """The sizes where the measurements choose other than the default and no stored
    verdict of fresh launches says yet whether that holds."""
    return sorted(win_gains(run, t, ms))


def win_gains(run: Run, t: Target, ms: list[Measurement]) -> dict[int, float]:
    """Each unconfirmed win's size and the share of the default's time the sweep says it
    saves there (what confirming it is expected to be worth)."""
    if not ms:
        return {}
    ds = decide(t.coll, t.placement.np, ms, run.opts.alpha, run.opts.min_gain, run.exact,
                run.backend.rule_size, run.opts.min_samples)
    ctx = run.context(t)
    return {d.size: 1 - 1 / (d.speedup or 1.0) for d in ds if d.chosen != DEFAULT
            and run.store.confirmation(ctx, d.size, d.chosen.key) is None}


def spending_order(run: Run, targets: list[Target]) -> list[Target]:
    """The order --time-budget judges targets in: see `by_gain_per_second`."""
    assert run.budget is not None
    rows = []
    for t in targets:
        gains = win_gains(run, t, run.store.measurements(run.context(t)))
        cost = run.budget.pairs_cost(run.opts.confirm_rounds,
                                     [(t.coll.name, s) for s in gains])
        rows.append((t, gains, cost))
    return by_gain_per_second(rows)


def by_gain_per_second(rows: list[tuple[T, dict[int, float], float]]) -> list[T]:
    """Targets with nothing to confirm first (they cost no launch pairs, and what was kept
    for their pairs goes back to the others), then the largest expected gain (the shares
    of the default's time saved, summed over the sizes won) per second of launch pairs:
    where the budget cannot confirm everything, what it confirms is worth the most."""
    return [t for t, _, _ in sorted(
        rows, key=lambda r: (bool(r[1]), -sum(r[1].values()) / max(r[2], 1e-9)))]

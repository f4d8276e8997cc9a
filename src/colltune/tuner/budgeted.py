"""--time-budget inside the pipeline: the budget opened and priced as a plan is, what a
target still needs measured, and whether the launch pairs of its wins fit (tuner/budget.py
keeps the time; tuner/run.py asks these at its stages)."""

from __future__ import annotations

from colltune.collectives import get_collective
from colltune.core.config import DEFAULT
from colltune.errors import ColltuneError
from colltune.store import Measurement
from colltune.tuner import budget, forecast
from colltune.tuner.context import Run, Target
from colltune.tuner.decide import decide


def open_budget(run: Run, colls: list[str], seconds: float, started: float
                ) -> budget.Budget:
    """--time-budget: priced as a plan is; refused before anything runs where even the
    cheapest collective's sweep would not fit, saying the budget that would."""
    nodes = max(p.nodes for p in run.sess.placements)
    pr = forecast.prices(forecast.store_path(run.opts), run.mpi.key, nodes, run.exact,
                         run.opts)
    bud = budget.Budget(seconds, pr, started)
    need = min(bud.whole(*to_measure(run, t), pair_rounds(run))
               for t in [Target(get_collective(n), p) for p in run.sess.placements for n in colls])
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
    if not ms:
        return []
    ds = decide(t.coll, t.placement.np, ms, run.opts.alpha, run.opts.min_gain, run.exact,
                run.backend.rule_size, run.opts.min_samples)
    ctx = run.context(t)
    return sorted({d.size for d in ds if d.chosen != DEFAULT
                   and run.store.confirmation(ctx, d.size, d.chosen.key) is None})

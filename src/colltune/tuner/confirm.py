"""Compare the library default with a rules file in fresh, alternating launches (A B B A ...),
and keep a decision only where they confirm it.

One launch measures every configuration under one scheduling state; on an oversubscribed or
shared machine the next launch can rank them differently. A decision is kept only if it also
wins here, over the launch pairs, in every timing mode the kernel measured (one call after a
barrier, windows of calls back to back, and long free-running stretches as an application's
loop makes them; docs/methodology.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean

from colltune import jobdir
from colltune.backends.base import Session
from colltune.backends.registry import of
from colltune.collectives import Collective
from colltune.core.clock import PAIRS, stage
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision, PointResult, Verdict, json_ready, pooled_mode
from colltune.core.stats import median
from colltune.core.toolchain import Installation
from colltune.errors import MPIError
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.options import TuneOptions
from colltune.slots import Placement
from colltune.store import Context, Store
from colltune.tuner import sequential
from colltune.tuner.context import Run, Target
from colltune.tuner.measure import Reporter

# calls per free-running stretch in fresh launches (the kernel's "loop" series): windows of
# 64 after a barrier hid a reduce's senders running ahead of its root (Intel MPI's preset 4
# at 16 KiB, 4 ranks: 0.7x the default's time by windows, 1.5x over 1000 calls, 0.4x in an
# application-style loop); a choice must not lose there either
LOOP_CALLS = 1000

# calls a mode in each fresh launch where a choice is judged by means (the default stalls:
# tuner/stalls.py), with TIME_FACTOR times the point's time budget: four calls of 50 ms,
# one of which may stall for 200, give a launch mean that one stall moves 2x
PAIR_CALLS = 15
TIME_FACTOR = 4.0
# ... and free-running stretches of this long (s): the loop's usual 15 ms is one call of
# 50 ms a stretch there, whose stall or not decided a launch
MEAN_LOOP_TIME = 0.75


def for_means(reps: Repetitions) -> Repetitions:
    """A launch's settings where a size in it is judged by launch means: PAIR_CALLS calls
    a mode at least, TIME_FACTOR times the time, MEAN_LOOP_TIME stretches (the smaller
    sizes' stretches stay as short: they end after their loop's calls)."""
    return dataclasses.replace(reps, min_reps=max(reps.min_reps, PAIR_CALLS),
                               point_time=TIME_FACTOR * reps.point_time,
                               loop_time=max(reps.loop_time, MEAN_LOOP_TIME))


# the timing mode of a size's first calls (TuneOptions.start_calls of them, from its first
# on): a choice faster once warm may start slow (Intel MPI's reduce preset 1 at 8 B on 2
# ranks: 1.25x faster than the default by IMB, 0.87x by a loop of 2000 calls from cold);
# the cell can only refuse a choice (sequential.Design.veto): what the warm series miss
START = "start"

# rounds of fill confirmations: a session that offers the next candidate where one was found
# slower (Intel MPI) gets two more chances per size; each round is one set of launch pairs
FILL_ROUNDS = 3

ARMS = ("default", "tuned")


@dataclass
class ABSamples:
    """Per size, per arm, one list of samples per launch; `modes` holds the same per timing
    mode (empty where only one figure per launch exists, as OSU's)."""

    rounds: int
    samples: dict[str, dict[int, list[list[float]]]] = field(
        default_factory=lambda: {a: {} for a in ARMS})
    modes: dict[str, dict[str, dict[int, list[list[float]]]]] = field(default_factory=dict)


def ab_runs(mpi: Installation, coll: Collective, placement: Placement, rules: Path,  # noqa: PLR0913 (arms, batch and start modes by keyword)
            sizes: list[int], rounds: int, reps: Repetitions, timeout: float = 60.0,
            arms: dict[str, dict[str, str]] | None = None, first_round: int = 0,
            start: int = 0, means: Collection[int] = ()) -> ABSamples:
    """`rounds` launch pairs; the order alternates (A B, B A, ...) so linear drift cancels.
    `arms` are the two launch environments (a session's: coll/han's choices, MPICH's
    tuning file); by default the library's choice against the rules file `rules`.
    `first_round` numbers the pairs of a later batch (their order and seeds go on).
    `start` > 0 adds the mode "start": the time per call of that many calls from a size's
    first on (`from_cold`; at `means`, the warm calls' mean stands for the rest)."""
    be = of(mpi)
    arms = arms or be.with_files().rules_arms(rules)
    exe = build_kernel(mpi)
    out = ABSamples(rounds)
    for rnd in range(first_round, first_round + rounds):
        for arm in (ARMS if rnd % 2 == 0 else ARMS[::-1]):
            # a rung of a ladder is confirmed as it was measured: its groups in one job
            plan = KernelPlan(coll.name, [KernelConfig(0, {}, placement.group)],
                              [(0, s) for s in sizes],
                              dataclasses.replace(reps, seed=reps.seed + rnd,
                                                  loop=reps.loop or LOOP_CALLS,
                                                  start=start),
                              dup_always=not be.traits.on_world, datatype=coll.datatype)
            cmd, env = be.launch(mpi, placement.launched, coll.name, 0, arms[arm])
            res = run_kernel(cmd, exe, plan, env, point_timeout=timeout, runs_on=mpi)
            if res.status != "ok":
                raise MPIError(f"confirmation launch ({arm}) of {coll.name} failed: "
                                    f"{res.status} {res.message}",
                                    "rerun; measurements so far are stored")
            for r in res.results:
                if r.status != "ok":
                    raise MPIError(f"{coll.name} at {r.size} B gave a {r.status} result "
                                        f"under the {arm} settings", "report this MPI bug")
                out.samples[arm].setdefault(r.size, []).append(r.samples)
                obj = r.objective
                for mode, objs in r.series.items():
                    got = ([from_cold(r, start, r.size in means)] if mode == START
                           else objs[obj])
                    out.modes.setdefault(mode, {a: {} for a in ARMS})[arm].setdefault(
                        r.size, []).append(got)
    return out


def from_cold(r: PointResult, calls: int, by_mean: bool = False) -> float:
    """Time per call of `calls` calls from a size's first on: the kernel timed the first
    `r.start` of them, each after a barrier (fewer once its time bound passed); the rest
    run as the warm calls timed the same way (isolated) do: their median, or `by_mean`
    their mean (where the default stalls, every stall is paid: a median there made a
    stalling default's thousand calls look cheaper than pairwise's). What an
    application's first calls cost, whatever the kernel's time bound left out."""
    timed = r.start
    each = r.series[START][r.objective][0]  # per call, over the timed ones
    warm = r.series.get("isolated", r.series.get("loop", {})).get(r.objective) or r.samples
    rest = (fmean(warm) if by_mean else median(warm)) if warm else each
    return (timed * each + max(0, calls - timed) * rest) / max(calls, timed)


def confirm_decisions(run: Run, t: Target, ds: list[Decision]) -> None:
    """Keep a non-default choice only if fresh alternating launches confirm it.

    Verdicts are stored, so a resumed run or --from-db reuses them instead of measuring."""
    coll, placement, store, opts, rep, sess = (t.coll, t.placement, run.store, run.opts,
                                               run.rep, run.sess)
    ctx = run.context(t)
    pending = [d for d in ds if d.chosen != DEFAULT]
    if not pending:
        return
    # the same arms: nothing to launch (also from a store), unless the session, asked why,
    # turns to a file that can carry the choices (Intel MPI's table, without --format)
    if _same_arms(sess, coll, placement, ds) and (
            sess.unexpressed(coll, placement, ds) or _same_arms(sess, coll, placement, ds)):
        return _unexpressed(pending, ds, coll, placement, sess, rep)
    measured = sorted({m.size for m in store.measurements(ctx)})
    # a size-independent decision (size -1) is checked at every measured size
    wanted = {d.size: d for d in pending}
    checks = {s: (measured if s < 0 else [s]) for s in wanted}
    missing = sorted({s for d in pending for s in checks[d.size]
                      if store.confirmation(ctx, s, d.chosen.key) is None})
    if missing and opts.confirm_rounds > 0 and not opts.from_db:
        # the file's fills at sizes kept so far ride in the same launches (a size's verdict
        # is the file's entry there, whatever the other sizes' fate): a set of launch pairs
        # fewer per round for a family whose file names the default's stand-ins
        fills = [(s, c) for s, c in _untested_fills(sess, coll, placement, ds, store, ctx)
                 if s not in missing]
        rep.note(f"confirming {len(pending)} choice(s) of {coll.name} at np={placement.np}"
                 + (f" and what the file says at {len(fills)} size(s) where the default "
                    "was kept," if fills else "")
                 + f" in {opts.confirm_rounds} fresh launch pairs")
        # identical arms were refused above; fresh_verdicts' own guard is for confirm_fills
        verdicts = fresh_verdicts(coll, placement, ds, sorted({*missing, *(s for s, _ in fills)}),
                                  opts, sess, rep.note, {s for s, _ in fills}) or {}
        for d in pending:
            for s in checks[d.size]:
                if s in verdicts:
                    store.add_confirmation(ctx, d.chosen.key, verdicts[s])
        for s, c in fills:
            if s in verdicts:
                store.add_confirmation(ctx, c.key, verdicts[s])
    apply_confirmations(ds, store, ctx)


def _same_arms(sess: Session, coll: Collective, placement: Placement, ds: list[Decision]
               ) -> bool:
    with jobdir.temporary() as tmp:
        arms = sess.arms(coll, placement, ds, Path(tmp) / "tentative.conf")
        return arms["default"] == arms["tuned"]


def _unexpressed(pending: list[Decision], ds: list[Decision], coll: Collective,
                 placement: Placement, sess: Session, rep: Reporter) -> None:
    """The family's file cannot carry these wins: its arms would launch the library's
    default twice. Not "refuted": nothing was compared; the default is kept, saying why."""
    why = (sess.unexpressed(coll, placement, ds)
           or "the file it would write leaves the library's own choice")
    out = sess.backend.output
    rep.note(f"{coll.name} at np={placement.np}: {len(pending)} choice(s) cannot be expressed "
             f"in {out} ({why}): default kept, no launch pairs")
    for d in pending:
        d.unexpressed = why
        d.reason = f"cannot be expressed in {out}: {why}; default kept"
        d.chosen = DEFAULT


def _untested_fills(sess: Session, coll: Collective, placement: Placement,
                    ds: list[Decision], store: Store, ctx: Context) -> list[tuple[int, Config]]:
    """The session's fills that no fresh launch pairs have judged yet."""
    return [(s, c) for s, c in sess.fills(coll.name, placement, ds)
            if store.confirmation(ctx, s, c.key) is None]


def confirm_fills(run: Run, t: Target, ds: list[Decision]) -> None:
    """Where the file must name a configuration at a size whose default was kept (the
    session's fills), fresh launch pairs judge it there against the default, as they judge
    a decision; the session reads the stored verdicts when it writes. A session may offer
    another configuration where one was found slower: judged in turn, a few rounds at most."""
    coll, placement, store, opts, rep, sess = (t.coll, t.placement, run.store, run.opts,
                                               run.rep, run.sess)
    ctx = run.context(t)
    for _ in range(FILL_ROUNDS):
        missing = _untested_fills(sess, coll, placement, ds, store, ctx)
        if not missing or opts.confirm_rounds == 0 or opts.from_db:  # from_db: read-only
            return
        if sess.unexpressed(coll, placement, ds):  # its arms would be the default twice
            return
        rep.note(f"confirming what the file says at {len(missing)} size(s) of {coll.name} "
                 f"where the default was kept, in {opts.confirm_rounds} fresh launch pairs")
        sizes = {s for s, _ in missing}
        verdicts = fresh_verdicts(coll, placement, ds, sorted(sizes), opts, sess, rep.note,
                                  sizes) or {}
        for s, c in missing:
            if s in verdicts:
                store.add_confirmation(ctx, c.key, verdicts[s])
        if not verdicts:
            return


def as_batch(ab: ABSamples) -> sequential.Batch:
    """Launch pairs as the sequential procedure reads them: per size, per timing mode (or
    the one figure a launch gives), per arm, per launch."""
    out: sequential.Batch = {}
    for size in ab.samples["default"]:
        if ab.modes:
            out[size] = {m: {a: arms[a][size] for a in ARMS} for m, arms in ab.modes.items()}
        else:
            out[size] = {"samples": {a: ab.samples[a][size] for a in ARMS}}
    return out


def as_verdict(r: sequential.SizeResult) -> Verdict:
    """A sequential result as the store keeps a verdict (ratios as speed-ups)."""
    main = r.main
    won = sum(median(t) < median(d) for t, d in zip(r.tuned, r.default))

    def cell(c: sequential.Cell) -> dict[str, object]:
        return {"verdict": c.verdict, "launch_speedup": 1.0 / c.ratio,
                "p_faster": c.p_faster, "p_slower": c.p_slower,
                "ratio_ci": json_ready([c.lo, c.hi]), "mde": json_ready(c.mde)}

    modes = {m: cell(c) for m, c in r.cells.items()} if list(r.cells) != ["samples"] else {}
    # confirmed with the sizes sharing its choice: what they showed together, per mode
    modes.update({pooled_mode(m, r.pooled_sizes): cell(c) for m, c in r.pooled.items()})
    return Verdict(r.size, median([x for ln in r.default for x in ln]),
                   median([x for ln in r.tuned for x in ln]), main.p_faster, main.p_slower,
                   won, r.pairs, r.verdict, 1.0 / main.ratio, modes)


@stage(PAIRS)  # however it is reached: confirmation, fills, stand-ins
def fresh_verdicts(coll: Collective, placement: Placement, ds: list[Decision],
                   sizes: list[int], opts: TuneOptions, sess: Session,
                   note: Callable[[str], None] = lambda s: None,
                   fills: Collection[int] = ()) -> dict[int, Verdict] | None:
    """The library's choice against the session's file for `ds`, in fresh alternating
    launch pairs at `sizes`, judged per size by the gate's sequential procedure: a size
    still undecided after `confirm_rounds` pairs gets more, up to `confirm_max_rounds`
    (twice that where the default stalls: its launches are one stall from another); one that
    runs out of them keeps the default (inconclusive). At `fills` (sizes where the
    file names a stand-in for the default) the pairs go on, up to twice as many, until they
    show it inside the session's `fill_within`, not only until it cannot win. None,
    launching nothing, when the two arms are the same launch: the default against itself
    proves nothing."""
    with jobdir.temporary() as tmp:
        path = Path(tmp) / "tentative.conf"
        arms = sess.arms(coll, placement, ds, path)
        if arms["default"] == arms["tuned"]:
            return None

        # a choice proposed by its mean (the default stalls) is judged by each launch's mean:
        # a launch's few calls at a large size are one stall away from another mean, so
        # every launch then takes PAIR_CALLS calls a mode at least
        means = {d.size for d in ds if d.statistic == "mean" and d.chosen != DEFAULT}
        reps = opts.settings if not means & set(sizes) else for_means(opts.settings)

        def measure(szs: list[int], first: int, rounds: int) -> sequential.Batch:
            return as_batch(ab_runs(sess.mpi, coll, placement, path, szs, rounds,
                                    reps, opts.settings.timeout, arms, first,
                                    opts.start_calls, means))

        # a choice must win in every timing mode (intersection: no correction over modes)
        # and not lose from cold (a refusal: a false one only keeps the default); one
        # made where the default stalls gets twice the pairs (Design.stall_pairs)
        most = max(opts.confirm_rounds, opts.confirm_max_rounds or 2 * opts.confirm_rounds)
        # (a choice proposed by its mean is one: only a stalling default's is)
        stalling = {d.size for d in ds if d.default_stalls and d.chosen != DEFAULT}
        design = sequential.Design(alpha=opts.confirm_alpha, min_gain=opts.min_gain,
                                   first=opts.confirm_rounds, family=1,
                                   veto=(START,) if opts.start_calls else (),
                                   max_pairs=most, stall_pairs=2 * most,
                                   stalling=tuple(sorted(stalling)))
        # a stand-in need not win: its pairs go on until they bound it, on twice the budget
        stand_in = dataclasses.replace(design, threshold=sess.fill_within,
                                       max_pairs=2 * design.max_pairs)
        res = sequential.run(measure, sizes, design, need_faster=True, note=note,
                             own=dict.fromkeys(fills, stand_in), means=means)
    for run in sharing(ds, res):
        sequential.rules_judged(res, run, design)
        carried = [s for s in run if res[s].pooled]
        if carried:
            note(f"{len(carried)} size(s) undecided alone confirmed with the sizes beside "
                 "them that share their choice")
    return {s: as_verdict(r) for s, r in res.items()}


def sharing(ds: list[Decision], judged: Collection[int]) -> list[list[int]]:
    """Runs of sizes side by side (every measured size in order, the kept ones too) that
    chose one configuration other than the default: one rule of the file each. Only the
    sizes judged here count, and a run needs three."""
    runs: list[list[int]] = []
    current: Config | None = None
    for d in sorted((d for d in ds if d.size >= 0), key=lambda d: d.size):
        if d.chosen == DEFAULT or d.chosen != current:  # another rule begins
            current = None if d.chosen == DEFAULT else d.chosen
            runs.append([])
        if current is not None and d.size in judged:  # one judged earlier: no pairs here
            runs[-1].append(d.size)
    return [r for r in runs if len(r) >= 3]


def apply_confirmations(ds: list[Decision], store: Store, ctx: Context) -> None:
    """Attach stored fresh-launch verdicts; a choice they do not confirm reverts to the
    default. A choice never put to fresh launches keeps its mark ("tuned?")."""
    pending = [d for d in ds if d.chosen != DEFAULT]
    if not pending:
        return
    measured = sorted({m.size for m in store.measurements(ctx)})
    checks = {d.size: (measured if d.size < 0 else [d.size]) for d in pending}
    for d in pending:
        vs = [store.confirmation(ctx, s, d.chosen.key) for s in checks[d.size]]
        if any(v is None for v in vs):
            d.reason += " (not confirmed in fresh launches)"
            continue
        d.confirmations = [v for v in vs if v is not None]
        faster = sum(v.verdict == "faster" for v in d.confirmations)
        slower = sum(v.verdict == "slower" for v in d.confirmations)
        if faster * 2 > len(d.confirmations) and slower == 0:
            d.reason += "; confirmed in fresh launches" + (
                " with the sizes beside it that share its choice"
                if any(v.pooled for v in d.confirmations) else "")
        else:
            ratio = ", ".join(f"{v.launch_speedup:.2f}x" for v in d.confirmations)
            d.reason = f"not confirmed in fresh launches ({ratio}): default kept"
            d.chosen = DEFAULT

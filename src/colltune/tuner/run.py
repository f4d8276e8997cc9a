"""The tuning pipeline as a Python API: plan -> measure -> store -> decide -> write."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass, replace

from colltune import __version__
from colltune.backends import registry
from colltune.backends.base import Decisions, Session, write_file
from colltune.collectives import DATATYPES, Collective
from colltune.core import account
from colltune.core.catalog import Catalog
from colltune.core.clock import SWEEP, SWITCHES, clocked, stage
from colltune.core.config import DEFAULT
from colltune.core.plan import Plan
from colltune.core.records import Decision
from colltune.core.space import sizes_for
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.host import cores
from colltune.kernel.build import build_kernel
from colltune.launchers import Launch
from colltune.options import TuneOptions
from colltune.outfile import beside
from colltune.slots import ladder, refuse_heavy_oversubscription
from colltune.store import Measurement, Store, default_db_path
from colltune.tuner import (
    artifacts,
    between,
    budgeted,
    checks,
    forecast,
    outcome,
    predicted,
    stalls,
)
from colltune.tuner.boundaries import MAX_ROUNDS, refine
from colltune.tuner.confirm import apply_confirmations, confirm_decisions, confirm_fills
from colltune.tuner.context import Run, Target
from colltune.tuner.decide import RuleSize, decide
from colltune.tuner.measure import Reporter, context_for, shares_default_launch
from colltune.tuner.search import search_one, sweep_ladder


@dataclass
class TuneResult:
    mpi: Installation
    catalog: Catalog
    rules_version: int
    decisions: dict[str, dict[int, list[Decision]]]
    failures: list[str]
    summary: dict[str, object]


def tune(opts: TuneOptions, reporter: Reporter | None = None) -> TuneResult:
    with clocked() as spent, account.charging() as acct:
        result = _tune(opts, reporter or Reporter(), acct)
    result.summary["seconds"] = {k: round(v, 2) for k, v in spent.items()}
    if opts.summary_json is not None:
        write_file(opts.summary_json, json.dumps(result.summary, indent=2) + "\n",
                   "--summary-json")
    return result


def tune_layouts(opts: TuneOptions, reporter: Reporter | None = None) -> list[TuneResult]:
    """--layouts: each layout tuned in turn inside this allocation (or hostfile), a run of
    its own with its nodes and ranks per node; a file that says the layout gathers them in
    --out, other formats get one file per layout beside it (open_run)."""
    rep = reporter or Reporter()
    checks.refuse_options(opts)  # before the first layout is launched
    results = []
    for nodes, ppn in opts.layouts or []:
        rep.note(f"layout {nodes}x{ppn}: {nodes * ppn} ranks, {nodes} node(s) x {ppn}")
        launch = replace(opts.launch or Launch(), nodes=nodes, ppn=ppn)
        results.append(tune(replace(opts, nps=[nodes * ppn], launch=launch, layouts=None,
                                    layout=f"{nodes}x{ppn}", summary_json=None), rep))
    if opts.summary_json is not None:
        doc = {"layouts": {f"{n}x{p}": r.summary
                           for (n, p), r in zip(opts.layouts or [], results, strict=True)}}
        write_file(opts.summary_json, json.dumps(doc, indent=2) + "\n", "--summary-json")
    return results


def _tune(opts: TuneOptions, rep: Reporter, acct: account.Account) -> TuneResult:
    """The pipeline's stages in order: refuse what cannot run, open the session and the
    store, measure, decide (and confirm in fresh launches), write, and what the allocation
    held for it."""
    colls = checks.refuse_options(opts)
    run = open_run(opts, rep, colls)
    try:
        if opts.time_budget is not None:
            run.budget = budgeted.open_budget(run, colls, opts.time_budget, acct.started)
        if not opts.from_db:
            measure_all(run, colls)
        decisions = predicted.predict_all(run, colls) if opts.predict else decide_all(run, colls)
        parting = (between.partings(run, decisions)
                   if opts.between == "measure" and not opts.halfway else [])
        for p in parting:
            rep.note(p.says())
        if not parting:
            summary = write_outputs(run, decisions)
            summary["allocation"] = charge_allocation(run, acct, colls)
            if run.budget is not None:
                summary["budget"] = run.budget.summary()
                for line in run.budget.left_out:
                    rep.note(f"note: {line}")
    finally:
        run.store.close()
    if parting:
        return _tune_between(opts, parting, rep, acct)
    sess = run.sess
    return TuneResult(sess.mpi, sess.catalog, sess.rules_version, decisions, run.failures,
                      summary)


def _tune_between(opts: TuneOptions, parting: list[between.Parting], rep: Reporter,
                  acct: account.Account) -> TuneResult:
    """--between measure's second pass: every size again, the halfway ones added for the
    collectives whose rules part around them; what the first pass measured and confirmed
    is in the store and is not measured again. One file and one account for both."""
    halfway: dict[int, list[str]] = {}
    for p in parting:
        halfway.setdefault(p.halfway, []).append(p.coll)
    result = _tune(replace(opts, nps=sorted({*opts.nps, *halfway}), halfway=halfway),
                   rep, acct)
    result.summary["between"] = [p.as_json() for p in parting]
    return result


def charge_allocation(run: Run, acct: account.Account, colls: list[str]
                      ) -> dict[str, object]:
    """Stage 5: what the tune held of its allocation so far (all of it but closing the
    store), kept in the store beside its measurements unless it is read-only."""
    summary = acct.summary(run.exact, forecast.launch_cost(run.opts))
    if acct.launches and not run.store.readonly:
        run.store.add_allocation(run.mpi.key, socket.gethostname(),
                                 (colls, [p.np for p in run.sess.placements]),
                                 run.exact, summary)
    return summary


def open_run(opts: TuneOptions, rep: Reporter, colls: list[str]) -> Run:
    """Stage 1: the family's session (installation, catalog, placements), the plan of what
    is measured, and the store."""
    opts, sess, plan = open_session(opts, rep, colls)
    path = opts.db or default_db_path()
    store = Store.for_deciding(path) if opts.from_db else Store(path)
    if store.readonly:
        rep.note(f"{path} is read-only here: deciding from it, recording nothing")
    return Run(opts, sess, store, plan, rep)


def open_session(opts: TuneOptions, rep: Reporter, colls: list[str]
                 ) -> tuple[TuneOptions, Session, Plan]:
    """The family's session and the plan of what is measured (opts: with a layout's --out
    beside the one asked for, where the format cannot hold layouts apart)."""
    backend = registry.named(opts.backend, han=opts.tune_han, ucc=opts.tune_ucc)
    checks.refuse_foreign(opts, backend)
    if opts.sweep == "bands" and backend.bands is None:
        raise ColltuneError(f"--sweep bands: colltune has no file that selects {backend.name}'s "
                            "configuration per message size in a sweep",
                            "use --sweep mpit or relaunch")
    sess = backend.open(opts, colls, rep.note)
    if opts.layout and opts.out and not sess.says_layout:
        # the format cannot hold several layouts' rules apart: this layout's file of its own
        opts = replace(opts, out=beside(opts.out, opts.layout))
        sess = backend.open(opts, colls, lambda _: None)  # its notes were said
    if opts.settings.default_launches > 1 and shares_default_launch(backend, sess.sweep):
        rep.note(f"note: --default-launches {opts.settings.default_launches} repeats nothing "
                 "here: " + ("simulated times repeat exactly" if backend.traits.exact else
                             "the default is measured in the same launch as the others"))
    # what is measured, built once (a parameter this library does not declare: refused)
    plan = Plan(sess.catalog, sess.grid(opts), opts.sizes, opts.excluded)
    if (opts.predict or opts.strategy == "model") and not predicted.has_formulas(sess.catalog):
        raise ColltuneError(
            f"--predict and --strategy model need cost formulas for {sess.mpi.name}'s "
            "algorithms, and colltune has none", "measure at every --np you need (its "
            "catalog names no table of models/formulas.py)")
    if opts.comm_sizes:
        sess.placements = ladder(sess.placements[0], opts.comm_sizes)
    rep.note(f"tuning {sess.mpi.describe()}")
    return opts, sess, plan


def plan_tune(opts: TuneOptions, reporter: Reporter | None = None) -> dict[str, object]:
    """--dry-run: what the tune would hold of its allocation (tuner/forecast.py), from the
    session and plan the tune would open, refused as the tune would refuse; nothing is
    launched or written."""
    rep = reporter or Reporter()
    colls = checks.refuse_options(opts)
    opts, sess, plan = open_session(opts, rep, colls)
    exact = sess.backend.traits.exact
    nodes = max(p.nodes for p in sess.placements)
    path = forecast.store_path(opts)
    store = Store(path, readonly=True) if path.is_file() else None
    try:  # what the store holds is not measured again: a resumed tune plans the rest
        targets = forecast.sweep_targets(
            opts, plan, sess.placements, sess.sweep, colls,
            (lambda c, p: store.done(context_for(sess.mpi, c, p, opts.settings)))
            if store is not None else None)
    finally:
        if store is not None:
            store.close()
    pr = forecast.prices(path, sess.mpi.key, nodes, exact, opts)
    out = forecast.forecast(targets, pr, nodes, exact)
    if not exact:  # simulated times repeat exactly: nothing stalls (tuner/stalls.py)
        out["if_the_default_stalls"] = forecast.if_stalls(
            targets, pr, nodes, stalls.seconds_per_size(opts.settings.point_time))
    halfway = (between.halfways(opts.nps, opts.launch.ppn if opts.launch else None)
               if opts.between == "measure" else [])
    if halfway:  # at most: every gap's rules may part
        more = plan_tune(replace(opts, nps=halfway, between="rule"), rep)
        out["if_rules_part"] = {"sizes": halfway,
                                "node_seconds_at_most": more["node_seconds"]}
    return out


def confirm_first(run: Run) -> bool:
    """Switches are located after fresh launches confirmed them: one that fresh launches
    refute costs no boundary rounds (simulated times need no confirmation)."""
    return not run.exact and run.opts.confirm_rounds > 0 and not run.opts.predict


def measure_all(run: Run, colls: list[str]) -> None:
    """Stage 2: warn of what skews timings, build the kernel, and search every collective
    at every placement (a ladder of communicator sizes swept in one launch first)."""
    opts, sess, rep, placements = run.opts, run.sess, run.rep, run.sess.placements
    if not opts.oversubscribe:
        for p in placements:
            refuse_heavy_oversubscription(p)
    for w in {p.warning for p in placements if p.warning}:
        rep.note(f"warning: {w}")
    if run.backend.traits.busy_polls and any(p.oversubscribe for p in placements):
        rep.note(f"warning: {run.mpi.name} busy-polls: with more ranks than cores a "
                 "waiting rank spins on a core another needs, calls take "
                 "milliseconds, and which configuration wins follows the scheduler "
                 "as much as the algorithm; tune with at most one rank per core "
                 "for a file to install")
    dt = opts.settings.datatype
    if dt != "double" and any(run.collective(c).reduction for c in colls):
        rep.note(f"reductions sum {dt} ({DATATYPES[dt]} B an element): stored apart from "
                 "other datatypes' points, decided only from them")
    build_kernel(run.mpi, on_rebuild=rep.note)  # before any launch, so a rebuild is told
    run.store.add_catalog(run.mpi.key, run.backend.name, run.catalog.algorithms)
    sess.before_measuring(rep.note)
    rungs = [p for p in placements if p.within]
    if rungs and opts.strategy == "grid":
        rep.note("measuring communicator sizes " + ", ".join(
            str(p.np) for p in placements) + f" in one launch of "
            f"{rungs[0].launched.np} ranks (groups of consecutive ranks, all at once)")
        for name in colls:
            with stage(SWEEP):
                sweep_ladder(run, run.collective(name), placements)
    for t in _targets(run, colls):
        if run.budget is not None and not run.budget.measure(
                t.where, *budgeted.to_measure(run, t), budgeted.pair_rounds(run)):
            continue
        with stage(SWEEP):
            search_one(run, t)
            stalls.resample(run, t)
        if opts.boundaries == "measure" and not confirm_first(run):
            with stage(SWITCHES):
                refine(run, t)


def _targets(run: Run, colls: list[str]) -> list[Target]:
    """Every collective at every placement, but at a size --between measure added only
    the collectives whose rules part around it."""
    halfway = run.opts.halfway
    return [Target(run.collective(name), p) for p in run.sess.placements for name in colls
            if p.np not in halfway or name in halfway[p.np]]


def decide_all(run: Run, colls: list[str]) -> Decisions:
    """Stage 3: decide every target from its measurements, confirm in fresh launches,
    locate the confirmed switches, and store the decisions."""
    decisions: Decisions = {}
    targets = _targets(run, colls)
    if run.budget is not None:  # nothing to confirm first, then the most gain a second
        targets = budgeted.spending_order(run, targets)
    for t in targets:
        ds = decide_target(run, t)
        if ds is not None:
            decisions.setdefault(t.coll.name, {})[t.placement.np] = ds
    return decisions


def decide_target(run: Run, t: Target) -> list[Decision] | None:
    """One target's decisions (None: nothing measured there, and not asked from a store)."""
    opts, store = run.opts, run.store
    ctx = run.context(t)
    ms = store.measurements(ctx)
    if opts.from_db and opts.sizes and t.coll.has_sizes:
        # --sizes with --from-db: decide at those sizes only, as asked
        keep = set(sizes_for(t.coll, t.placement.np, opts.sizes))
        ms = [m for m in ms if m.size in keep]
    if not ms:
        if opts.from_db:
            raise ColltuneError(
                f"no stored measurements of {t.where.replace(' np=', ' at np=')} for "
                f"{run.mpi.describe()} on {socket.gethostname()}"
                + (" at those --sizes" if opts.sizes else ""),
                "run without --from-db to measure first, or pass the --db used")
        return None
    if not budgeted.confirmation_fits(run, t, ms):
        return None
    ds = decide_and_confirm(run, t, ms)
    if confirm_first(run) and opts.boundaries == "measure" and not opts.from_db:
        ds = locate_confirmed(run, t, ds)
    ds = run.sess.confirmed(t.coll.name, t.placement, ds)
    for d in ds if not store.readonly else []:
        store.add_decision(ctx, d.size, d.chosen.key, d.verdict,
                           d.as_json(run.catalog, t.coll.name))
    if opts.beyond == "library":
        ds = ds + beyond_measured(t.coll, t.placement.np, ds, run.backend.rule_size)
    return ds


def write_outputs(run: Run, decisions: Decisions) -> dict[str, object]:
    """Stage 4: the family's files and the summary (what changed, said last). The store is
    still open: a session reads stored verdicts as it builds its file (MVAPICH2's ties ask
    for fresh-launch verdicts of fill-ins confirmed late)."""
    sess = run.sess
    decisions = sess.final(decisions)
    summary = make_summary(run.mpi, run.catalog, sess.rules_version, decisions, run.failures,
                           run.opts, run.searches)
    summary["predicted"] = {f"{n} np={np}": text for (n, np), text in run.predicted.items()}
    sess.write(decisions, run.predicted).into(summary)
    wrote = summary.get("wrote")
    if run.opts.layout and isinstance(wrote, dict) and run.opts.out:
        wrote.setdefault("path", str(run.opts.out))  # --out, or this layout's file beside it
    summary["changes"] = outcome.changes(decisions, summary, sess.placements)
    return summary


def decide_and_confirm(run: Run, t: Target, ms: list[Measurement], fills: bool = True
                       ) -> list[Decision]:
    """Decide from the measurements, flag what oversubscription may have caused, and keep
    a non-default choice only where fresh launches confirm it (stored verdicts reused);
    with `fills`, the file's stand-ins are judged to the end of their ladder too."""
    sess, placement = run.sess, t.placement
    ds = decide(t.coll, placement.np, ms, run.opts.alpha, run.opts.min_gain, run.exact,
                sess.backend.rule_size, run.opts.min_samples)
    artifacts.flag(ds, placement.ppn, None if placement.hostfile or placement.nodes > 1
                   else cores(), sess.backend.waiting(run.mpi.name))
    ds = sess.decided(t.coll.name, placement, ds, ms, run.store, run.context(t))
    if not run.exact:  # simulated times need no fresh launches
        confirm_decisions(run, t, ds)
        if fills:
            confirm_fills(run, t, ds)
    return ds


def locate_confirmed(run: Run, t: Target, ds: list[Decision]) -> list[Decision]:
    """Locate the switches of the confirmed decisions; the sizes measured on the way are
    confirmed in turn, and where fresh launches refute one the switch moves, so this
    repeats until no switch is left open (at most MAX_ROUNDS passes). None is located once
    the file cannot carry the decisions (a kept size with no stand-in left stays kept: new
    sizes cannot mend it); a stand-in found wanting on the way is replaced in the next
    pass's launch pairs, and those still open are judged once, at the end."""
    ctx = run.context(t)

    def confirmed_view() -> list[Decision]:
        now = decide(t.coll, ctx.np, run.store.measurements(ctx), run.opts.alpha,
                     run.opts.min_gain, run.exact, run.backend.rule_size,
                     run.opts.min_samples)
        apply_confirmations(now, run.store, ctx)
        return now

    for _ in range(MAX_ROUNDS):
        why = run.sess.unexpressed(t.coll, t.placement, ds)
        if why:
            run.rep.note(f"{t.where}: switches not located ({why})")
            return ds
        with stage(SWITCHES):
            moved = refine(run, t, confirmed_view)
        if not moved:
            break
        ds = decide_and_confirm(run, t, run.store.measurements(ctx), fills=False)
    confirm_fills(run, t, ds)
    return ds


def beyond_measured(coll: Collective, np: int, ds: list[Decision], rule_size: RuleSize
                    ) -> list[Decision]:
    """A default decision just above the largest measured size (nothing for a collective
    whose rule does not depend on the size): the calls above it get the library's own
    choice, not a decision measured at another size."""
    sized = [d for d in ds if d.size >= 0]
    if not coll.size_dependent or not sized:
        return []
    top = max(d.size for d in sized)
    return [Decision(2 * top, rule_size(coll, 2 * top, np), DEFAULT, None, None, None, None,
                     False, reason=f"not measured (above {top} B): the library's own choice")]


def make_summary(mpi: Installation, catalog: Catalog, version: int,
                 decisions: dict[str, dict[int, list[Decision]]], failures: list[str],
                 opts: TuneOptions, searches: dict[str, dict[str, object]] | None = None
                 ) -> dict[str, object]:
    return {
        "colltune": __version__,
        "mpi": {"name": mpi.name, "version": mpi.version, "prefix": str(mpi.prefix)},
        "host": socket.gethostname(),
        "rules_version": version,
        "rules_file": str(opts.out) if opts.out else None,
        "catalog_source": catalog.source,
        "collectives": {
            name: {str(np): [d.as_json(catalog, name) for d in ds] for np, ds in per_np.items()}
            for name, per_np in decisions.items()
        },
        "failures": failures,
        "strategy": opts.strategy,
        "searches": searches or {},  # "collective np=N": what the search measured
    }

"""`tune <collective>` and `tune all` (one command per collective, generated from one
definition)."""

from __future__ import annotations

import shlex
import sys
from dataclasses import replace
from pathlib import Path

import typer
from rich.table import Table
from rich.text import Text

from colltune.backends import registry
from colltune.cli.common import (
    CUTOFF_OPTION,
    DATATYPE_OPTION,
    DB_HELP,
    OBJECTIVE_OPTION,
    PARAM_OPTION,
    TIMING_OPTION,
    WINDOW_OPTION,
    BarReporter,
    _fail,
    _ints,
    _print_warnings,
    app,
    declared,
    err,
    json_to_stdout,
    out,
    write_json,
)
from colltune.collectives import COLLECTIVES, get_collective
from colltune.core import account
from colltune.core.clock import describe
from colltune.core.records import POOLED, Verdict
from colltune.core.space import parse_params, parse_size, parse_sizes
from colltune.core.stats import STALL_TEXT
from colltune.errors import ColltuneError
from colltune.launchers import Launch
from colltune.options import MeasureSettings, TuneOptions
from colltune.outfile import ensure_writable, write_atomic
from colltune.slots import parse_layouts
from colltune.tuner.budget import parse_duration
from colltune.tuner.run import TuneResult, plan_tune, tune, tune_layouts


def _print_result(res: TuneResult, quiet: bool) -> None:
    if quiet:
        return
    for name, per_np in res.decisions.items():
        for np, ds in per_np.items():
            t = Table(title=f"{name}, {np} ranks ({res.mpi.name} {res.mpi.version})")
            for col in ("size/rank", "lookup", "chosen", "best us", "default us",
                        "sweep default/best", "fresh default/chosen (95% interval)",
                        "could see", "verdict"):
                t.add_column(col)
            for d in ds:
                sized = d.size >= 0
                t.add_row(
                    str(d.size) if sized else "all", str(d.lookup_size),
                    d.chosen.label(res.catalog, name),
                    f"{d.best_median * 1e6:.2f}" if d.best_median and sized else "-",
                    f"{d.default_median * 1e6:.2f}" if d.default_median and sized else "-",
                    f"{d.default_median / d.best_median:.2f}x"
                    + (" (means)" if d.statistic == "mean" else "")
                    if d.default_median and d.best_median else "-",
                    ", ".join(_fresh(v) for v in d.confirmations) or "-",
                    _could_see(d.confirmations), d.verdict + ("!" if d.warning else ""))
            out.print(t)
            _print_warnings(ds)
            if any(d.simulated for d in ds):
                out.print("simulated (deterministic) times: tuned = at least 3% faster than the "
                          "default (SMPI's port of an older coll/tuned decision); no test, no "
                          "fresh launches needed; kept = less than 3% faster")
                continue
            out.print("sweep: default/best median in the sweep (best: the fastest measured); "
                      "fresh: default/chosen, geometric mean over fresh launch pairs and its "
                      "95% interval, per timing mode (iso: one call after a barrier, b2b: "
                      "windows of calls back to back, loop: stretches of 1000 calls "
                      "free-running); a choice must win in every mode; could see: the "
                      "smallest difference those pairs would have shown (80% power)")
            if any(d.statistic == "mean" for d in ds):
                out.print(f"(means): the default stalls at this size (calls {STALL_TEXT}: "
                          "retransmission timeouts on a congested link), so "
                          "the sweep and the fresh launch pairs compare means, which count "
                          "every stall, not medians (docs/methodology.md)")
            out.print("verdict: tuned = confirmed faster in fresh launches (sequential: more "
                      "pairs while undecided, up to --confirm-max-rounds); slower = fresh "
                      "launches showed it slower (default kept); not significant = fresh "
                      "launches could not tell it from the default at this noise (default "
                      "kept); kept = no significant win in the sweep, nothing tried; default "
                      "= the default was the fastest; unexpressed = a win the output cannot "
                      "carry (default kept, nothing compared); tuned? = not confirmed "
                      "(--confirm-rounds 0 or --from-db)")
    if res.failures:
        err.print(f"{len(res.failures)} point(s) excluded:", highlight=False)
        for f in res.failures[:20]:
            err.print(f"  {f}", highlight=False, markup=False)


_SHORT = {"isolated": "iso", "back-to-back": "b2b", "loop": "loop"}


def _fresh(v: Verdict) -> str:
    """Each mode's default/chosen ratio and its interval (as speed-ups: the interval of
    chosen/default inverted)."""
    if not v.modes:
        return f"{v.launch_speedup:.2f}x"
    parts = []
    for m, x in sorted(v.modes.items(), key=lambda kv: kv[0] != "isolated"):
        mode, with_, rule = m.partition(POOLED)  # "isolated with 5 sizes": a rule's pairs
        text = f"{_SHORT.get(mode, mode)}{with_}{rule} {float(x['launch_speedup']):.2f}x"  # type: ignore[arg-type]
        ci = x.get("ratio_ci")
        if isinstance(ci, list) and len(ci) == 2 and all(ci):
            text += f" ({1 / ci[1]:.2f}-{1 / ci[0]:.2f})"
        parts.append(text)
    return " ".join(parts)


def _could_see(vs: list[Verdict]) -> str:
    """The smallest difference the fresh pairs could have confirmed, in the weakest mode
    (the minimum detectable effect, 80% power, as a percentage of the time)."""
    mdes = [float(x["mde"]) for v in vs for x in v.modes.values()  # type: ignore[arg-type]
            if isinstance(x.get("mde"), (int, float))]
    return f"{(max(mdes) - 1) * 100:.0f}%" if mdes else "-"


def _family(backend: str | None, out_format: str | None, mpi: str | None,
            platform: Path | None, quiet: bool = False) -> str:
    """The family to tune: --backend, else the one that writes --format, else the one
    installed at --mpi (a note when the prefix holds several)."""
    try:
        name, note = registry.resolve(backend, out_format, mpi, platform)
    except ColltuneError as e:
        _fail(e)
        raise
    if note and not quiet:
        err.print(note, highlight=False, markup=False)
    return name


def _script_family(backend: str | None, out_format: str | None, mpi: str | None,
                   platform: Path | None) -> str:
    """The family a batch script's plan is counted for: as tune finds it, or, where --mpi
    is not installed here (a prefix only the compute nodes have, a module the job loads),
    as if no prefix were given; the job finds its MPI itself."""
    from colltune.errors import MPIError

    try:
        return registry.resolve(backend, out_format, mpi, platform)[0]
    except MPIError:
        name = registry.resolve(backend, out_format, None, platform)[0]
        err.print(f"note: no MPI at {mpi} here: the script's time limit counts {name}'s "
                  "algorithms; the job finds the MPI at that prefix itself",
                  highlight=False, markup=False)
        return name


def _arrival(profile: Path, name: str, nps: str, quiet: bool) -> tuple[tuple[float, ...], ...]:
    """--arrival PROFILE: the rows the kernel replays for `name` on the one --np."""
    from colltune.apploop.profiling.replay import rows_for

    sizes = _ints(nps, "--np")
    if name == "all" or len(sizes) != 1:
        raise ColltuneError("--arrival replays one collective's pattern on one communicator "
                            "size", "tune one collective at one --np, or the whole profile "
                            "with tune app")
    rows, said = rows_for(profile, name, sizes[0])
    if not quiet:
        err.print(Text(said))
    return rows


def _nps(np: str | None, layouts: str | None, nodes: int | None, ppn: int | None) -> str:
    """--np, or the sizes of --layouts (which says nodes and ranks per node itself)."""
    if layouts and (np or nodes or ppn):
        _fail(ColltuneError("--layouts says each run's ranks, nodes and ranks per node",
                            "leave out --np, --nodes and --ppn, e.g. --layouts 2x2,1x4"))
    return np or "4"


def _run_tune(opts: TuneOptions, quiet: bool) -> None:
    """Tune as `opts` says (each layout in turn, where it names several), then print each
    run's outcome."""
    try:
        results = (tune_layouts(opts, BarReporter(quiet)) if opts.layouts else
                   [tune(opts, BarReporter(quiet))])
    except ColltuneError as e:
        _fail(e)
        return
    for res in results:
        _print_outcome(res, opts.out, quiet)


def _print_plans(opts: TuneOptions, quiet: bool) -> None:
    """--dry-run: each layout's plan as a table and a sentence, nothing run; the notes the
    tune would say on opening (what the installation may not finish, ...) said first."""
    rep = BarReporter(quiet)
    try:
        lays = opts.layouts or [(0, 0)]
        plans = {f"{n}x{p}": plan_tune(replace(
            opts, nps=[n * p], launch=replace(opts.launch or Launch(), nodes=n, ppn=p),
            layouts=None, layout=f"{n}x{p}"), rep) for n, p in lays} if opts.layouts \
            else {"": plan_tune(opts, rep)}
        if opts.summary_json is not None:
            doc = plans[""] if "" in plans else {"layouts": plans}
            write_json(opts.summary_json, doc)
    except ColltuneError as e:
        _fail(e)
        return
    for where, plan in plans.items():
        total = float(str(plan["node_seconds"])) or 1.0
        t = Table(title=f"What the tune would hold{' at ' + where if where else ''}")
        for col in ("stage", "node-seconds", "share"):
            t.add_column(col)
        stages = plan["stages"]
        for stage, secs in (stages.items() if isinstance(stages, dict) else []):
            t.add_row(stage, f"{secs:.1f}", f"{100 * secs / total:.0f}%")
        out.print(t)
        err.print(f"plan: {account.hours(total)} on {plan['nodes']} node(s) (about "
                  f"{float(str(plan['wall_seconds'])) / 60:.1f} min), "
                  f"{plan['sweep_launches']} sweep launch(es), {plan['points']} points; "
                  f"priced from {plan['priced_from']}", highlight=False, markup=False)
        stall = plan.get("if_the_default_stalls")
        if isinstance(stall, dict) and stall.get("sizes"):
            err.print(f"not in the plan: where the default stalls (a congested network), "
                      f"the tune measures it again, {stall['node_seconds_per_size']:.1f} "
                      f"node-seconds a size, "
                      f"{account.hours(float(stall['node_seconds_at_most']))} at most "
                      f"(all {stall['sizes']} sizes; docs/methodology.md, \"Where the "
                      "default stalls, the mean decides\")", highlight=False, markup=False)
        part = plan.get("if_rules_part")
        if isinstance(part, dict):
            err.print(f"not in the plan: --between measure, where two neighbouring sizes' "
                      f"rules part, measures the size halfway too (of "
                      f"{', '.join(map(str, part['sizes']))}): "
                      f"{account.hours(float(part['node_seconds_at_most']))} at most",
                      highlight=False, markup=False)


def _print_outcome(res: TuneResult, out_path: Path | None, quiet: bool) -> None:
    """One run's table, what it wrote and how to use it, and, last, what the file changes."""
    _print_result(res, quiet)
    wrote = res.summary.get("wrote")
    if out_path and isinstance(wrote, dict) and not quiet:
        # what the family wrote and how it is used: each Session.write says it
        also = f" and {wrote['also']}" if wrote.get("also") else ""
        use = f"; use: {wrote['use']}" if wrote.get("use") else ""
        where = wrote.get("path") or out_path  # a family may write another name (.dat)
        err.print(f"wrote {where} ({wrote['what']}){also}{use}",
                  highlight=False, markup=False)
        for n in wrote.get("notes") or []:
            err.print(f"note: {n}", highlight=False, markup=False)
    spent = res.summary.get("seconds")
    if isinstance(spent, dict) and not quiet:  # what confirmation cost, beside the sweep
        err.print(f"took {describe(spent)}", highlight=False, markup=False)
    held = res.summary.get("allocation")
    if isinstance(held, dict) and held.get("launches") and not quiet:
        err.print(f"allocation: {account.describe(held)}", highlight=False, markup=False)
    changes = res.summary.get("changes")
    if out_path and isinstance(changes, dict) and not quiet:  # the last line: what it does
        err.print(str(changes["sentence"]), highlight=False, markup=False)


def _without_option(args: list[str], name: str) -> list[str]:
    """`args` without `name VALUE` or `name=VALUE` (both spellings typer accepts)."""
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == name:
            skip = True
        elif not a.startswith(name + "="):
            out.append(a)
    return out


def _write_slurm_script(name: str, np: str, sizes: str | None, segsizes: str | None,  # noqa: PLR0913 (the tune's options the script's size depends on)
                        params: list[str], nodes: int | None, ppn: int | None, point_time: float,
                        path: Path, backend: str, target: tuple[bool, bool],
                        between: str = "rule", datatype: str = "double") -> None:
    from colltune.core.plan import Plan
    from colltune.outputs.slurm_script import render
    from colltune.tuner.between import halfways
    from colltune.tuner.forecast import time_limit

    try:
        nps = _ints(np, "--np")
        if between == "measure":  # the job may measure a size halfway in every gap
            nps += halfways(nps, ppn)
        names = sorted(COLLECTIVES) if name == "all" else [get_collective(name).name]
        size_list = parse_sizes(sizes) if sizes else None
        segs = [parse_size(x) for x in segsizes.split(",")] if segsizes else None
        family = registry.named(backend, han=target[0], ucc=target[1])
        cat = family.plan_catalog(names)  # the plan's size; the job reads the real catalog
        if cat is None:
            raise ColltuneError(f"--slurm-script sizes the job from the plan, and {family.name}"
                                "'s algorithms are known only from the installation",
                                f"run tune {name} --mpi PREFIX inside your own batch job")
        # the plan the job will run, counted here for its time limit
        plan = Plan(cat, cat.grid(parse_params(params), segs), size_list)
        # a reduction summing chars measures its 1 and 2 B too: count what the job sums
        points = plan.count([get_collective(n).summing(datatype) for n in names], nps)
        args = _without_option(sys.argv[1:], "--slurm-script")
        limit = time_limit(points, point_time, len(names) * len(nps), nodes or 1)
        text = render(args, max(nps), nodes, ppn, limit, name=f"colltune-{name}")
        ensure_writable(path, "--slurm-script")
        write_atomic(path, text)
        path.chmod(0o755)
    except (ColltuneError, ValueError) as e:
        _fail(e if isinstance(e, ColltuneError) else
              ColltuneError(f"cannot write the batch script: {e}", "check the options"))
        return
    err.print(f"wrote {path}: submit it with sbatch {path}", highlight=False, markup=False)



def _make_tune_command(name: str) -> None:
    help_text = ("Tune every collective." if name == "all" else
                 f"Measure {name} algorithms and write the family's rules file "
                 "(Open MPI rules by default; --format for the others).")

    def command(
        np: str | None = typer.Option(None, "--np",
                                      help="Communicator size(s), e.g. 4 or 2,4 (default 4)."),
        layouts: str | None = typer.Option(
            None, "--layouts",
            help="Layouts measured in turn inside this allocation or hostfile, NODESxPPN "
                 "each (2x2,1x4: 4 ranks on 2 nodes, then on one). A file that says the "
                 "layout (Open MPI 6's JSON) holds them all; other formats get one file "
                 "each, beside --out (rules.2x2.conf). Instead of --np, --nodes, --ppn."),
        out_path: Path | None = typer.Option(None, "--out", "-o",
                                                help="Rules file to write (merged if it exists)."),
        mpi: str | None = typer.Option(None, "--mpi", help="MPI installation prefix."),
        backend: str | None = typer.Option(None, "--backend",
                                           help=registry.backend_help()),
        out_format: str | None = typer.Option(None, "--format", help=registry.format_help()),
        for_np: int | None = typer.Option(
            None, "--for-np", help="mvapich2: the --np whose decisions the profile holds "
                                   "(MVAPICH2 has one table for every communicator size; "
                                   "default: the largest)."),
        platform: Path | None = typer.Option(None, "--platform",
                                             help="smpi: SimGrid platform XML to simulate."),
        launch_cost: str | None = declared(TuneOptions, "launch_cost"),
        tune_han: bool = declared(TuneOptions, "tune_han"),
        tune_ucc: bool = declared(TuneOptions, "tune_ucc"),
        db: Path | None = typer.Option(None, "--db", help=DB_HELP),
        sizes: str | None = typer.Option(None, "--sizes", help="Per-rank sizes: 8,1K,1M."),
        segsizes: str | None = typer.Option(None, "--segsizes", help="Segment sizes: 0,4K."),
        params: list[str] = PARAM_OPTION,
        strategy: str = declared(TuneOptions, "strategy"),
        budget: int | None = declared(TuneOptions, "budget"),
        top_k: int = declared(TuneOptions, "top_k"),
        predict: bool = declared(TuneOptions, "predict"),
        fit_np: str = typer.Option("2,3,4", "--fit-np",
                                   help="With --predict: communicator sizes measured."),
        ei_stop: float = declared(TuneOptions, "ei_stop"),
        sweep: str = declared(TuneOptions, "sweep"),
        default_launches: int = declared(MeasureSettings, "default_launches", min=1),
        comm_sizes: str | None = typer.Option(
            None, "--comm-sizes",
            help="Communicator sizes measured inside the one launch of --np ranks (2:512: "
                 "the powers of two between; or 2,4,8): groups of consecutive ranks run "
                 "the collective at once, as an application's row communicators; one rules "
                 "section each. Without it, one size per launch (--np 2,4,...)."),
        rules_version: int | None = typer.Option(None, "--rules-version",
                                                    help="1 classic, 2 rule-file-version-2, 3 JSON "
                                                         "(Open MPI 6; its default there)."),
        from_db: bool = declared(TuneOptions, "from_db"),
        hostfile: str | None = typer.Option(None, "--hostfile", help="Open MPI hostfile."),
        oversubscribe: bool = declared(TuneOptions, "oversubscribe"),
        launcher: str | None = typer.Option(None, "--launcher",
                                            help="mpirun or srun (default: srun inside a "
                                                 "Slurm allocation, else mpirun)."),
        nodes: int | None = typer.Option(None, "--nodes", help="Nodes to spread ranks over."),
        ppn: int | None = typer.Option(None, "--ppn", help="Ranks per node."),
        launcher_args: str = typer.Option("", "--launcher-args",
                                          help="More launcher options, passed as they are."),
        time_budget: str | None = typer.Option(
            None, "--time-budget",
            help="Fit the allocation: measure and confirm each collective at each size only "
                 "where its forecast fits in what is left (90s, 5m, 1h30m, HH:MM:SS); the "
                 "rest is left to the library, and a later run with more resumes."),
        dry_run: bool = typer.Option(
            False, "--dry-run", metavar="",
            help="Say what the tune would hold of its allocation (node-hours by stage, "
                 "priced from the store's earlier tunes of this installation) and stop: "
                 "nothing is launched or written (--summary-json: the plan as JSON)."),
        slurm_script: Path | None = typer.Option(
            None, "--slurm-script", help="Write a Slurm batch script that runs this tuning "
                                         "in an allocation, instead of running it now."),
        summary_json: Path | None = typer.Option(None, "--summary-json",
                                                    help="Write decisions as JSON."),
        quiet: bool = typer.Option(False, "--quiet", "-q", metavar="",
                                   help="No progress or tables."),
        timeout: float = declared(MeasureSettings, "timeout"),
        point_time: float = declared(MeasureSettings, "point_time"),
        rel_ci: float = declared(MeasureSettings, "rel_ci"),
        min_reps: int = declared(MeasureSettings, "min_reps"),
        max_reps: int = declared(MeasureSettings, "max_reps"),
        seed: int = declared(MeasureSettings, "seed"),
        confirm_rounds: int = declared(TuneOptions, "confirm_rounds"),
        confirm_max_rounds: int | None = declared(TuneOptions, "confirm_max_rounds"),
        start_calls: int = declared(TuneOptions, "start_calls"),
        timing: str = TIMING_OPTION,
        window: int = WINDOW_OPTION,
        objective: str = OBJECTIVE_OPTION,
        datatype: str = DATATYPE_OPTION,
        cutoff: float = CUTOFF_OPTION,
        boundaries: str = declared(TuneOptions, "boundaries"),
        between: str = declared(TuneOptions, "between"),
        arrival: Path | None = typer.Option(
            None, "--arrival",
            help="A profile (tune profile -o): every point is timed with the kernel "
                 "replaying the arrival pattern it recorded for this collective on --np "
                 "ranks (each rank waits its recorded delay before each call), stored apart "
                 "from points timed with the ranks entering together. One collective, one "
                 "--np."),
        trade_off: bool = declared(TuneOptions, "trade_off"),
    ) -> None:
        if slurm_script is not None:
            _write_slurm_script(name, np or "4", sizes, segsizes, params, nodes, ppn, point_time,
                                slurm_script, _script_family(backend, out_format, mpi,
                                                             platform),
                                (tune_han, tune_ucc), between, datatype)
            return
        nps = _nps(np, layouts, nodes, ppn)
        family = _family(backend, out_format, mpi, platform, quiet)
        quiet = json_to_stdout(summary_json) or quiet
        try:
            lays = parse_layouts(layouts) if layouts else None
            rows = _arrival(arrival, name, nps, quiet) if arrival is not None else ()
            opts = TuneOptions(
                backend=family, platform=platform, tune_han=tune_han, tune_ucc=tune_ucc,
                for_np=for_np,
                collectives=[name], layouts=lays,
                nps=[n * p for n, p in lays] if lays else _ints(nps, "--np"), out=out_path,
                mpi=mpi, db=db,
                sizes=parse_sizes(sizes) if sizes else None,
                segsizes=[parse_size(s) for s in segsizes.split(",")] if segsizes else None,
                params=parse_params(params or []), strategy=strategy, budget=budget,
                ei_stop=ei_stop, top_k=top_k, sweep=sweep,
                comm_sizes=parse_sizes(comm_sizes) if comm_sizes else None,
                predict=predict, fit_nps=_ints(fit_np, "--fit-np"),
                launch=Launch(launcher, nodes, ppn, tuple(shlex.split(launcher_args))),
                rules_version=rules_version, from_db=from_db,
                hostfile=hostfile, summary_json=summary_json, confirm_rounds=confirm_rounds,
                confirm_max_rounds=confirm_max_rounds, start_calls=start_calls,
                oversubscribe=oversubscribe,
                boundaries=boundaries, between=between, trade_off=trade_off, out_format=out_format,
                launch_cost=launch_cost,
                time_budget=parse_duration(time_budget) if time_budget else None,
                settings=MeasureSettings(min_reps=min_reps, max_reps=max_reps, rel_ci=rel_ci,
                                         point_time=point_time, seed=seed, timeout=timeout,
                                         timing=timing, window=window, objective=objective,
                                         datatype=datatype, cutoff=cutoff,
                                         default_launches=default_launches,
                                         arrival=rows),
            )
        except ColltuneError as e:
            _fail(e)
            return
        if dry_run:
            _print_plans(opts, quiet)
            return
        _run_tune(opts, quiet)

    command.__doc__ = help_text
    app.command(name=name, help=help_text)(command)


for _name in [*sorted(COLLECTIVES), "all"]:
    _make_tune_command(_name)

"""`tune verify`: the library's choice against a file, in fresh launches."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table
from rich.text import Text

from colltune.cli.common import (
    DATATYPE_OPTION,
    HOSTFILE_OPTION,
    LAUNCHER_ARGS_OPTION,
    LAUNCHER_OPTION,
    NODES_OPTION,
    OBJECTIVE_OPTION,
    PPN_OPTION,
    TIMING_OPTION,
    WINDOW_OPTION,
    _fail,
    app,
    err,
    json_to_stdout,
    launch_of,
    out,
)
from colltune.core.space import parse_sizes
from colltune.errors import ColltuneError
from colltune.outfile import ensure_writable, write_atomic
from colltune.tuner.checks import check_repetitions

if TYPE_CHECKING:
    from colltune.tuner.sequential import Design
    from colltune.verification.verify import CollectiveCheck, SizeCheck, VerifyReport


@app.command("verify")
def verify_cmd(
    args: list[str] = typer.Argument(..., metavar="FILE | -- LAUNCHER ... PROGRAM ...",
                                     help="Rules file to verify; with --app, the "
                                          "application's launch command (after --)."),
    app_mode: bool = typer.Option(False, "--app", metavar="", help="Run the application itself, "
                                                       "alternately without and with --rules."),
    rules_path: Path | None = typer.Option(None, "--rules", help="With --app: the rules file."),
    baseline: Path | None = typer.Option(
        None, "--baseline", help="With --app: the first arm runs this file instead of the "
                                 "library's default (judge two files against each other: "
                                 "tune app --arrival both's rules.together.conf against "
                                 "rules.conf)."),
    pairs: int = typer.Option(5, "--pairs", help="With --app: default/rules run pairs "
                                                 "before the first look (then more while "
                                                 "undecided, up to --max-rounds)."),
    backend: str | None = typer.Option(None, "--backend", help="With --app: the MPI family "
                                                               "(default: the file's)."),
    app_timeout: float | None = typer.Option(None, "--app-timeout",
                                             help="With --app: seconds per run."),
    np: int = typer.Option(4, "--np", help="Communicator size."),
    collective: list[str] | None = typer.Option(None, "--collective", "-c",
                                                help="Only these (default: all in the file)."),
    mpi: str | None = typer.Option(None, "--mpi", help="MPI installation prefix."),
    sizes: str | None = typer.Option(None, "--sizes", help="Per-rank sizes: 8,1K,1M."),
    rounds: int = typer.Option(5, "--rounds", help="Default/rules launch pairs per size "
                                                   "before the first look."),
    max_rounds: int = typer.Option(16, "--max-rounds", help="Launch pairs a size may use "
                                                            "while undecided."),
    time_budget: float | None = typer.Option(None, "--time-budget",
                                             help="Seconds; then undecided sizes stop as "
                                                  "inconclusive."),
    threshold: float = typer.Option(0.10, "--threshold",
                                    help="A practical difference: 0.10 is 10% slower."),
    alpha: float = typer.Option(0.05, "--alpha",
                                help="False alarms: the chance the whole run calls a size "
                                     "that is not slower slower (or faster)."),
    allow_inconclusive: bool = typer.Option(False, "--allow-inconclusive", metavar="",
                                            help="Pass (with a warning) when sizes stay "
                                                 "undecided."),
    aa: bool = typer.Option(False, "--aa", metavar="",
                            help="Calibrate: both arms run the library's default, at every "
                                 "size; what this machine's noise lets the gate see."),
    point_time: float = typer.Option(0.15, "--point-time", help="Seconds per size and launch."),
    with_: str | None = typer.Option(None, "--with", help="osu or imb: also judge by OSU "
                                     "Micro-Benchmarks or IMB-MPI1 (Intel MPI's own)."),
    osu_dir: Path | None = typer.Option(None, "--osu-dir", help="Where osu_<coll> live."),
    step: str | None = typer.Option(None, "--step", help="Also judge one application time "
                                    "step: the collective at each of these per-rank sizes "
                                    "in turn, free-running (the sizes one step of your "
                                    "application calls: tune profile lists them)."),
    step_from: Path | None = typer.Option(None, "--step-from", help="Also judge the step "
                                          "of each collective at the sizes this profile "
                                          "(tune profile -o) shows the application calling "
                                          "on --np ranks."),
    hostfile: str | None = HOSTFILE_OPTION,
    launcher: str | None = LAUNCHER_OPTION,
    nodes: int | None = NODES_OPTION,
    ppn: int | None = PPN_OPTION,
    launcher_args: str = LAUNCHER_ARGS_OPTION,
    json_out: Path | None = typer.Option(None, "--json", help="Write the results as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", metavar=""),
    timing: str = TIMING_OPTION,
    window: int = WINDOW_OPTION,
    objective: str = OBJECTIVE_OPTION,
    datatype: str = DATATYPE_OPTION,
) -> None:
    """Default vs the rules file in fresh interleaved launches, sequentially at the sizes
    the file changes; exit 1 on a regression or if the library does not apply the file, 5
    if a size stays undecided. With --app: the application's own runs, default and --rules
    alternating; exit 1 if it is significantly slower with the rules."""
    o = _VerifyArgs(**locals())  # the options, converted once (before any other local)
    from colltune.tuner.sequential import Design
    from colltune.verification.verify import report_json

    json_to_stdout(json_out)
    if app_mode:
        _verify_app(args, rules_path, Design(alpha=alpha, threshold=threshold, first=pairs,
                                             max_pairs=max(max_rounds, pairs)),
                    _AppOptions(backend, mpi, app_timeout, time_budget, aa,
                                allow_inconclusive, json_out, quiet, baseline))
        return
    try:
        rep = _verify_file(o)
    except ColltuneError as e:
        _fail(e)
        return
    _print_report(rep)
    if json_out is not None:
        write_atomic(json_out, report_json(rep))
    _verify_exit(rep, allow_inconclusive)


@dataclass(frozen=True)
class _VerifyArgs:
    """tune verify's options as the command took them (its parameters, in order)."""

    args: list[str]
    app_mode: bool
    rules_path: Path | None
    baseline: Path | None
    pairs: int
    backend: str | None
    app_timeout: float | None
    np: int
    collective: list[str] | None
    mpi: str | None
    sizes: str | None
    rounds: int
    max_rounds: int
    time_budget: float | None
    threshold: float
    alpha: float
    allow_inconclusive: bool
    aa: bool
    point_time: float
    with_: str | None
    osu_dir: Path | None
    step: str | None
    step_from: Path | None
    hostfile: str | None
    launcher: str | None
    nodes: int | None
    ppn: int | None
    launcher_args: str
    json_out: Path | None
    quiet: bool
    timing: str
    window: int
    objective: str
    datatype: str


def _verify_file(o: _VerifyArgs) -> VerifyReport:
    """A rules file against the library's choice (the options checked first)."""
    from colltune.collectives import DATATYPES
    from colltune.kernel.launch import Repetitions
    from colltune.tuner.sequential import Design
    from colltune.verification.verify import VerifyRequest, verify

    if len(o.args) != 1:
        raise ColltuneError(f"tune verify takes one rules file, got {len(o.args)} arguments",
                            "tune verify FILE --np N, or tune verify --app --rules FILE -- "
                            "mpirun ... ./app")
    if o.with_ not in (None, "osu", "imb"):
        raise ColltuneError(f"unknown --with {o.with_}", "use --with osu or --with imb")
    if o.point_time <= 0:
        raise ColltuneError("--point-time must be more than 0", "e.g. --point-time 0.15")
    _check_gate(o.json_out, o.threshold, o.alpha)
    if o.time_budget is not None and o.time_budget <= 0:
        raise ColltuneError("--time-budget must be more than 0 seconds",
                            "e.g. --time-budget 600")
    reps = Repetitions(min_reps=15, point_time=o.point_time, timing=o.timing,
                       window=o.window, objective=o.objective, min_ticks=100)
    check_repetitions(reps)
    if o.datatype not in DATATYPES:
        raise ColltuneError(f"unknown --datatype '{o.datatype}'",
                            "use --datatype " + ", ".join(DATATYPES))
    return verify(VerifyRequest(
        Path(o.args[0]), o.np, o.mpi, o.collective or None,
        parse_sizes(o.sizes) if o.sizes else None, o.rounds, reps, with_=o.with_,
        osu_dir=o.osu_dir, hostfile=o.hostfile,
        design=Design(alpha=o.alpha, threshold=o.threshold, max_pairs=o.max_rounds),
        time_budget=o.time_budget, aa=o.aa, step=_step(o.step, o.step_from, o.np),
        launch=launch_of(o.launcher, o.nodes, o.ppn, o.launcher_args),
        datatype=o.datatype),
        note=(lambda s: None) if o.quiet else
        (lambda s: err.print(s, highlight=False, markup=False)))


def _check_gate(json_out: Path | None, threshold: float, alpha: float) -> None:
    """What a verification (of a file, or --app) refuses before it launches anything: a
    --json it could not write, a threshold or alpha out of range."""
    if json_out is not None:
        ensure_writable(json_out, "--json")
    if not 0 < threshold < 1:
        raise ColltuneError("--threshold must be between 0 and 1", "e.g. --threshold 0.1")
    if not 0 < alpha < 0.5:
        raise ColltuneError("--alpha must be between 0 and 0.5", "e.g. --alpha 0.05")


def _verify_exit(rep: VerifyReport, allow_inconclusive: bool) -> None:
    """Exit 1 on a regression or a file not applied, 5 where a size stays undecided (unless
    allowed)."""
    undecided = [f"{c.collective} {_where(r)}{src}" for c in rep.checks
                 for src, r in _judged(c) if r.verdict == "inconclusive"]
    if rep.failed:
        bad = [f"{c.collective} {_where(r)}{src}" for c in rep.checks
               for src, r in _judged(c) if r.verdict == "slower"]
        bad += [f"{c.collective} not applied" for c in rep.checks if c.applied == "not applied"]
        err.print(f"verify failed: {', '.join(bad)}", highlight=False, markup=False)
        raise typer.Exit(1)
    if undecided and not allow_inconclusive:
        err.print(f"verify inconclusive: {', '.join(undecided)} neither slower nor within "
                  f"{100 * rep.design.threshold:.0f}% in {rep.design.max_pairs} launch pairs "
                  "(more --max-rounds or --time-budget, a quieter machine, or "
                  "--allow-inconclusive)", highlight=False, markup=False)
        raise typer.Exit(5)
    if undecided:
        err.print(f"warning: passed with undecided sizes (--allow-inconclusive): "
                  f"{', '.join(undecided)}", highlight=False, markup=False)


def _step(sizes: str | None, profile: Path | None, np: int
          ) -> list[int] | dict[str, list[int]] | None:
    """--step's sizes, or each collective's from an application's profile (--step-from)."""
    if sizes and profile:
        raise ColltuneError("--step and --step-from both name a step",
                            "give the sizes, or the profile that has them")
    if profile is None:
        return parse_sizes(sizes) if sizes else None
    from colltune.apploop.profiling.profile import load
    from colltune.verification.step import profile_steps

    return profile_steps(load(profile), np)


def _judged(c: CollectiveCheck) -> list[tuple[str, SizeCheck]]:
    """Every row of a collective's check, each with its source as verdicts name it."""
    return [(src, r) for src, rows in (("", c.kernel), (f" ({c.second})", c.osu),
                                       ("", c.step)) for r in rows]


def _where(r: SizeCheck) -> str:
    """A row's size (marked where a rule changes), or what it timed instead (a step)."""
    return r.what or f"{r.size} B{' (edge)' if r.boundary else ''}"


def _mde(x: float) -> str:
    return "-" if x == float("inf") else f"{x:.2f}x"


def _mode_cell(m: dict[str, object] | None) -> str:
    return "" if m is None else f"{float(m['ratio']):.3f} {m['verdict']}"  # type: ignore[arg-type]




@dataclass(frozen=True)
class _AppOptions:
    """`tune verify --app`'s options besides the design and the command."""

    backend: str | None
    mpi: str | None
    timeout: float | None
    time_budget: float | None
    aa: bool
    allow_inconclusive: bool
    json_out: Path | None
    quiet: bool
    baseline: Path | None = None


def _verify_app(cmd: list[str], rules: Path | None, design: Design, o: _AppOptions) -> None:
    import json

    from colltune.apploop.app.verify_app import AppRequest, as_json, verify_app

    try:
        if rules is None:
            raise ColltuneError("--app needs --rules FILE", "tune verify --app --rules "
                                "rules.conf -- mpirun -np 4 ./app")
        _check_gate(o.json_out, design.threshold, design.alpha)
        v = verify_app(AppRequest(cmd, rules, design, o.backend, o.mpi, o.timeout,
                                  o.time_budget, o.aa, o.baseline),
                       note=None if o.quiet else
                       (lambda s: err.print(s, highlight=False, markup=False)))
    except ColltuneError as e:
        _fail(e)
        return
    first = f"{o.baseline}" if o.baseline else "the default"
    what = f"{first} twice (--aa)" if o.aa else f"{first} against {rules}"
    t = Table(title=Text(f"{' '.join(cmd)[:80]}: {v.pairs} pairs, {what}"))
    base = "baseline" if o.baseline else "default"
    for col in ("measure", f"{base} s (median)", "rules s (median)", f"rules/{base}",
                "95% interval", "could see", "verdict"):
        t.add_column(col)
    for m in v.measures.values():
        lo, hi = m.interval
        t.add_row(m.name, f"{sorted(m.default)[len(m.default) // 2]:.4f}",
                  f"{sorted(m.tuned)[len(m.tuned) // 2]:.4f}", f"{m.ratio:.3f}",
                  f"{lo:.3f}-{hi:.3f}", f"{m.could_see:.2f}x",
                  (m.verdict.upper() if m.verdict == "slower" else m.verdict)
                  + (f" ({m.reason})" if m.reason else ""))
    out.print(t)
    out.print("wall: the slowest rank from MPI_Init to MPI_Finalize; collectives: the mean "
              "rank's time in blocking collectives; command: the whole launch. rules/default: "
              "geometric mean over pairs; interval: at the last look's level; could see: the "
              f"smallest slowdown found with 80% power. Verdicts keep {design.alpha:g} false "
              f"alarms over the run; 'same' means within {design.threshold:.0%}; "
              f"{v.disturbed} pair(s) run again for a load change", highlight=False)
    if o.json_out is not None:
        write_atomic(o.json_out, json.dumps(as_json(v), indent=1) + "\n")
    if v.failed:
        err.print("verify failed: the application is significantly slower with the rules "
                  "(wall time)", highlight=False, markup=False)
        raise typer.Exit(1)
    if v.inconclusive:
        why = v.measures["wall"].reason
        if o.allow_inconclusive:
            err.print(f"warning: inconclusive by wall time ({why})", highlight=False,
                      markup=False)
        else:
            err.print(f"verify inconclusive by wall time: {why}; more pairs (--max-rounds) "
                      "or a quieter node may decide (--allow-inconclusive passes)",
                      highlight=False, markup=False)
            raise typer.Exit(5)


def _print_report(rep: VerifyReport) -> None:
    """Each collective's proof, its tables (kernel, second benchmark, step), and how the
    verdicts were reached."""
    from colltune.tuner.sequential import VERDICTS

    for c in rep.checks:
        mark = {"applied": "applied", "default everywhere": "applied (default everywhere)"}
        out.print(f"{c.collective}, {c.np} ranks: {mark.get(c.applied, c.applied.upper())}: "
                  f"{c.applied_detail}", highlight=False)
        for source, rows in (("kernel", c.kernel), (c.second, c.osu), ("step", c.step)):
            if rows:
                _print_rows(rep, c, source, rows)
        sp = f"{c.speedup:.3f}x (kernel)" if c.speedup else "-"
        if c.osu_speedup:
            sp += f", {c.osu_speedup:.3f}x ({c.second})"
        counts = ", ".join(f"{sum(r.verdict == v for r in c.kernel)} {v}"
                           for v in VERDICTS)
        out.print(f"{c.collective}: geometric-mean speed-up over the sizes tested {sp}; "
                  f"{counts}; {sum(r.verdict == 'default' for r in c.kernel)} left to the "
                  "library (not tested)", highlight=False)
    _print_design(rep.design, rep.aa)


def _print_rows(rep: VerifyReport, c: CollectiveCheck, source: str | None,
                rows: list[SizeCheck]) -> None:
    """One source's table of judged sizes, what it left to the library, and its notes."""
    t = Table(title=f"{c.collective}, {c.np} ranks, {source} "
                    f"({rep.mpi.name} {rep.mpi.version})")
    modes = sorted({m for r in rows for m in r.modes})
    for col in ("size/rank", "lookup", "rule", "default us (95% CI)",
                "rules us (95% CI)", "rules/default (CI)",
                *(f"{m} rules/default" for m in modes), "finds", "pairs", "verdict"):
        t.add_column(col)
    for r in rows:
        if r.verdict == "default":
            continue
        t.add_row(_where(r), "-" if r.what else str(r.lookup_size),
                  "the file" if r.what else r.rule,
                  f"{r.default_median * 1e6:.2f} ({r.default_ci[0] * 1e6:.2f}-"
                  f"{r.default_ci[1] * 1e6:.2f})",
                  f"{r.tuned_median * 1e6:.2f} ({r.tuned_ci[0] * 1e6:.2f}-"
                  f"{r.tuned_ci[1] * 1e6:.2f})",
                  f"{r.ratio:.3f} ({r.ratio_ci[0]:.2f}-{r.ratio_ci[1]:.2f})",
                  *(_mode_cell(r.modes.get(m)) for m in modes),
                  _mde(r.mde), str(r.rounds),
                  (r.verdict.upper() if r.verdict in ("slower", "inconclusive")
                   else r.verdict) + (" (means)" if r.statistic == "mean" else ""))
    if t.row_count:
        out.print(t)
    left = [f"{r.size}{' (edge)' if r.boundary else ''}" for r in rows
            if r.verdict == "default"]
    if left:
        out.print(f"  left to the library's own choice, not tested: "
                  f"{', '.join(left)} B", highlight=False)
    for r in rows:
        if r.note:
            out.print(f"  {_where(r)}: {r.note}", highlight=False)


def _print_design(d: Design, aa: bool) -> None:
    """How the sizes were chosen and judged, with the power of a "same"."""
    out.print(f"sizes: every power of two from 4 B to 1 MiB and, marked (edge), both sides of "
              f"every place where the file's rule changes (unless --sizes); only those where "
              f"the file changes the library's choice are tested (all for a file that may "
              f"change what runs elsewhere too: Intel MPI's spliced table)"
              f"{' (--aa: all)' if aa else ''}. "
              f"rules/default: geometric mean over launch pairs of the ratio of launch medians "
              f"(of launch means where marked (means): one arm stalled more often), "
              f"its interval at the last look. Sequential: {d.first} launch pairs, then "
              f"doubled for undecided sizes, up to {d.max_pairs}; alpha {d.alpha} spent "
              f"over the looks and split over the {d.family} size x mode cells (a size that "
              f"is not slower is called slower with probability <= {d.alpha} in the whole "
              f"run); slower: significant and >= {100 * d.min_gain:.0f}% in any mode; same: "
              f"the interval inside +-{100 * d.threshold:.0f}% in every mode (a size "
              f"{100 * d.threshold:.0f}% slower is called same with probability <= {d.beta});"
              f" not slower: faster or same in some modes and in the others an interval "
              f"below +{100 * d.threshold:.0f}% (the same bound); inconclusive: none of "
              f"these within the budget. finds: the smallest slowdown the "
              f"last look would find with 80% power", highlight=False)

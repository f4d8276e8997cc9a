"""`tune profile` (an application's own collectives, recorded in one run) and `tune app`
(tune what a profile holds)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table
from rich.text import Text

from colltune.apploop.online.request import OnlineRequest
from colltune.backends import registry
from colltune.backends.registry import CHOICES
from colltune.cli.common import (
    CUTOFF_OPTION,
    DB_HELP,
    OBJECTIVE_OPTION,
    TIMING_OPTION,
    WINDOW_OPTION,
    BarReporter,
    _fail,
    app,
    declared,
    err,
    json_to_stdout,
    out,
)
from colltune.errors import ColltuneError
from colltune.options import MeasureSettings, TuneOptions
from colltune.outfile import ensure_writable

if TYPE_CHECKING:  # the command imports it when it runs (the CLI starts lean)
    from colltune.apploop.app.tune_app import AppResult
    from colltune.apploop.online.summary import OnlineResult


@app.command("profile", context_settings={"allow_interspersed_args": False})
def profile_cmd(
    command: list[str] = typer.Argument(..., metavar="-- LAUNCHER ARGS... PROGRAM ARGS...",
                                        help="The application's launch: mpirun/mpiexec/srun "
                                             "... (after --)."),
    output: Path = typer.Option(..., "--output", "-o", help="Profile to write (JSON)."),
    mpi: str | None = typer.Option(None, "--mpi", help="Prefix of the MPI the application "
                                                       "is linked to."),
    backend: str | None = typer.Option(None, "--backend", help="The MPI family (default: "
                                       "the one at --mpi): " + ", ".join(CHOICES[:-1]) + "."),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds before the run is "
                                                                 "abandoned."),
) -> None:
    """Run an application once with colltune's PMPI profiler preloaded, and write what its
    collectives cost: per collective, communicator size and message size, calls and time
    (mean over ranks and slowest rank), and its wall time. Example:
    tune profile -o app.json -- mpirun -np 4 lmp -in in.lj"""
    from colltune.apploop.profiling.profile import run

    try:
        ensure_writable(output, "--output")
        family = registry.resolve(backend, None, mpi)[0]
        prof = run(command, output, family, mpi, timeout)
    except ColltuneError as e:
        _fail(e)
        return
    wall = prof["wall_s"]["mean"]  # type: ignore[index]
    t = Table(title=f"{' '.join(command)[:80]}: {prof['ranks']} ranks, "
                    f"{wall:.3f} s wall (mean over ranks)")
    for col in ("collective", "comm size", "size/rank", "calls/rank", "ranks",
                "time s (mean)", "time s (slowest)", "share of wall"):
        t.add_column(col)
    for row in prof["entries"]:  # type: ignore[attr-defined]
        name = row["collective"] + ("" if row["tuned_by_colltune"] else " (not tuned)")
        name += f" ({row['datatype']})" if row.get("datatype") else ""  # what it summed
        t.add_row(name, str(row["comm_size"]), str(row["size"]), str(row["calls"]),
                  str(row["ranks"]), f"{row['time_s']['mean']:.6f}",
                  f"{row['time_s']['max']:.6f}", f"{100 * row['share']:.2f}%")
    out.print(t)
    coll = prof["collective_s"]["mean"]  # type: ignore[index]
    out.print(f"in blocking collectives: {coll:.4f} s per rank "
              f"({100 * coll / wall if wall else 0:.1f}% of wall)", highlight=False)
    if prof["nonblocking"]:
        out.print("nonblocking collectives (counted, not decided by coll/tuned's rules): "
                  + ", ".join(f"{k} {v}" for k, v in prof["nonblocking"].items()),  # type: ignore[attr-defined]
                  highlight=False)
    from colltune.apploop.profiling.profile import warmups

    for line in warmups(prof):
        err.print(f"warning: {line}", highlight=False, markup=False)
    out.print(f"profile written to {output}", highlight=False)
    if prof.get("spawned_processes"):
        err.print(f"warning: {prof['spawned_processes']} process(es) started with "
                  "MPI_Comm_spawn loaded the profiler; their records are kept apart, not in "
                  "this profile")


@app.command("app")
def app_cmd(
    profile: Path = typer.Argument(..., help="The profile tune profile wrote."),
    out_path: Path | None = typer.Option(None, "--out", "-o", help="Rules file to write "
                                                                   "(merged if it exists)."),
    mpi: str | None = typer.Option(None, "--mpi", help="MPI prefix (default: what the family "
                                                       "finds on PATH, or the wheel; the "
                                                       "profile's prefix is only compared)."),
    backend: str | None = typer.Option(None, "--backend",
                                       help="Default: the profile's MPI family."),
    db: Path | None = typer.Option(None, "--db", help=DB_HELP),
    min_share: float = typer.Option(0.001, "--min-share",
                                    help="Groups under this share of the run's wall time "
                                         "are not measured."),
    strategy: str = declared(TuneOptions, "strategy", help="grid, race, bayes or model."),
    segsizes: str | None = typer.Option(None, "--segsizes", help="Segment sizes: 0,4K."),
    point_time: float = declared(MeasureSettings, "point_time",
                                 help="Seconds per (config, size) for the costliest groups; "
                                      "less for cheaper ones."),
    min_reps: int = declared(MeasureSettings, "min_reps"),
    max_reps: int = declared(MeasureSettings, "max_reps"),
    confirm_rounds: int = declared(TuneOptions, "confirm_rounds", help=None),
    oversubscribe: bool = declared(TuneOptions, "oversubscribe", help=None),
    hostfile: str | None = typer.Option(None, "--hostfile", help="Hostfile of the nodes to "
                                        "measure on (the profile's layout is asked of it)."),
    launcher: str | None = typer.Option(None, "--launcher",
                                        help="mpirun or srun (default: srun inside a Slurm "
                                             "allocation, else mpirun)."),
    nodes: int | None = typer.Option(None, "--nodes", help="Nodes (default: the profile's)."),
    ppn: int | None = typer.Option(None, "--ppn", help="Ranks per node (default: the "
                                                       "profile's)."),
    launcher_args: str = typer.Option("", "--launcher-args",
                                      help="More launcher options, passed as they are."),
    any_layout: bool = typer.Option(
        False, "--any-layout", metavar="",
        help="Tune in this job's layout even where the profile says its calls ran in "
             "another (refused otherwise: the best choice can differ by layout)."),
    layouts: str | None = typer.Option(
        None, "--layouts",
        help="Tune the whole profile in each of these layouts in turn (NODESxPPN of the "
             "profile's ranks, e.g. 2x2,1x4), each group in its consecutive ranks' part of "
             "it, instead of the layout the profile ran in; a format that says the layout "
             "holds them all, other formats get one file each beside --out "
             "(rules.2x2.conf)."),
    arrival: str = typer.Option(
        "auto", "--arrival",
        help="auto: measure a group with the kernel replaying its profiled arrival pattern "
             "where its ranks entered far apart (median spread at least half its call "
             "time); on: every group the profile has arrival data for; off: ranks "
             "entering together; both: every group with arrival data measured both ways, "
             "the file tuned together written beside --out (rules.together.conf), the "
             "table saying where the choices differ."),
    timeout: float = declared(MeasureSettings, "timeout"),
    slurm_script: Path | None = typer.Option(
        None, "--slurm-script", help="Write a Slurm batch script that runs this in an "
                                     "allocation of the profile's layout, instead of now."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the result as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", metavar=""),
    timing: str = TIMING_OPTION,
    window: int = WINDOW_OPTION,
    objective: str = OBJECTIVE_OPTION,
    cutoff: float = CUTOFF_OPTION,
) -> None:
    """Tune what an application's profile holds, costliest first, each group in the layout
    its calls ran in (refused where this job would run another), and say what each entry is
    expected to save in the application's run."""
    args = _AppArgs(**locals())  # the options, converted once (before any other local)
    json_to_stdout(json_out)
    started = time.time()
    try:
        lays = args.checked_layouts()
        template = args.template()
        if slurm_script is not None:
            _app_slurm_script(args, template, slurm_script)
            return
        results = _tune_app(args, template, lays)
    except ColltuneError as e:
        _fail(e)
        return
    _app_outputs(args, results, lays, started)


@dataclass
class _AppArgs:
    """tune app's options as the command took them (its parameters, in order), and what
    they make: the layouts asked, the template every group's tune starts from."""

    profile: Path
    out_path: Path | None
    mpi: str | None
    backend: str | None
    db: Path | None
    min_share: float
    strategy: str
    segsizes: str | None
    point_time: float
    min_reps: int
    max_reps: int
    confirm_rounds: int
    oversubscribe: bool
    hostfile: str | None
    launcher: str | None
    nodes: int | None
    ppn: int | None
    launcher_args: str
    any_layout: bool
    layouts: str | None
    arrival: str
    timeout: float
    slurm_script: Path | None
    json_out: Path | None
    quiet: bool
    timing: str
    window: int
    objective: str
    cutoff: float

    def checked_layouts(self) -> list[tuple[int, int]] | None:
        from colltune.slots import parse_layouts

        lays = parse_layouts(self.layouts) if self.layouts else None
        if lays and (self.nodes or self.ppn or self.any_layout):
            raise ColltuneError("--layouts names each layout's nodes and ranks per node",
                                "leave out --nodes, --ppn and --any-layout")
        return lays

    def template(self) -> TuneOptions:
        """The options every group's tune starts from, the profile read and checked first
        (its prefix is only said, never run)."""
        import shlex

        from colltune.apploop.profiling.profile import load
        from colltune.core.space import parse_size
        from colltune.launchers import Launch
        from colltune.options import MeasureSettings, TuneOptions

        prof = load(self.profile)
        if self.json_out is not None:
            ensure_writable(self.json_out, "--json")
        fam: dict[str, str] = prof["mpi"]  # type: ignore[assignment]
        if self.mpi is None:
            # a profile may come from another user: its prefix is data, never run
            err.print(f"note: {self.profile} was recorded with {fam['name']} "
                      f"{fam['version']} at {fam['prefix']}; tuning what --backend finds on "
                      "PATH (pass --mpi to name the installation)")
        return TuneOptions(
            collectives=[], nps=[], out=self.out_path, mpi=self.mpi,
            backend=self.backend or fam.get("backend", "openmpi"), db=self.db,
            segsizes=[parse_size(s) for s in self.segsizes.split(",")] if self.segsizes
            else None,
            strategy=self.strategy, confirm_rounds=self.confirm_rounds,
            oversubscribe=self.oversubscribe, hostfile=self.hostfile,
            launch=Launch(self.launcher, self.nodes, self.ppn,
                          tuple(shlex.split(self.launcher_args))),
            settings=MeasureSettings(min_reps=self.min_reps, max_reps=self.max_reps,
                                     point_time=self.point_time, timing=self.timing,
                                     window=self.window, objective=self.objective,
                                     cutoff=self.cutoff, timeout=self.timeout))


def _app_slurm_script(args: _AppArgs, template: TuneOptions, path: Path) -> None:
    """--slurm-script: the batch script that runs this tune app in an allocation of the
    profile's layout, instead of now."""
    import sys

    from colltune.apploop.app.groups import script_plan
    from colltune.cli.tuning import _without_option
    from colltune.outfile import write_atomic
    from colltune.outputs.slurm_script import render
    from colltune.tuner.forecast import time_limit

    ensure_writable(path, "--slurm-script")
    sp = script_plan(args.profile, template, args.min_share)
    # tune app finds the layout in the allocation, group by group: not passed
    limit = time_limit(sp.points, sp.point_time, sp.launches, sp.nodes or 1)
    text = render(_without_option(sys.argv[1:], "--slurm-script"), sp.np, sp.nodes,
                  sp.ppn, limit, name="colltune-app", pass_layout=False)
    write_atomic(path, text)
    path.chmod(0o755)
    err.print(f"wrote {path}: submit it with sbatch {path}", highlight=False, markup=False)


def _tune_app(args: _AppArgs, template: TuneOptions, lays: list[tuple[int, int]] | None
              ) -> list[AppResult]:
    from colltune.apploop.app.tune_app import tune_app, tune_app_layouts

    if lays:
        return tune_app_layouts(args.profile, template, lays, args.min_share,
                                BarReporter(args.quiet), args.arrival)
    return [tune_app(args.profile, template, args.min_share, BarReporter(args.quiet),
                     args.any_layout, args.arrival)]


def _app_outputs(args: _AppArgs, results: list[AppResult],
                 lays: list[tuple[int, int]] | None, started: float) -> None:
    """The tables, --json, and what was written (or why not: exit 3 where the MPI failed
    for every group)."""
    import json

    from colltune.apploop.app.tune_app import as_json
    from colltune.outfile import write_atomic

    for res in results:
        _print_app(args.profile, res)
    if args.json_out is not None:
        doc = (as_json(results[0]) if not lays else
               {"layouts": {r.layout: as_json(r) for r in results}})
        write_atomic(args.json_out, json.dumps(doc, indent=1) + "\n")
    groups = [g for r in results for g in r.groups]
    measured = any(g.status == "measured" for g in groups)
    out_path = args.out_path
    if out_path is not None and measured and not args.quiet:
        from colltune.outfile import beside

        named = [out_path, *(beside(out_path, f"{n}x{p}") for n, p in lays or [])]
        for f in (f for f in dict.fromkeys(named) if f.exists()
                  and f.stat().st_mtime >= started):
            err.print(Text(f"wrote {f}"))
    elif out_path is not None and not measured:
        failed = [g for g in groups if g.status.startswith("not run")]
        err.print(f"{out_path} not written: no group of the profile was measured"
                  + (f" ({len(failed)} failed)" if failed else ""))
        if failed:
            raise typer.Exit(3)  # the MPI failed for every group (exit codes: README)


def _print_app(profile: Path, res: AppResult) -> None:
    """tune app's table (what the file runs per entry, and where --arrival both tuned
    otherwise with the ranks entering together) and how each group's ranks entered."""
    from colltune.apploop.app.tune_app import held_in_all
    from colltune.core.account import hours

    lay = f", layout {res.layout}" if res.layout else ""
    t = Table(title=Text(f"{profile}: {res.wall_s:.3f} s per rank (timing {res.timing}, "
                         f"objective {res.objective}{lay})"))
    both = any(r.together is not None for r in res.entries)
    for col in ("collective", "comm size", "layout", "size/rank", "calls/rank", "time s",
                "share", "chosen", *(("entering together",) if both else ()), "verdict",
                "speed-up", "saving s"):
        t.add_column(col)
    where = {(g.collective, g.comm_size): f"{g.layout[0]}x{g.layout[1]}" if g.layout else "-"
             for g in res.groups}
    for r in res.entries:
        differs = r.together is not None and r.together != r.chosen
        t.add_row(Text(r.collective), str(r.comm_size),
                  where.get((r.collective, r.comm_size), "-"), str(r.size), str(r.calls),
                  f"{r.time_s:.6f}", f"{100 * r.share:.2f}%", Text(r.chosen or "-"),
                  *((Text((r.together or "-") + (" (differs)" if differs else "")),)
                    if both else ()),
                  Text(r.verdict), f"{r.speedup:.2f}x", f"{r.saving_s:.6f}")
    out.print(t)
    for g in res.groups:  # how each group's ranks entered, and the replay's accuracy
        if g.status != "measured":
            continue
        line = f"{g.collective} at {g.comm_size} ranks: {g.replay.how}"
        if g.replayed_spread_s:
            got = sum(g.replayed_spread_s) / len(g.replayed_spread_s)
            line += (f"; replayed spread {got * 1e6:.0f} us against "
                     f"{g.replay.profiled_spread_s * 1e6:.0f} us profiled (means)")
        out.print(Text(line))
    saving = sum(r.saving_s for r in res.entries)
    out.print(f"expected saving: {saving:.6f} s per rank of {res.wall_s:.3f} s "
              f"({100 * saving / res.wall_s if res.wall_s else 0:.2f}%); measure it with "
              "tune verify --app", highlight=False)
    for g in res.groups:
        if g.status != "measured":
            out.print(Text(f"{g.collective} at {g.comm_size} ranks: {g.status}"))
    if res.untuned:
        out.print(Text("not tuned by colltune: " + ", ".join(res.untuned)))
    tuned = sum(1 for g in res.groups if g.allocation)
    if tuned:  # what the allocation held for it, as every tune says (core/account.py)
        out.print(f"allocation: {hours(held_in_all(res))} over {tuned} group tune(s)",
                  highlight=False)


@app.command("online", context_settings={"allow_interspersed_args": False})
def online_cmd(
    command: list[str] = typer.Argument(..., metavar="-- LAUNCHER ARGS... PROGRAM ARGS...",
                                        help="The application's launch: mpirun/mpiexec/srun "
                                             "... (after --)."),
    out_path: Path = typer.Option(..., "--out", "-o", help="Rules file to write (merged "
                                                            "into, run after run)."),
    mpi: str | None = typer.Option(None, "--mpi", help="Prefix of the MPI the application "
                                                       "is linked to."),
    backend: str | None = typer.Option(None, "--backend", help="The MPI family (default: "
                                       "the one at --mpi)."),
    db: Path | None = typer.Option(None, "--db", help=DB_HELP),
    share: float = declared(OnlineRequest, "share"),
    min_calls: int = declared(OnlineRequest, "min_calls"),
    samples: int = declared(OnlineRequest, "samples"),
    first: int = declared(OnlineRequest, "first"),
    model: bool = declared(OnlineRequest, "model"),
    timeout: float | None = declared(OnlineRequest, "timeout"),
    summary_json: Path | None = typer.Option(None, "--summary-json",
                                             help="Write the evidence per group as JSON "
                                             "(- for standard output)."),
    evidence: Path | None = declared(OnlineRequest, "evidence"),
    series: str | None = declared(OnlineRequest, "series"),
    pairs: int = declared(OnlineRequest, "pairs"),
) -> None:
    """Tune inside the application's own run: each call group (collective, communicator,
    size) with enough calls tries the family's candidates on a share of its own calls,
    every rank the same configuration for the same call; the times decide the file, with
    tune's statistics, written as the family's rules. Runs of the same command with the
    same --db add up, each taking up where the last left off. Open MPI and MPICH. Example:
    tune online -o rules.conf -- mpirun -np 4 ./app"""
    from colltune.apploop.online.cost import run_pairs
    from colltune.apploop.online.driver import run
    from colltune.apploop.online.summary import write_summary
    from colltune.store import default_db_path

    try:
        ensure_writable(out_path, "--out")
        if summary_json is not None:
            ensure_writable(summary_json, "--summary-json")
        json_to_stdout(summary_json)
        req = OnlineRequest(
            command, out_path, db or default_db_path(), registry.resolve(backend, None, mpi)[0],
            mpi, share=share, min_calls=min_calls, samples=samples, first=first, model=model,
            timeout=timeout, evidence=evidence, series=series, pairs=pairs).checked()
        res = run_pairs(req, BarReporter(quiet=False)) if pairs else \
            run(req, BarReporter(quiet=False))
    except ColltuneError as e:
        _fail(e)
        return
    _print_online(res, command, out_path, min_calls)
    if summary_json is not None:
        write_summary(res, summary_json)


def _print_online(res: OnlineResult, command: list[str], out_path: Path,
                  min_calls: int) -> None:
    """tune online's table: each group's calls, medians and the file's choice; what the
    run cost and what its file saves."""
    if res.stdout:  # the application's own output, as it printed it
        out.print(Text(res.stdout.rstrip("\n")))
    t = Table(title=f"{' '.join(command)[:80]}: {res.wall_s:.2f} s with the online layer")
    for col in ("collective", "comm size", "size/rank", "calls", "explored",
                "median s per configuration", "file"):
        t.add_column(col)
    for g in res.groups:
        medians = ", ".join(f"{g.config(k).key if k else 0}: {sorted(v)[len(v) // 2]:.2e}"
                            for k, v in sorted(g.times.items()))
        chosen = "" if g.decision is None else (
            "library's choice" if g.decision.chosen.algorithm == 0 else
            g.decision.chosen.key)
        t.add_row(g.collective, str(g.comm_size), str(g.size), str(g.calls),
                  "yes" if g.explored else f"no (< {min_calls} calls)" if g.calls < min_calls
                  else "no", Text(medians), chosen)
    out.print(t)
    from colltune.apploop.online import summary as o  # numpy: only when printing

    cost = sum(o.exploration_cost(g) for g in res.groups)
    lo, hi = o.exploration_interval(res.groups)
    save = sum(o.expected_saving(g) for g in res.groups)
    out.print(f"every rank ran the same configuration for the same call; wrote {out_path}\n"
              f"what exploring cost this run of {res.wall_s:.2f} s: the candidates' calls "
              f"{cost * 1e3:.2f} ms by the calls' own medians (95% interval {lo * 1e3:.2f} "
              f"to {hi * 1e3:.2f} ms), the layer's own work (MPI_T, duplicates, reductions, "
              f"checks, files) {res.layer_s * 1e3:.2f} ms on its busiest rank; the file "
              f"saves a run like it {save * 1e3:.2f} ms by the medians (--pairs measures the "
              "cost by the wall time)", highlight=False)
    if res.measured is not None:
        m = res.measured
        iv = m.interval()
        out.print(f"what the layer cost the application, measured: its runs under the layer "
                  f"took {m.ratio():.3f} times its runs without it ("
                  + (f"95% interval {iv[0]:.3f} to {iv[1]:.3f}, " if iv else
                     "one pair: no interval, ")
                  + f"{len(m.online_s)} pair(s) of runs, each default run right before its "
                  "online run)", highlight=False)

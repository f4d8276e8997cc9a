"""`tune verify`: the library's choice against a file, in fresh launches."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from colltune.cli.common import (
    OBJECTIVE_OPTION,
    TIMING_OPTION,
    WINDOW_OPTION,
    _fail,
    app,
    err,
    json_to_stdout,
    out,
)
from colltune.errors import ColltuneError
from colltune.outfile import ensure_writable, write_atomic
from colltune.tuner.run import check_repetitions
from colltune.tuner.space import parse_sizes


@app.command("verify")
def verify_cmd(
    args: list[str] = typer.Argument(..., metavar="FILE | -- LAUNCHER ... PROGRAM ...",
                                     help="Rules file to verify; with --app, the "
                                          "application's launch command (after --)."),
    app_mode: bool = typer.Option(False, "--app", metavar="", help="Run the application itself, "
                                                       "alternately without and with --rules."),
    rules_path: Path | None = typer.Option(None, "--rules", help="With --app: the rules file."),
    pairs: int = typer.Option(5, "--pairs", help="With --app: default/rules run pairs."),
    backend: str | None = typer.Option(None, "--backend", help="With --app: the MPI family "
                                                               "(default: the file's)."),
    app_timeout: float | None = typer.Option(None, "--app-timeout",
                                             help="With --app: seconds per run."),
    np: int = typer.Option(4, "--np", help="Communicator size."),
    collective: list[str] | None = typer.Option(None, "--collective", "-c",
                                                help="Only these (default: all in the file)."),
    mpi: str | None = typer.Option(None, "--mpi", help="MPI installation prefix."),
    sizes: str | None = typer.Option(None, "--sizes", help="Per-rank sizes: 8,1K,1M."),
    rounds: int = typer.Option(6, "--rounds", help="Default/rules launch pairs."),
    point_time: float = typer.Option(0.15, "--point-time", help="Seconds per size and launch."),
    with_: str | None = typer.Option(None, "--with", help="osu: also run OSU benchmarks."),
    osu_dir: Path | None = typer.Option(None, "--osu-dir", help="Where osu_<coll> live."),
    hostfile: str | None = typer.Option(None, "--hostfile"),
    json_out: Path | None = typer.Option(None, "--json", help="Write the results as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", metavar=""),
    timing: str = TIMING_OPTION,
    window: int = WINDOW_OPTION,
    objective: str = OBJECTIVE_OPTION,
) -> None:
    """Default vs the rules file in fresh interleaved launches; exit 1 on any regression or
    if Open MPI does not apply the file. With --app: the application's own runs, default
    and --rules alternating; exit 1 if it is significantly slower with the rules."""
    from colltune.kernel.launch import Repetitions
    from colltune.verify import report_json, verify

    json_to_stdout(json_out)
    if app_mode:
        _verify_app(args, rules_path, pairs, backend, mpi, app_timeout, json_out, quiet)
        return
    if len(args) != 1:
        _fail(ColltuneError(f"tune verify takes one rules file, got {len(args)} arguments",
                            "tune verify FILE --np N, or tune verify --app --rules FILE -- "
                            "mpirun ... ./app"))
        return
    path = Path(args[0])
    try:
        if with_ not in (None, "osu"):
            raise ColltuneError(f"unknown --with {with_}", "use --with osu")
        if point_time <= 0:
            raise ColltuneError("--point-time must be more than 0", "e.g. --point-time 0.15")
        if json_out is not None:
            ensure_writable(json_out, "--json")
        reps = Repetitions(min_reps=15, point_time=point_time, timing=timing, window=window,
                           objective=objective)
        check_repetitions(reps)
        rep = verify(path, np, mpi, collective or None, parse_sizes(sizes) if sizes else None,
                     rounds, reps,
                     with_osu=with_ == "osu", osu_dir=osu_dir, hostfile=hostfile,
                     note=(lambda s: None) if quiet else
                     (lambda s: err.print(s, highlight=False, markup=False)))
    except ColltuneError as e:
        _fail(e)
        return
    for c in rep.checks:
        mark = {"applied": "applied", "default everywhere": "applied (default everywhere)"}
        out.print(f"{c.collective}, {c.np} ranks: {mark.get(c.applied, c.applied.upper())}: "
                  f"{c.applied_detail}", highlight=False)
        for source, rows in (("kernel", c.kernel), ("OSU", c.osu)):
            if not rows:
                continue
            t = Table(title=f"{c.collective}, {c.np} ranks, {source} "
                            f"({rep.mpi.name} {rep.mpi.version})")
            modes = sorted({m for r in rows for m in r.modes})
            for col in ("size/rank", "lookup", "rule", "default us (95% CI)",
                        "rules us (95% CI)", "rules/default",
                        *(f"{m} rules/default" for m in modes), "verdict"):
                t.add_column(col)
            for r in rows:
                t.add_row(f"{r.size}{' (edge)' if r.boundary else ''}", str(r.lookup_size), r.rule,
                          f"{r.default_median * 1e6:.2f} ({r.default_ci[0] * 1e6:.2f}-"
                          f"{r.default_ci[1] * 1e6:.2f})",
                          f"{r.tuned_median * 1e6:.2f} ({r.tuned_ci[0] * 1e6:.2f}-"
                          f"{r.tuned_ci[1] * 1e6:.2f})",
                          f"{r.ratio:.3f}",
                          *(_mode_cell(r.modes.get(m)) for m in modes),
                          r.verdict.upper() if r.verdict == "slower" else r.verdict)
            out.print(t)
            for r in rows:
                if r.note:
                    out.print(f"  {r.size} B: {r.note}", highlight=False)
        sp = f"{c.speedup:.3f}x (kernel)" if c.speedup else ""
        if c.osu_speedup:
            sp += f", {c.osu_speedup:.3f}x (OSU)"
        out.print(f"{c.collective}: geometric-mean speed-up {sp}; "
                  f"{sum(r.verdict == 'faster' for r in c.kernel)} faster, "
                  f"{sum(r.verdict == 'same' for r in c.kernel)} same, "
                  f"{sum(r.verdict == 'slower' for r in c.kernel)} slower", highlight=False)
    out.print("sizes: every power of two from 4 B to 1 MiB and, marked (edge), both sides of "
              "every place where the file's rule changes (unless --sizes); "
              "rules/default: geometric mean over launch pairs of the ratio of launch medians;"
              " faster/slower: paired t-test over launch pairs, Holm-corrected over all sizes "
              "and timing modes (family-wise p < 0.05), and >= 3%; faster only if faster in "
              "every mode, slower if slower in any; either must reproduce in a recheck",
              highlight=False)
    if json_out is not None:
        write_atomic(json_out, report_json(rep))
    if rep.failed:
        bad = [f"{c.collective} {r.size} B{src}" for c in rep.checks
               for src, rows in (("", c.kernel), (" (OSU)", c.osu))
               for r in rows if r.verdict == "slower"]
        bad += [f"{c.collective} not applied" for c in rep.checks if c.applied == "not applied"]
        err.print(f"verify failed: {', '.join(bad)}", highlight=False, markup=False)
        raise typer.Exit(1)


def _mode_cell(m: dict[str, object] | None) -> str:
    return "" if m is None else f"{float(m['ratio']):.3f} {m['verdict']}"  # type: ignore[arg-type]




def _verify_app(cmd: list[str], rules: Path | None, pairs: int, backend: str | None,
                mpi: str | None, timeout: float | None, json_out: Path | None,
                quiet: bool) -> None:
    import json

    from colltune.appverify import as_json, verify_app

    try:
        if rules is None:
            raise ColltuneError("--app needs --rules FILE", "tune verify --app --rules "
                                "rules.conf -- mpirun -np 4 ./app")
        if json_out is not None:
            ensure_writable(json_out, "--json")
        v = verify_app(cmd, rules, pairs, backend, mpi, timeout,
                       note=None if quiet else
                       (lambda s: err.print(s, highlight=False, markup=False)))
    except ColltuneError as e:
        _fail(e)
        return
    t = Table(title=f"{' '.join(cmd)[:80]}: {v.pairs} pairs, without and with {rules}")
    for col in ("measure", "default s (median)", "rules s (median)", "rules/default",
                "p", "verdict"):
        t.add_column(col)
    for m in v.measures.values():
        t.add_row(m.name, f"{sorted(m.default)[len(m.default) // 2]:.4f}",
                  f"{sorted(m.tuned)[len(m.tuned) // 2]:.4f}", f"{m.ratio:.3f}",
                  "-" if m.p_value is None else f"{m.p_value:.3g}",
                  m.verdict.upper() if m.verdict == "slower" else m.verdict)
    out.print(t)
    out.print("wall: the slowest rank from MPI_Init to MPI_Finalize; collectives: the mean "
              "rank's time in blocking collectives; command: the whole launch. rules/default: "
              "geometric mean over pairs; verdict: paired t-test over pairs on the log ratio, "
              "p < 0.05 and at least 3%", highlight=False)
    if json_out is not None:
        write_atomic(json_out, json.dumps(as_json(v), indent=1) + "\n")
    if v.failed:
        err.print("verify failed: the application is significantly slower with the rules "
                  "(wall time)", highlight=False, markup=False)
        raise typer.Exit(1)

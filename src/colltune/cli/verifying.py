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
    out,
)
from colltune.errors import ColltuneError
from colltune.outfile import ensure_writable, write_atomic
from colltune.tuner.run import check_repetitions
from colltune.tuner.space import parse_sizes


@app.command("verify")
def verify_cmd(
    path: Path = typer.Argument(..., help="Rules file to verify."),
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
    quiet: bool = typer.Option(False, "--quiet", "-q"),
    timing: str = TIMING_OPTION,
    window: int = WINDOW_OPTION,
    objective: str = OBJECTIVE_OPTION,
) -> None:
    """Default vs the rules file in fresh interleaved launches; exit 1 on any regression or
    if Open MPI does not apply the file."""
    from colltune.kernel.launch import Repetitions
    from colltune.verify import report_json, verify

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
                t.add_row(str(r.size), str(r.lookup_size), r.rule,
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
    out.print("rules/default: geometric mean over launch pairs of the ratio of launch medians;"
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



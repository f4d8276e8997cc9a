"""`tune compare`: MPI libraries, at their defaults or with colltune's files, side by side
on one objective (a collective in the kernel, or a program), with a verdict per arm."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from colltune import jobdir
from colltune.cli.common import (
    HOSTFILE_OPTION,
    LAUNCHER_ARGS_OPTION,
    LAUNCHER_OPTION,
    NODES_OPTION,
    PPN_OPTION,
    _fail,
    app,
    err,
    json_to_stdout,
    launch_of,
    out,
    write_json,
)
from colltune.errors import ColltuneError
from colltune.outfile import ensure_writable


@app.command("compare", context_settings={"allow_interspersed_args": False})
def compare_cmd(
    program: list[str] = typer.Argument(None, metavar="[-- PROGRAM ARGS...]",
                                        help="A program (no launcher) each library "
                                             "launches: its wall time is the objective."),
    libs: list[str] = typer.Option([], "--lib", help="BACKEND[:PREFIX][=FILE] or PREFIX"
                                                     "[=FILE] (the family installed there), "
                                                     "once per arm; the first is the "
                                                     "baseline. FILE: a tune runtime --out "
                                                     "file or a rules file for that library."),
    np: int = typer.Option(4, "--np", help="Ranks."),
    collective: str | None = typer.Option(None, "--collective",
                                          help="Objective: this collective's time per call "
                                               "in the kernel (instead of -- PROGRAM)."),
    sizes: str = typer.Option("8,1K,64K", "--sizes", help="Sizes of --collective."),
    calls: int = typer.Option(30, "--calls", help="Calls per size, --collective."),
    metric: str | None = typer.Option(None, "--metric",
                                      help="With a program: judge it by what it prints, "
                                           "not its wall time: osu, imb, or a regular "
                                           "expression whose first group is seconds."),
    rounds: int = typer.Option(8, "--rounds", help="Judged rounds (each arm once a round)."),
    json_out: Path | None = typer.Option(None, "--json", help="Write the result as JSON."),
    timeout: float | None = typer.Option(600, "--timeout", help="Seconds per launch."),
    hostfile: str | None = HOSTFILE_OPTION,
    launcher: str | None = LAUNCHER_OPTION,
    nodes: int | None = NODES_OPTION,
    ppn: int | None = PPN_OPTION,
    launcher_args: str = LAUNCHER_ARGS_OPTION,
    quiet: bool = typer.Option(False, "--quiet", "-q", metavar=""),
) -> None:
    """Run several MPI libraries (or one library with and without colltune's files) on the
    same objective in alternating fresh launches, prove each ran on its library with its
    values applied, and judge each against the first. A program runs on every library of
    the ABI it was built for (Open MPI 4.1 and 5.0; MPICH and Intel MPI). Example: tune
    compare --lib openmpi:/usr --lib openmpi:/usr=params.conf --lib mpich --collective
    allreduce"""
    from colltune.apploop.jobwide import compare as cmp
    from colltune.apploop.jobwide.objective import Objective, kernel, printed
    from colltune.apploop.jobwide.objective import program as prog
    from colltune.backends import registry
    from colltune.core.space import parse_sizes

    json_to_stdout(json_out)
    say = (lambda _s: None) if quiet else (lambda s: err.print(s, highlight=False,
                                                               markup=False))
    where = launch_of(launcher, nodes, ppn, launcher_args)
    try:
        if json_out is not None:
            ensure_writable(json_out, "--json")
        if bool(collective) == bool(program):
            raise ColltuneError("give --collective or a program after --, one of them",
                                "tune compare --lib ... --collective bcast, or tune compare "
                                "--lib ... -- ./app ARGS")
        if metric is not None and collective is not None:
            raise ColltuneError("--metric reads what a program prints",
                                "use it with -- PROGRAM, not --collective")
        arms = [cmp.arm(_with_family(s), registry.named) for s in libs]
        with jobdir.temporary(prefix="colltune-compare-") as tmp:
            def objective(a: cmp.Arm) -> Objective:
                if collective is not None:
                    return kernel(a.backend, a.mpi, a.backend.place(np, hostfile, where),
                                  collective, parse_sizes(sizes), calls,
                                  Path(tmp) / str(id(a)))
                obj = prog(a.backend, a.mpi, a.backend.place(np, hostfile, where), program)
                return obj if metric is None else printed(obj, metric)

            for i, a in enumerate(arms):
                (Path(tmp) / str(id(a))).mkdir()
                say(f"arm {i + 1}: {cmp.describe(a)}")
            res = cmp.run(arms, objective, rounds, timeout, note=say)
            what = (f"{collective} per call at {sizes}, {np} ranks" if collective
                    else f"{'the wall time' if metric is None else metric[:40]} of "
                         f"{Path(program[0]).name}, {np} ranks")
    except ColltuneError as e:
        _fail(e)
        return
    _show(res, what)
    write_json(json_out, cmp.as_json(res, what, rounds))


def _show(res: list, what: str) -> None:  # type: ignore[type-arg]
    from rich.text import Text

    from colltune.apploop.jobwide.compare import summary

    t = Table(title=f"tune compare: {what}")
    for col in ("arm", "library (read back)", "median", "vs first", "interval", "verdict",
                "sees"):
        t.add_column(col)
    for v in res:
        med = ", ".join((f"{s:.2f} s" if s >= 1 else f"{s * 1e3:.1f} ms") if c == 0
                        else f"{c} B: {s * 1e6:.3g} us"
                        for c, s in v.median.items())
        first = v.verdict == "baseline"
        # what a user or a library wrote is shown as text, never as markup
        t.add_row(Text(v.arm), Text(v.library), med, f"{v.ratio:.3f}x",
                  "-" if first else f"{v.lo:.3f}-{v.hi:.3f}",
                  v.verdict + (f" ({v.tally()})" if v.tally() else ""),
                  "-" if first else f">= {v.mde:.2f}x")
    out.print(t)
    for v in res:
        for k, seen in v.applied.items():
            out.print(f"read back ({v.arm}): {k}: " + "; ".join(f"{a} -> {b}" for a, b in
                                                                seen.items()),
                      highlight=False, markup=False)
    out.print(summary(res), highlight=False, markup=False)


def _with_family(spec: str) -> str:
    """`PREFIX[=FILE]` (a path) as `FAMILY:PREFIX[=FILE]`, the family installed there."""
    lib, eq, file = spec.partition("=")
    if not lib.startswith(("/", ".", "~")):
        return spec
    from colltune.backends import registry

    return f"{registry.resolve(None, None, lib)[0]}:{lib}{eq}{file}"

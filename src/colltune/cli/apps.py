"""`tune profile`: an application's own collectives, recorded in one run."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from colltune.backends.registry import CHOICES
from colltune.cli.common import _fail, app, out
from colltune.errors import ColltuneError
from colltune.outfile import ensure_writable


@app.command("profile", context_settings={"allow_interspersed_args": False})
def profile_cmd(
    command: list[str] = typer.Argument(..., metavar="-- LAUNCHER ARGS... PROGRAM ARGS...",
                                        help="The application's launch: mpirun/mpiexec/srun "
                                             "... (after --)."),
    output: Path = typer.Option(..., "--output", "-o", help="Profile to write (JSON)."),
    mpi: str | None = typer.Option(None, "--mpi", help="Prefix of the MPI the application "
                                                       "is linked to."),
    backend: str = typer.Option("openmpi", "--backend", help=", ".join(CHOICES[:-1]) + "."),
    timeout: float | None = typer.Option(None, "--timeout", help="Seconds before the run is "
                                                                 "abandoned."),
) -> None:
    """Run an application once with colltune's PMPI profiler preloaded, and write what its
    collectives cost: per collective, communicator size and message size, calls and time
    (mean over ranks and slowest rank), and its wall time. Example:
    tune profile -o app.json -- mpirun -np 4 lmp -in in.lj"""
    from colltune.profile import run

    try:
        ensure_writable(output, "--output")
        prof = run(command, output, backend, mpi, timeout)
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
    out.print(f"profile written to {output}", highlight=False)

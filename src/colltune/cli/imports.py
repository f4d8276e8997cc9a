"""`tune import-osu` and `tune import-imb`: another benchmark's runs, stored and decided as
if measured here."""

from __future__ import annotations

from pathlib import Path

import typer

from colltune.cli.common import DB_HELP, _fail, app, err, json_to_stdout
from colltune.cli.tuning import _print_result
from colltune.errors import ColltuneError


def _import(kind: str, paths: list[Path], np: int, algorithm: int | None, backend: str,
            mpi: str | None, db: Path | None, out_path: Path | None,
            summary_json: Path | None, rules_version: int | None, quiet: bool,
            host: str | None) -> None:
    from colltune.osu.importing import import_runs

    quiet = json_to_stdout(summary_json) or quiet
    try:
        if rules_version not in (None, 1, 2):
            raise ColltuneError(f"unknown --rules-version {rules_version}", "use 1 or 2")
        if kind == "imb":
            from colltune.osu.imb_import import imb_runs
            runs = imb_runs(paths, np, algorithm)
        else:
            from colltune.osu.osu_import import osu_runs
            runs = osu_runs(paths, algorithm)
        res = import_runs(runs, np, kind, backend, mpi, db, out_path, summary_json,
                          rules_version, host=host,
                          note=(lambda s: None) if quiet else
                          (lambda s: err.print(s, highlight=False, markup=False)))
    except ColltuneError as e:
        _fail(e)
        return
    _print_result(res, quiet)
    if out_path and not quiet:
        err.print(f"wrote {out_path}", highlight=False, markup=False)


# the options both imports take (typer options are values: one definition, two commands)
ALG = typer.Option(None, "--algorithm", "-a", help="Algorithm of every file (default: from "
                   "each file name: alg<N> or 'default').")
MPI = typer.Option(None, "--mpi", help="The MPI installation the runs used.")
DB = typer.Option(None, "--db", help=DB_HELP)
OUT = typer.Option(None, "--out", "-o", help="File to write (the family's rules or tuning "
                   "file).")
SUMMARY = typer.Option(None, "--summary-json")
RULES_VERSION = typer.Option(None, "--rules-version")
QUIET = typer.Option(False, "--quiet", "-q", metavar="")
HOST = typer.Option(None, "--host", help="The machine the runs were made on (default: this "
                    "one).")
FAMILY = "The MPI family the runs used."


@app.command("import-osu")
def import_osu_cmd(
    paths: list[Path] = typer.Argument(..., help="OSU output files, one run per file."),
    np: int = typer.Option(..., "--np", help="Ranks the OSU runs used."),
    algorithm: int | None = ALG,
    backend: str = typer.Option("openmpi", "--backend", help=FAMILY),
    mpi: str | None = MPI, db: Path | None = DB, out_path: Path | None = OUT,
    summary_json: Path | None = SUMMARY, rules_version: int | None = RULES_VERSION,
    quiet: bool = QUIET, host: str | None = HOST,
) -> None:
    """Store OSU results, decide per size and write the family's file, as if measured
    here."""
    _import("osu", paths, np, algorithm, backend, mpi, db, out_path, summary_json,
            rules_version, quiet, host)


@app.command("import-imb")
def import_imb_cmd(
    paths: list[Path] = typer.Argument(..., help="IMB-MPI1 output files, one run per file."),
    np: int = typer.Option(..., "--np", help="The process count whose tables are read."),
    algorithm: int | None = ALG,
    backend: str = typer.Option("impi", "--backend", help=FAMILY),
    mpi: str | None = MPI, db: Path | None = DB, out_path: Path | None = OUT,
    summary_json: Path | None = SUMMARY, rules_version: int | None = RULES_VERSION,
    quiet: bool = QUIET, host: str | None = HOST,
) -> None:
    """Store IMB-MPI1 results (t_avg per size), decide per size and write the family's
    file, as if measured here."""
    _import("imb", paths, np, algorithm, backend, mpi, db, out_path, summary_json,
            rules_version, quiet, host)

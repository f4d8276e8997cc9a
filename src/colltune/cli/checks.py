"""`tune check` and `tune explain`: a file read by the family that claims it, as its
library reads it."""

from __future__ import annotations

from pathlib import Path

import typer

from colltune.backends import registry
from colltune.cli.common import (
    JSON_OPTION,
    _fail,
    app,
    err,
    json_to_stdout,
    out,
    write_json,
)
from colltune.collectives import get_collective
from colltune.core.space import parse_size
from colltune.errors import ColltuneError, FormatError
from colltune.rules import ompi_classic as rules


@app.command("check")
def check_cmd(
    path: Path = typer.Argument(..., help="Rules file or MVAPICH2 profile to validate."),
    ompi_version: str | None = typer.Option(None, "--ompi-version",
                                               help="Validate for this Open MPI version."),
    mpi: str | None = typer.Option(None, "--mpi", help="Validate against this installation."),
    json_out: Path | None = JSON_OPTION,
) -> None:
    """Validate a rules file or profile the way the library reads it; report what it would
    drop or crash on."""
    json_to_stdout(json_out)
    backend = registry.for_file(path)  # Open MPI's reader unless another family claims it
    try:
        checked = backend.with_files().check(path, mpi, ompi_version)
    except FormatError as e:
        err.print(f"error: {e}", highlight=False, markup=False)
        err.print("  what to do: fix that line; the library would ignore the whole file or "
                  "fail at start-up", highlight=False, markup=False)
        write_json(json_out, {"file": str(path), "valid": False, "error": str(e),
                              "line": e.line, "reason": e.reason})
        raise typer.Exit(1) from None
    except ColltuneError as e:
        _fail(e)
        return
    out.print(f"{path}: OK ({checked.what})", highlight=False, markup=False)
    for w in checked.warnings:
        err.print(f"warning: {path}: {w}", highlight=False, markup=False)
    write_json(json_out, {"file": str(path), "valid": True, **checked.doc,
                          "warnings": checked.warnings})


@app.command("explain")
def explain_cmd(
    path: Path = typer.Argument(..., help="Rules file, tuning file or profile."),
    collective: str = typer.Option(..., "--collective", "-c"),
    np: int = typer.Option(..., "--np"),
    size: str = typer.Option(..., "--size", help="Message size in bytes as the file's rules "
                                                 "compare it (4K ok)."),
    mpi: str | None = typer.Option(None, "--mpi", help="The installation that reads the "
                                                       "file (families read with it)."),
    json_out: Path | None = JSON_OPTION,
) -> None:
    """Say which rule the library applies to a call."""
    json_to_stdout(json_out)
    backend = registry.for_file(path)  # the family that claims the file
    try:
        if not 1 <= np <= rules.INT_MAX:
            raise ColltuneError(f"--np {np}: a communicator has 1 to {rules.INT_MAX} ranks",
                                "pass the communicator size of the call, e.g. --np 16")
        coll = get_collective(collective)
        nbytes = parse_size(size)
        got = backend.with_files().explain(path, coll, np, nbytes)
        if got is None:  # read as tune verify reads it, the library naming the algorithm
            t = backend.with_files().verify_target(path, np, mpi, None)
            cfg = t.rule_at(coll, np, nbytes) if coll.name in t.collectives else None
            label = cfg.label(t.catalog, coll.name) if cfg else ""
            got = ((f"{path} has no rule for {coll.name} at {np} ranks: {t.mpi.name} makes "
                    "its own choice", {"rule": None}) if cfg is None else
                   (f"{coll.name}, {np} ranks, {nbytes} B: {label}",
                    {"rule": {"key": cfg.key, "algorithm": cfg.algorithm, "label": label}}))
    except FormatError as e:
        err.print(f"error: {e}", highlight=False, markup=False)
        err.print(f"  what to do: run 'tune check {path}' and fix that line; the library "
                  "would ignore the whole file", highlight=False, markup=False)
        raise typer.Exit(1) from None
    except ColltuneError as e:
        _fail(e)
        return
    text, doc = got
    out.print(text, highlight=False, markup=False)
    write_json(json_out, {"file": str(path), "collective": coll.name, "np": np,
                          "size": nbytes, **doc})

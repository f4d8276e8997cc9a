"""`tune check` (a file, read by the family that claims it) and `tune explain` (what Open
MPI makes of a rules file)."""

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
        checked = backend.check(path, mpi, ompi_version)
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
    path: Path = typer.Argument(..., help="Rules file."),
    collective: str = typer.Option(..., "--collective", "-c"),
    np: int = typer.Option(..., "--np"),
    size: str = typer.Option(..., "--size", help="Size Open MPI compares, in bytes (4K ok)."),
    json_out: Path | None = JSON_OPTION,
) -> None:
    """Say which rule Open MPI applies to a call."""
    json_to_stdout(json_out)
    try:
        if not 1 <= np <= rules.INT_MAX:
            raise ColltuneError(f"--np {np}: a communicator has 1 to {rules.INT_MAX} ranks",
                                "pass the communicator size of the call, e.g. --np 16")
        coll = get_collective(collective)
        nbytes = parse_size(size)
        rf = rules.read(path)
    except rules.RulesError as e:
        err.print(f"error: {e}", highlight=False, markup=False)
        err.print(f"  what to do: run 'tune check {path}' and fix that line; Open MPI would "
                  "ignore the whole file", highlight=False, markup=False)
        raise typer.Exit(1) from None
    except ColltuneError as e:
        _fail(e)
        return
    hit = rules.lookup(rf, coll.ompi_id, np, nbytes)
    call = {"file": str(path), "collective": coll.name, "np": np, "size": nbytes}
    if hit is None:
        out.print(f"{path} has no rules for {coll.name}: Open MPI uses its fixed decision")
        write_json(json_out, {**call, "rule": None})
        return
    sec, r = hit
    write_json(json_out, {**call, "rule": {
        "line": r.line, "comm_size_section": sec.comsize, "msgsize": r.msgsize,
        "algorithm": r.alg, "faninout": r.faninout, "segsize": r.segsize,
        "max_requests": r.maxreq}})
    what = "Open MPI's fixed decision" if r.alg == 0 else f"algorithm {r.alg}"
    out.print(f"{coll.name}, {np} ranks, {nbytes} B: line {r.line}: comm-size section "
              f"{sec.comsize}, rule from {r.msgsize} B -> {what}, fan in/out {r.faninout}, "
              f"segment size {r.segsize}" + (f", max requests {r.maxreq}" if r.maxreq else ""),
              highlight=False)



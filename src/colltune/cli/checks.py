"""`tune check` and `tune explain`: what Open MPI makes of a rules file."""

from __future__ import annotations

import re
from pathlib import Path

import typer

from colltune.backends.openmpi import find_openmpi, read_catalog, supports_rules_v2
from colltune.backends.tuned_rules import valid_algorithms
from colltune.cli.common import (
    JSON_OPTION,
    _fail,
    app,
    err,
    json_to_stdout,
    out,
    write_json,
)
from colltune.collectives import COLLECTIVE_BY_ID, get_collective
from colltune.errors import ColltuneError, FormatError
from colltune.rules import mvapich2
from colltune.rules import ompi_classic as rules
from colltune.tuner.space import parse_size


def get_collective_name(cid: int) -> str:
    return COLLECTIVE_BY_ID[cid].name if cid in COLLECTIVE_BY_ID else str(cid)


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
    try:
        if mvapich2.looks_like_profile(path):
            prof = mvapich2.read(path)
            n = sum(1 for v in prof.settings if v in mvapich2.TUNING_VARS)
            out.print(f"{path}: OK (MVAPICH2 profile, {len(prof.settings)} variable(s), "
                      f"{n} tuning table(s))", highlight=False)
            write_json(json_out, {"file": str(path), "valid": True, "format": "mvapich2",
                                  "variables": dict(prof.settings), "warnings": []})
            return
        valid = None
        allow_v2: bool | None = None
        if ompi_version:
            allow_v2 = supports_rules_v2(tuple(int(x) for x in re.findall(r"\d+",
                                                                          ompi_version)[:3]))
        elif mpi:
            inst = find_openmpi(mpi)
            allow_v2 = supports_rules_v2(inst.version_tuple)
            valid = valid_algorithms(read_catalog(inst))
        rf = rules.read(path, valid_algs=valid, allow_v2=allow_v2)
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
    n = sum(len(s.rules) for secs in rf.collectives.values() for s in secs)
    out.print(f"{path}: OK ({'rule-file-version-2' if rf.version == 2 else 'classic'} format, "
              f"{len(rf.collectives)} collective(s), {n} rule(s))", highlight=False)
    warnings = rules.coverage_warnings(rf)
    for w in warnings:  # Open MPI reads the file: warnings, not errors
        err.print(f"warning: {path}: {w}", highlight=False, markup=False)
    write_json(json_out, {
        "file": str(path), "valid": True,
        "format": "rule-file-version-2" if rf.version == 2 else "classic",
        "collectives": {get_collective_name(cid): [
            {"comm_size": sec.comsize,
             "rules": [{"msgsize": r.msgsize, "algorithm": r.alg, "faninout": r.faninout,
                        "segsize": r.segsize, "max_requests": r.maxreq} for r in sec.rules]}
            for sec in secs] for cid, secs in rf.collectives.items()},
        "warnings": warnings})


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



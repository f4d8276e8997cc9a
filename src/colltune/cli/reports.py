"""`tune report`, `tune show` and `tune export`: what the store decided, and installing files."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from colltune.backends import registry
from colltune.cli.common import (
    DB_HELP,
    JSON_OPTION,
    _fail,
    _ints,
    _print_warnings,
    app,
    err,
    json_to_stdout,
    out,
    write_json,
)
from colltune.collectives import get_collective
from colltune.core.space import parse_size
from colltune.errors import ColltuneError
from colltune.sinks import one_line


def _selection(collective: list[str] | None, np: str | None) -> tuple[list[str] | None,
                                                                     list[int] | None]:
    colls = [get_collective(c).name for c in collective] if collective else None
    return colls, (_ints(np, "--np") if np else None)


@app.command("report")
def report_cmd(
    out_dir: Path = typer.Option(..., "--out", "-o", help="Directory for the report."),
    db: Path | None = typer.Option(None, "--db", help=DB_HELP),
    collective: list[str] | None = typer.Option(None, "--collective", "-c"),
    np: str | None = typer.Option(None, "--np", help="Only these communicator sizes."),
    rules_file: list[Path] | None = typer.Option(None, "--rules",
                                                 help="Rules file(s) to show verbatim."),
    profile: list[Path] | None = typer.Option(None, "--profile",
                                              help="Application profile(s) (tune profile)."),
    app_verify: list[Path] | None = typer.Option(
        None, "--app-verify", help="tune verify --app --json result(s), one per --profile, "
                                   "in the same order: the application's before/after."),
    max_plots: int = typer.Option(12, "--max-plots", help="Contexts plotted (the first; "
                                  "every context gets its table and CSV rows)."),
) -> None:
    """HTML page with plots (PNG, SVG) and CSV exports of everything in the store, and of
    applications' profiles and their runs without and with the rules."""
    from colltune.reporting.report import load, write_report
    from colltune.store import Store, default_db_path

    try:
        colls, nps = _selection(collective, np)
        profiles, verifies = list(profile or []), list(app_verify or [])
        if len(verifies) > len(profiles):
            raise ColltuneError("more --app-verify than --profile files",
                                "give each verify result after its --profile")
        apps = [(p, verifies[i] if i < len(verifies) else None)
                for i, p in enumerate(profiles)]
        try:
            entries = load(db or default_db_path(), colls, nps)
            store = Store(db or default_db_path(), readonly=True)
            try:
                fits = store.models()
            finally:
                store.close()
        except ColltuneError:
            if not apps or db is not None:
                raise
            entries, fits = [], []  # a report of profiles alone
        if max_plots < 0:
            raise ColltuneError("--max-plots must be 0 or more", "e.g. --max-plots 12")
        page = write_report(entries, out_dir, rules_file, fits, apps, max_plots)
        if len(entries) > max_plots:
            err.print(f"note: plotted the first {max_plots} of {len(entries)} contexts "
                      "(--max-plots); every context's table and CSV rows are there",
                      highlight=False, markup=False)
    except ColltuneError as e:
        _fail(e)
        return
    out.print(f"wrote {page}", highlight=False)


@app.command("show")
def show_cmd(
    db: Path | None = typer.Option(None, "--db", help=DB_HELP),
    collective: list[str] | None = typer.Option(None, "--collective", "-c"),
    np: str | None = typer.Option(None, "--np", help="Only these communicator sizes."),
    json_out: Path | None = JSON_OPTION,
) -> None:
    """The decisions the store supports, as terminal tables."""
    from colltune.reporting.report import load
    from colltune.store import default_db_path

    json_to_stdout(json_out)
    try:
        colls, nps = _selection(collective, np)
        entries = load(db or default_db_path(), colls, nps)
    except ColltuneError as e:
        _fail(e)
        return
    for en in entries:
        # the store may be another user's: none of its text may break a line
        t = Table(title=one_line(f"{en.title} on {en.ctx.host}, {en.first} .. {en.last}"))
        for col in ("size/rank", "lookup", "default us", "best", "best us", "speed-up",
                    "chosen", "verdict"):
            t.add_column(col)
        for d in en.decisions:
            t.add_row(*map(one_line, (
                      str(d.size) if d.size >= 0 else "all", str(d.lookup_size),
                      f"{d.default_median * 1e6:.2f}" if d.default_median else "-",
                      d.best.label(en.catalog, en.ctx.collective) if d.best else "-",
                      f"{d.best_median * 1e6:.2f}" if d.best_median else "-",
                      f"{d.default_median / d.best_median:.2f}x"
                      if d.default_median and d.best_median else "-",
                      d.chosen.label(en.catalog, en.ctx.collective),
                      d.verdict + ("!" if d.warning else ""))))
        out.print(t)
        _print_warnings(en.decisions)
    held = _print_allocations(db or default_db_path())
    write_json(json_out, {"allocations": held, "contexts": [
        {"mpi": {"name": en.ctx.mpi_name, "version": en.ctx.mpi_version,
                 "prefix": en.ctx.mpi_path, "key": en.ctx.mpi_key},
         "host": en.ctx.host, "np": en.ctx.np, "ppn": en.ctx.ppn, "nodes": en.ctx.nodes,
         "collective": en.ctx.collective, "measured": [en.first, en.last],
         "decisions": [d.as_json(en.catalog, en.ctx.collective) for d in en.decisions]}
        for en in entries]})


def _print_allocations(db: Path) -> list[dict[str, object]]:
    """What each tune in the store held of its allocation (core/account.py), as a table;
    returned for --json."""
    from colltune.core.account import hours
    from colltune.store import Store

    store = Store(db, readonly=True)  # showing writes nothing
    try:
        held = store.allocations()
    finally:
        store.close()
    if not held:
        return held
    t = Table(title="What each tune held of its allocation")
    for col in ("when", "host", "collectives", "np", "nodes", "held", "launches", "start-up",
                "largest sizes", "counted from"):
        t.add_column(col)
    for a in held:
        total = float(str(a["node_seconds"])) or 1.0
        t.add_row(*map(one_line, (
            str(a["created"]), str(a["host"]), str(a["collectives"]), str(a["nps"]),
            str(a["nodes"]), hours(float(str(a["node_seconds"]))), str(a["launches"]),
            f"{100 * float(str(a['startup'])) / total:.0f}%",
            f"{100 * float(str(a['largest_sizes'])) / total:.0f}%",
            "simulated" if a["simulated"] else "wall time")))
    out.print(t)
    return held


@app.command("export")
def export_cmd(
    source: Path = typer.Option(..., "--from", help="What to install: "
                                + registry.outputs_help() + ", or a measurement store "
                                "(.sqlite)."),
    site: Path | None = typer.Option(None, "--site", help="Directory for the site profile."),
    user: bool = typer.Option(False, "--user", metavar="", help="Into your home (~/.openmpi, "
                                                    "~/.mvapich2.conf, ~/.config/colltune "
                                                    "for MPICH) instead."),
    force: bool = typer.Option(False, "--force", metavar="", help="Replace files that exist."),
    as_format: str | None = typer.Option(
        None, "--as", help="mvapich3: carry an MVAPICH2 profile over to MVAPICH 3's MVP_ "
                           "variables (one algorithm each)."),
    for_size: str | None = typer.Option(
        None, "--for-size", help="With --as mvapich3: the message size whose algorithm a "
                                 "size-dependent MVAPICH2 table keeps."),
    module_prereq: str | None = typer.Option(
        None, "--module-prereq", help="The site's MPI module the modules need loaded "
                                      "first, e.g. openmpi/5.0."),
    mpi: str | None = typer.Option(None, "--mpi", help="The installation the files are for: "
                                                       "a file it would ignore (a version-2 "
                                                       "header on Open MPI 4.1, an algorithm "
                                                       "it lacks) is refused."),
    layouts: str | None = typer.Option(
        None, "--layouts", help="NODESxPPN,...: install the file tune --layouts wrote for "
                                "each layout beside --from (rules.2x2.conf), and modules that "
                                "set the job's layout's when loaded in a job (COLLTUNE_LAYOUT, "
                                "else Slurm's)."),
) -> None:
    """Write what an administrator installs once (or a user in their home): the tuning
    file, the MPI's own parameter file pointing at it, and environment modules (Tcl, Lua)."""
    from colltune.outputs.export import ExportOptions, export
    from colltune.slots import parse_layouts

    try:
        written = export(source, site, ExportOptions(
            user, force, None, as_format, parse_size(for_size) if for_size else None,
            module_prereq, mpi, tuple(f"{n}x{p}" for n, p in parse_layouts(layouts))
            if layouts else ()))
    except ColltuneError as e:
        _fail(e)
        return
    for p in written:
        out.print(f"wrote {p.path}  ({p.what})", highlight=False, markup=False)
        for w in p.warnings:
            err.print(f"warning: {w}", highlight=False, markup=False)
    if site is not None:
        out.print("every file is readable by every user (0644) and every directory made for "
                  "them searchable (0755): the jobs of every user read them; the paths inside "
                  "are absolute, so install them where they were written", highlight=False,
                  markup=False)



"""What every `tune` command shares: the typer app, the consoles, errors, progress."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Any

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from colltune import __version__
from colltune.backends.common.tools import KEEP_ENV
from colltune.core.records import Decision
from colltune.errors import ColltuneError, shown
from colltune.launchers import Launch
from colltune.options import MeasureSettings
from colltune.outfile import is_stdout
from colltune.sinks import SafeConsole
from colltune.tuner.measure import Reporter

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="Measure MPI collective algorithms and write rules the library obeys.")
# names and paths from stores and profiles are shown as text, never as markup or escapes
err = SafeConsole(stderr=True, soft_wrap=True)  # one error, one line: greppable
# tables stay readable in logs and CI output, where there is no terminal to size them
out = SafeConsole(soft_wrap=True, width=None if sys.stdout.isatty() else 150)


def _which_mpi(prefix: str) -> str:
    """The installation at `prefix`, as every command without --backend chooses it."""
    from colltune.backends.registry import found_at, resolve

    name, note = resolve(None, None, prefix)
    mpi = next(m for n, m in found_at(prefix)[0] if n == name)
    return f"--mpi {prefix}: {mpi.describe()} (--backend {name})" + (
        f"\n{note}" if note else "")


@app.callback(invoke_without_command=True)
def _root(ctx: typer.Context,
          version: bool = typer.Option(False, "--version", metavar="",
                                       help="Print colltune's version (with --mpi: the MPI "
                                            "it would tune there)."),
          mpi: str | None = typer.Option(None, "--mpi", help="With --version: an MPI "
                                                             "installation prefix."),
          keep_env: bool = typer.Option(
              False, "--keep-env", metavar="", help="Run an MPI's tools and jobs although "
              "LD_LIBRARY_PATH or LD_PRELOAD offers them another MPI's library (refused "
              "otherwise; each launch still proves which library its ranks loaded). "
              "Anywhere on the line.")
          ) -> None:
    """Measure MPI collective algorithms and write rules the library obeys."""
    if keep_env:  # main() takes it from anywhere on the line; the variable reaches jobs
        os.environ[KEEP_ENV] = "1"
    if version:
        out.print(f"colltune {__version__}", highlight=False)
        if mpi is not None:
            try:
                out.print(_which_mpi(mpi), highlight=False)
            except ColltuneError as e:
                _fail(e)
        raise typer.Exit()
    if mpi is not None:
        _fail(ColltuneError("--mpi before the command is only for --version",
                            "put --mpi after the command: tune reduce --mpi PREFIX ..."))
    if ctx.invoked_subcommand is None:
        out.print(ctx.get_help())
        raise typer.Exit()


class BarReporter(Reporter):
    def __init__(self, quiet: bool) -> None:
        self.quiet = quiet
        self.progress: Progress | None = None
        self.task: TaskID | None = None

    def begin(self, total: int, what: str) -> None:
        if self.quiet:
            return
        self.progress = Progress(TextColumn("[bold]{task.fields[what]}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(),
                                 TextColumn("{task.description}"), console=err, transient=False)
        self.progress.start()
        self.task = self.progress.add_task("", total=total, what=what)

    def advance(self, desc: str) -> None:
        if self.progress is not None and self.task is not None:
            self.progress.update(self.task, advance=1, description=desc[:60])

    def note(self, text: str) -> None:
        if not self.quiet or text.startswith("warning"):
            err.print(text, highlight=False, markup=False)

    def end(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


DB_HELP = ("SQLite measurement store (default: $XDG_DATA_HOME/colltune/colltune.db, else "
           "~/.local/share/colltune/colltune.db). Not on NFS or Lustre for tuners running "
           "at once: SQLite's locks are not reliable there.")

# one option name for machine-readable output on every command that prints a table
JSON_OPTION = typer.Option(None, "--json", help="Also write what is shown as JSON (- for "
                                                "standard output).")


def declared(cls: type, name: str, **more: Any) -> Any:
    """The typer option of a request field declared with core/setting.setting: its flags,
    default and help from the one declaration (`more`: typer's own, e.g. a metavar, or a
    command's own help where its option means more than the field)."""
    from colltune.core.setting import declared as field_of

    default, d = field_of(cls, name)
    if isinstance(default, bool) and not any("/" in f for f in d.flags):
        more.setdefault("metavar", "")  # a one-way switch takes no value: none shown
    return typer.Option(default, *d.flags, **{"help": d.help, **more})


def write_json(path: Path | None, doc: object) -> None:
    """`doc` as JSON at `path` (`-`: standard output); nothing without a path."""
    import json

    from colltune.outfile import write_atomic

    if path is not None:
        write_atomic(path, json.dumps(doc, indent=1, default=str) + "\n")


def json_to_stdout(*paths: Path | None) -> bool:
    """When a JSON output is `-` (standard output), the tables go to standard error, so
    standard output holds the JSON alone."""
    if any(is_stdout(p) for p in paths):
        out.file = sys.stderr
        return True
    return False


def _fail(e: ColltuneError) -> None:
    # a message may quote a file another user wrote: one line, and not all of a 300 KB token
    err.print(f"error: {shown(e.message, 600)}", highlight=False, markup=False)
    if e.hint:
        err.print(f"  what to do: {shown(e.hint, 600)}", highlight=False, markup=False)
    raise typer.Exit(e.exit_code)


def _ints(text: str, what: str) -> list[int]:
    try:
        vals = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ColltuneError(f"cannot read {what} '{text}'",
                            f"give whole numbers separated by commas, e.g. {what} 2,4") from None
    if not vals:
        raise ColltuneError(f"no value given for {what}", f"e.g. {what} 4")
    return vals




# where a command's jobs run, the same words as tune's (docs/cluster.md)
HOSTFILE_OPTION = typer.Option(None, "--hostfile", help="Hosts to run on (mpirun's hostfile).")
LAUNCHER_OPTION = typer.Option(None, "--launcher", help="mpirun or srun (default: srun inside "
                               "a Slurm allocation, else the family's own).")
NODES_OPTION = typer.Option(None, "--nodes", help="Nodes to spread ranks over.")
PPN_OPTION = typer.Option(None, "--ppn", help="Ranks per node.")
LAUNCHER_ARGS_OPTION = typer.Option("", "--launcher-args",
                                    help="More launcher options, passed as they are.")


def launch_of(launcher: str | None, nodes: int | None, ppn: int | None,
              launcher_args: str) -> Launch:
    """What the user asked of the launcher, from the options above."""
    return Launch(launcher, nodes, ppn, tuple(shlex.split(launcher_args)))


# the options every measuring command shares, declared on MeasureSettings (options.py)
TIMING_OPTION = declared(MeasureSettings, "timing")
WINDOW_OPTION = declared(MeasureSettings, "window")
CUTOFF_OPTION = declared(MeasureSettings, "cutoff")
OBJECTIVE_OPTION = declared(MeasureSettings, "objective")
DATATYPE_OPTION = declared(MeasureSettings, "datatype")
PARAM_OPTION = typer.Option(
    [], "--param", metavar="NAME=VALUES",
    help="Values of an algorithm parameter to measure, by the name the installation's "
         "catalog declares (an unknown name lists them), e.g. --param radix=0,2,4 (0: the "
         "library's own value); repeat for more.")


def _print_warnings(ds: list[Decision]) -> None:
    for d in ds:
        if d.warning:
            out.print(f"! {d.size if d.size >= 0 else 'all'} B: {d.warning}", highlight=False,
                      markup=False)

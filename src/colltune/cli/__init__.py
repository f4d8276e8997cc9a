"""The `tune` command: a thin typer layer over colltune's Python API, one module per
command group."""

from __future__ import annotations

import copy
import importlib
import os
import signal
import sys

import typer
from typer.main import get_command_name

from colltune.backends.common.tools import KEEP_ENV
from colltune.cli.common import app, err

# importing a command module registers its commands, in the order `tune --help` lists them
for _group in ("tuning", "imports", "checks", "verifying", "reports", "models", "apps",
               "runtime", "compare"):
    importlib.import_module(f"colltune.cli.{_group}")

__all__ = ["app", "main"]


def _for(argv: list[str]) -> typer.Typer:
    """The app with only the command `argv` names: typer builds the parser of every command
    it holds at each start (about 50 ms for all of tune's), and one is used. Anything else
    (no command, a root option first, a group, a name that is not a command) gets the
    whole app, so help, suggestions and errors are the same."""
    named = [c for c in app.registered_commands if argv and argv[0] == (
        c.name or get_command_name(c.callback.__name__ if c.callback else ""))]
    if len(named) != 1:
        return app
    lean = copy.copy(app)
    lean.registered_commands, lean.registered_groups = named, []
    return lean


class Terminated(BaseException):
    """SIGTERM (Slurm at a job's time limit, scancel, kill): raised where the tuner is, so
    its launches are killed and their files removed on the way out, as for Ctrl-C. Not a
    KeyboardInterrupt: click would print "Aborted!" and exit 1."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def _keep_env(argv: list[str]) -> list[str]:
    """argv without --keep-env, which may stand anywhere before a `--` (a root option that
    users write after the command, as they do --mpi): set for this process and its jobs."""
    end = argv.index("--") if "--" in argv else len(argv)
    if "--keep-env" not in argv[:end]:
        return argv
    os.environ[KEEP_ENV] = "1"
    return [a for a in argv[:end] if a != "--keep-env"] + argv[end:]


def main() -> None:
    signal.signal(signal.SIGTERM, _terminate)
    sys.argv[1:] = _keep_env(sys.argv[1:])
    try:
        _for(sys.argv[1:])()
    except KeyboardInterrupt:
        err.print("interrupted: finished measurements are in the store; rerun to resume")
        sys.exit(130)
    except Terminated:
        err.print("terminated: finished measurements are in the store; rerun to resume")
        sys.exit(128 + signal.SIGTERM)

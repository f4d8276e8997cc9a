"""The `tune` command: a thin typer layer over colltune's Python API, one module per
command group."""

from __future__ import annotations

import importlib
import sys

from colltune.cli.common import app, err

# importing a command module registers its commands, in the order `tune --help` lists them
for _group in ("tuning", "imports", "checks", "verifying", "reports", "models", "apps",
               "runtime", "compare"):
    importlib.import_module(f"colltune.cli.{_group}")

__all__ = ["app", "main"]


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err.print("interrupted: finished measurements are in the store; rerun to resume")
        sys.exit(130)

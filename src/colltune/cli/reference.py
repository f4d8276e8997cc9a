"""docs/cli.md: every command's `--help` as the CLI prints it, generated so that it cannot
drift (`python -m colltune.cli.reference > docs/cli.md`; a test compares the two)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer.main
import typer.rich_utils
from typer.testing import CliRunner

WIDTH = 100  # the page's width, whatever the terminal that generates it

HEAD = """# Command reference

Every command's `--help`, generated from the CLI itself (`python -m colltune.cli.reference >
docs/cli.md`; tests/test_cli_reference.py fails when this page and the CLI differ). What
each command is for, with examples: the README; in detail: docs/commands.md.
"""


def _paths(group: Any, at: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every command and subcommand (a group has `commands`: typer's vendored click)."""
    for name in sorted(group.commands):
        cmd = group.commands[name]
        if getattr(cmd, "hidden", False):
            continue
        yield (*at, name)
        if getattr(cmd, "commands", None):
            yield from _paths(cmd, (*at, name))


def render() -> str:
    from colltune.cli import app

    width, force = typer.rich_utils.MAX_WIDTH, typer.rich_utils.FORCE_TERMINAL
    typer.rich_utils.MAX_WIDTH, typer.rich_utils.FORCE_TERMINAL = WIDTH, False
    try:
        group = typer.main.get_command(app)
        parts = [HEAD]
        for path in _paths(group):
            r = CliRunner().invoke(app, [*path, "--help"], env={"NO_COLOR": "1"}, prog_name="tune",
                                   terminal_width=WIDTH)
            text = "\n".join(line.rstrip() for line in r.output.strip("\n").splitlines())
            parts += [f"## tune {' '.join(path)}", "", "```", text, "```", ""]
        return "\n".join(parts)
    finally:
        typer.rich_utils.MAX_WIDTH, typer.rich_utils.FORCE_TERMINAL = width, force


if __name__ == "__main__":
    print(render(), end="")

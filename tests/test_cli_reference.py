"""docs/cli.md is the CLI's own `--help`, command by command (issue 63): regenerated with
`python -m colltune.cli.reference > docs/cli.md`, it must equal what is committed."""

from __future__ import annotations

from pathlib import Path

from colltune.cli.reference import render

PAGE = Path(__file__).resolve().parent.parent / "docs" / "cli.md"


def test_the_command_reference_is_the_clis_own_help() -> None:
    got = render()
    assert "## tune reduce" in got and "## tune model fit" in got and "Usage: tune" in got
    assert PAGE.read_text() == got, (
        "docs/cli.md differs from the CLI: python -m colltune.cli.reference > docs/cli.md")

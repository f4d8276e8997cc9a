"""bench/ is a set of tools, not a graveyard: every script (and every experiment) still
imports what it names from colltune, the tests' helpers and its neighbours. Two scripts had
imported a function that left src/ for tests/ (issue 63's review found them)."""

from __future__ import annotations

import ast
import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(BENCH.rglob("*.py"))


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: str(p.relative_to(BENCH)))
def test_a_bench_script_imports_what_it_names(script: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    for where in (BENCH, script.parent, BENCH.parent / "tests"):
        monkeypatch.syspath_prepend(str(where))
    missing = []
    for node in ast.walk(ast.parse(script.read_text())):
        if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
            continue
        if node.module.split(".")[0] in sys.stdlib_module_names:
            continue
        module = importlib.import_module(node.module)
        for a in node.names:
            if a.name != "*" and not hasattr(module, a.name):
                try:
                    importlib.import_module(f"{node.module}.{a.name}")
                except ImportError:
                    missing.append(f"{node.module}.{a.name}")
    assert missing == [], f"{script.name} imports what is gone"


def test_the_bench_readme_names_every_script() -> None:
    readme = (BENCH / "README.md").read_text()
    unnamed = [str(p.relative_to(BENCH)) for p in SCRIPTS
               if p.name != "clirun.py" and p.name not in readme]
    assert unnamed == []


def test_every_benchmark_section_says_the_commit_its_numbers_are_from() -> None:
    """Issue 74: a number without the commit that produced it cannot be reproduced or
    retired. Every section of docs/benchmarks.md says it, as one line under its heading;
    where this checkout has the history, the commit is in it and its date is that commit's."""
    import re
    import subprocess

    page = (Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md").read_text()
    sections = re.split(r"^## ", page, flags=re.M)[1:]
    assert len(sections) > 15
    said = [re.search(r"\A[^\n]*\n\n\*Numbers as of commit ([0-9a-f]{7,40}) "
                      r"\((\d{4}-\d\d-\d\d)\)\.\*\n", s) for s in sections]
    missing = [s.split("\n", 1)[0] for s, m in zip(sections, said) if m is None]
    assert missing == [], "say under each heading: *Numbers as of commit X (YYYY-MM-DD).*"
    repo = Path(__file__).resolve().parent.parent
    shallow = subprocess.run(["git", "-C", str(repo), "rev-parse", "--is-shallow-repository"],
                             capture_output=True, text=True, check=False).stdout.strip()
    for m in said:
        assert m is not None
        got = subprocess.run(["git", "-C", str(repo), "log", "-1", "--format=%cs", m.group(1)],
                             capture_output=True, text=True, check=False)
        # a whole history has it; a shallow clone (or a tree outside git) may lack it: the
        # format above still holds
        assert got.returncode == 0 or shallow != "false", f"no commit {m.group(0)}"
        if got.returncode == 0:
            assert got.stdout.strip() == m.group(2), m.group(0)


def test_every_benchmark_section_says_the_command_that_made_it() -> None:
    """Issue 87: docs/benchmarks.md holds current results a reader can make again: every
    section shows at least one command that made its numbers (an indented or fenced block
    that runs colltune, a bench/ script or the MPI tool measured), and no section is a
    run-by-run record (those are in docs/notes/)."""
    import re

    page = (Path(__file__).resolve().parent.parent / "docs" / "benchmarks.md").read_text()
    sections = re.split(r"^## ", page, flags=re.M)[1:]
    command = re.compile(r"^(?: {4}|```\w*\n)(?:cd \S+ && )?(?:[A-Z0-9_]+=\S+ )*"
                         r"(?:\S*python3?|\S*tune|bench/|bash|\S*mpirun|srun|sbatch|salloc|"
                         r"\S*IMB-MPI1|\S*osu_)", flags=re.M)
    without = [s.split("\n", 1)[0] for s in sections if not command.search(s)]
    assert without == [], "show the command that made each section's numbers"
    assert all(len(s.splitlines()) < 250 for s in sections), \
        [(s.split("\n", 1)[0], len(s.splitlines())) for s in sections]

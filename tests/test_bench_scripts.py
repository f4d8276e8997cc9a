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

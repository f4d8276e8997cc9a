"""'Can this family do X?' answered one way: a family's files answer a method or refuse it
naming the families whose files do (issue 87), and no refusal names Open MPI where the
family is another."""

from __future__ import annotations

from pathlib import Path

import pytest

from colltune.backends import registry
from colltune.backends.files import REFUSABLE, ExportRequest
from colltune.errors import ColltuneError

# each refusable method called with arguments of its shape: a family that refuses it does
# so before it reads any of them
CALLS = {
    "check": lambda f, p: f.check(p, None, None),
    "rules_arms": lambda f, p: f.rules_arms(p),
    "verify_target": lambda f, p: f.verify_target(p, 4, None, None),
    "installable": lambda f, p: f.installable(ExportRequest.__new__(ExportRequest)),
    "decided_rules": lambda f, p: f.decided_rules(p, "x", []),
}


def test_every_refusable_method_is_exercised() -> None:
    assert set(CALLS) == set(REFUSABLE)


def _refusals() -> list[tuple[str, str]]:
    return [(n, m) for n in registry.CHOICES if (f := registry.BACKENDS[n].files) is not None
            for m in REFUSABLE if not f.answers(m)]


def test_some_family_refuses_something() -> None:
    """Otherwise the next test checks nothing."""
    assert _refusals()


@pytest.mark.parametrize("family,method", _refusals())
def test_a_refusal_names_the_families_that_can(family: str, method: str,
                                               tmp_path: Path) -> None:
    files = registry.BACKENDS[family].files
    with pytest.raises(ColltuneError) as e:
        CALLS[method](files, tmp_path / "f")
    said = f"{e.value} {e.value.hint}"
    can = [n for n in registry.answering(method) if n != family]
    assert can, f"no family answers {method}: the refusal cannot name one"
    assert f"it does for --backend {', '.join(can)}" in said
    assert family in str(e.value)
    if family not in ("openmpi", "han", "smpi"):
        assert "Open MPI" not in said


def test_the_families_that_answer_each_method_are_the_ones_that_do() -> None:
    """answers() against the families' own classes: Open MPI's files read every method;
    MVAPICH2's are not verified by tune verify (its profile names ranges, not rules)."""
    assert registry.answering("verify_target")[:1] == ["openmpi"]
    assert "mvapich2" not in registry.answering("verify_target")
    assert "mvapich2" in registry.answering("check")
    with pytest.raises(ValueError):
        registry.BACKENDS["openmpi"].files.answers("claims")  # type: ignore[union-attr]

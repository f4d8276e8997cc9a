"""Families defined outside colltune, in its own shape (a folder each), for tests; and what
every such family needs: an installation with the Toolchain members only, and a way to
register it for one test."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from colltune.backends import registry


@dataclass(frozen=True)
class Installed:
    """An installation of a family defined in tests/: the Toolchain and launcher members
    only (nothing of it is ever run)."""

    prefix: Path
    version: str = "1.0"
    name: str = "DummyMPI"
    family: str = "dummy"  # its stored keys' prefix
    wrapper_flags: tuple[str, ...] = ("-show",)
    standalone: bool = True

    @property
    def mpicc(self) -> Path:
        return self.prefix / "bin" / "mpicc"

    @property
    def mpirun(self) -> Path:
        return self.prefix / "bin" / "mpirun"

    @property
    def key(self) -> str:
        return f"{self.family}-{self.version}@{self.prefix}"

    def describe(self) -> str:
        return f"{self.name} {self.version} at {self.prefix}"

    def runs_on(self, library: str) -> bool:
        return self.name in library

    def tool_env(self) -> dict[str, str]:
        return {}


def register(monkeypatch: pytest.MonkeyPatch, backend: Any) -> None:
    """The family in the registry for one test: --backend selects it, every list names it."""
    monkeypatch.setitem(registry.BACKENDS, backend.name, backend)
    monkeypatch.setattr(registry, "CHOICES", (*registry.CHOICES, backend.name))

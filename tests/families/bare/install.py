"""The bare family's installation and catalog: one algorithm, `ring`, for reduce."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from colltune.core.catalog import Catalog

ALGS = {"reduce": {1: "ring"}}


@dataclass(frozen=True)
class Bare:
    """An installation: the Toolchain and launcher members only."""

    prefix: Path
    version: str = "0.1"
    name: str = "BareMPI"
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
        return f"bare-{self.version}@{self.prefix}"

    def describe(self) -> str:
        return f"BareMPI {self.version} at {self.prefix}"

    def runs_on(self, library: str) -> bool:
        return "BareMPI" in library

    def tool_env(self) -> dict[str, str]:
        return {}


def catalog() -> Catalog:
    return Catalog(algorithms=ALGS, source="bare")

"""The bare family's installation and catalog: one algorithm, `ring`, for reduce."""

from __future__ import annotations

from dataclasses import dataclass

from colltune.core.catalog import Catalog

from .. import Installed

ALGS = {"reduce": {1: "ring"}}


@dataclass(frozen=True)
class Bare(Installed):
    """An installation of the bare family."""

    version: str = "0.1"
    name: str = "BareMPI"
    family: str = "bare"


def catalog() -> Catalog:
    return Catalog(algorithms=ALGS, source="bare")

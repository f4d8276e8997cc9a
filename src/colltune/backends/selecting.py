"""The selecting capability: a family whose library switches a collective's algorithm by
name inside a running job, where no MPI_T variable does it, so every configuration runs
in one launch (`--sweep mpit`). SimGrid SMPI has it: its table of collectives is filled
from its `smpi/<collective>` options, which the kernel changes between configurations
(kernel/bench/bench_mpit.c)."""

from __future__ import annotations

from abc import ABC, abstractmethod

from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config


class SelectSupport(ABC):
    """The name the library selects a configuration by."""

    @abstractmethod
    def name(self, catalog: Catalog, coll: Collective, cfg: Config) -> str:
        """The library's own name of `cfg` (letters, digits and underscores: the kernel
        refuses anything else)."""

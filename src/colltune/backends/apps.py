"""The apps capability: running a program colltune did not build for a tune on a family's
installation, the user's application (tune profile, tune app, verify --app, tune compare,
tune runtime over an application) or the models' probe (tune model fit). A family without
it (SMPI: a simulation runs no real program) still tunes; those commands say it cannot."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Generic, TypeVar

from colltune.core.toolchain import Installation

M = TypeVar("M", bound=Installation)


class AppSupport(ABC, Generic[M]):
    """How a family finds its installation outside a tune, passes settings to a program's
    ranks through its own launcher, and says what a job so launched ran."""

    # how tune online runs a candidate inside the application's own run: "dup" (a duplicate
    # communicator made right after writing its MPI_T control variables: the library reads
    # them when a communicator is created), "call" (written before the call, restored after:
    # the library reads them at each call); "": it cannot, and `not_online` says why
    online = ""
    not_online = "tune online does not drive this family yet"
    # where the library's own variable API reaches the same variables as MPI_T without
    # opening it: its name for kernel/online/online_mpit.c ("mca_base_var": Open MPI's, whose
    # MPI_T opening loads every plugin installed); "": MPI_T
    online_vars = ""

    @abstractmethod
    def find(self, prefix: str | None) -> M:
        """The installation at `prefix` (None: the family's own search rules); also how the
        registry learns which families a prefix holds."""

    @abstractmethod
    def launcher_env(self, env: dict[str, str]) -> list[str]:
        """Options of the family's own launcher (mpirun, mpiexec) that give every rank
        `env`, placed right after the launcher's name."""

    def readback(self, env: dict[str, str]) -> dict[str, str]:
        """The library's own names (MPI_T control variables) of the settings `env` makes,
        with the value a job launched with `env` must read back ({}: not provable for this
        family): how tune verify --app knows each arm ran as asked."""
        return {}

    def chooser(self, mpi: M, cmd: list[str], env: dict[str, str]
                ) -> Callable[[str, int, int], str] | None:
        """What the library runs for (collective, communicator size, per-rank size) in a
        job launched as `cmd` with `env`, as far as its settings say (None: not known)."""
        return None


def hydra_env(env: dict[str, str]) -> list[str]:
    """Hydra's mpiexec (MPICH, MVAPICH2, Intel MPI): `-genv NAME VALUE` per setting."""
    return [a for k, v in env.items() for a in ("-genv", k, v)]

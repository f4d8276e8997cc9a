"""MPI families the tuner drives: Open MPI, MPICH and MVAPICH2 (real launches), SimGrid SMPI
(simulated)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from colltune.backends.mpich import MPICH
from colltune.backends.mvapich2 import MVAPICH2
from colltune.backends.openmpi import OpenMPI
from colltune.backends.smpi import SMPI

if TYPE_CHECKING:
    from colltune.slots import Placement

# An installation measurements are taken on; each has version, prefix, mpicc, mpirun,
# name, key and describe().
Installation = OpenMPI | SMPI | MPICH | MVAPICH2


def launch(mpi: Installation, placement: Placement, coll: str = "reduce", alg: int = 0,
           env_extra: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """Launcher command line (up to the executable) and environment, as `mpi`'s backend
    makes them: `env_extra` holds the family's variables (SMPI takes `coll` and `alg` on
    smpirun's command line)."""
    from colltune.backends.registry import of

    return of(mpi).launch(mpi, placement, coll, alg, env_extra)


# How each family's ranks wait inside a collective: why a default can look tens to thousands
# of times slower than a forced algorithm when ranks share cores (the measurement issue:
# MPICH 5.0.2 at 4 ranks on 2 cores, default 10-1560 ms per call, forced 19 us-2.4 ms)
_WAITING = {
    MPICH.name: "MPICH's ranks busy-poll while they wait, its default (shared-memory) "
                "collectives most of all, so a rank waits for a scheduler time slice of the "
                "rank whose core it shares",
    "MVAPICH": "MVAPICH's ranks busy-poll while they wait, so a rank waits for a scheduler "
               "time slice of the rank whose core it shares",
    MVAPICH2.name: "MVAPICH2's ranks busy-poll while they wait, so a rank waits for a "
                   "scheduler time slice of the rank whose core it shares",
    OpenMPI.name: "Open MPI's ranks poll for progress while they wait, so a rank can wait "
                  "for a scheduler time slice of the rank whose core it shares",
}


def waiting_cause(mpi_name: str) -> str:
    """Why waiting ranks stall when they share cores, in this family's terms ("" for a
    simulation, whose times are not scheduled)."""
    return _WAITING.get(mpi_name, "")


__all__ = ["MPICH", "MVAPICH2", "SMPI", "Installation", "OpenMPI", "launch", "waiting_cause"]

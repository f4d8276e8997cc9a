"""MPI families the tuner drives: Open MPI, MPICH and MVAPICH2 (real launches), SimGrid SMPI
(simulated)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.backends import mpich, mvapich2, smpi
from colltune.backends.mpich import MPICH
from colltune.backends.mvapich2 import MVAPICH2
from colltune.backends.openmpi import OpenMPI, launch_command, launch_env
from colltune.backends.smpi import SMPI

if TYPE_CHECKING:
    from colltune.slots import Placement

# An installation measurements are taken on; each has version, prefix, mpicc, mpirun,
# name, key and describe().
Installation = OpenMPI | SMPI | MPICH | MVAPICH2


def launch(mpi: Installation, placement: Placement, coll: str = "reduce", alg: int = 0,
           env_extra: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """Launcher command line (up to the executable) and environment. Open MPI, MPICH and
    MVAPICH2 take the configuration from `env_extra` (MCA, MPIR_CVAR or MV2 variables); SMPI
    from `coll` and `alg`, chosen on its command line."""
    if isinstance(mpi, MVAPICH2):
        return (mvapich2.launch_command(mpi, placement),
                mvapich2.launch_env(env_extra, placement.oversubscribe))
    if isinstance(mpi, MPICH):
        return mpich.launch_command(mpi, placement), mpich.launch_env(env_extra)
    if isinstance(mpi, SMPI):
        assert placement.hostfile is not None
        return (smpi.launch_command(mpi, Path(placement.hostfile), placement.np, coll, alg,
                                    placement.launch.args), dict(os.environ))
    return launch_command(mpi, placement), launch_env(env_extra)


__all__ = ["MPICH", "MVAPICH2", "SMPI", "Installation", "OpenMPI", "launch"]

"""MPI families the tuner drives: Open MPI (real launches) and SimGrid SMPI (simulated)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.backends import smpi
from colltune.backends.openmpi import OpenMPI, launch_command, launch_env
from colltune.backends.smpi import SMPI

if TYPE_CHECKING:
    from colltune.slots import Placement

# An installation measurements are taken on; both have version, prefix, mpicc, mpirun,
# name, key and describe().
Installation = OpenMPI | SMPI


def launch(mpi: Installation, placement: Placement, coll: str = "reduce", alg: int = 0,
           env_extra: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """Launcher command line (up to the executable) and environment. Open MPI takes the
    configuration from `env_extra` (MCA variables); SMPI from `coll` and `alg`, chosen on
    its command line."""
    if isinstance(mpi, SMPI):
        assert placement.hostfile is not None
        return (smpi.launch_command(mpi, Path(placement.hostfile), placement.np, coll, alg,
                                    placement.launch.args), dict(os.environ))
    return launch_command(mpi, placement), launch_env(env_extra)


__all__ = ["SMPI", "Installation", "OpenMPI", "launch"]

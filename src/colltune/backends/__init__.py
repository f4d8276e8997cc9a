"""MPI families the tuner drives: Open MPI (real launches) and SimGrid SMPI (simulated)."""

from __future__ import annotations

from colltune.backends.openmpi import OpenMPI
from colltune.backends.smpi import SMPI

# An installation measurements are taken on; both have version, prefix, mpicc, mpirun,
# name, key and describe().
Installation = OpenMPI | SMPI

__all__ = ["SMPI", "Installation", "OpenMPI"]

"""MPI families the tuner drives: Open MPI, MPICH and MVAPICH2 (real launches), SimGrid SMPI
(simulated). Each family is a module pair here (its installation and catalog; its Backend)
and one line in registry.BACKENDS; generic code sees core.toolchain.Installation and the
Backend interface in base.py only."""

"""MPI families the tuner drives: a package per family (openmpi, impi, mpich, mvapich2,
smpi), each one line in registry.BACKENDS; generic code sees core.toolchain.Installation,
the Backend interface (base.py) and its optional capabilities (runtime, files) only."""

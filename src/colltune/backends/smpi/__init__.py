"""SimGrid SMPI: simulated Open MPI collectives on a platform file (deterministic times)."""

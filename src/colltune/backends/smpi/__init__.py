"""SimGrid SMPI: simulated Open MPI collectives on a platform file (deterministic times).

Elsewhere: it writes Open MPI's rules (backends/openmpi/tuned_rules.py); its page
docs/smpi.md; its tests in docs/architecture.md's map."""

"""Open MPI: its installations, coll/tuned rules (classic, v2; SMPI reuses them), coll/han,
runtime parameters, and the proofs read from its traffic and logs.

Elsewhere: its formats in rules/ompi_classic.py, ompi_v6.py, ompi_json.py and
mca_params.py; its page docs/openmpi.md; its tests and the rest in docs/architecture.md's map."""

"""Open MPI: its installations, coll/tuned rules (classic, v2; SMPI reuses them), coll/han,
runtime parameters, and the proofs read from its traffic and logs."""

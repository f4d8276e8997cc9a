"""A bare MPI family: the Backend core only (no runtime parameters, no files it reads)."""

"""colltune: measure MPI collective algorithms and write rules the MPI library obeys."""

__version__ = "0.1.0"

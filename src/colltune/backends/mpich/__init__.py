"""MPICH: its installations, CVAR forcing, JSON tuning files and runtime parameters."""

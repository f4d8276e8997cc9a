"""MPICH: its installations, CVAR forcing, JSON tuning files and runtime parameters.

Elsewhere: its formats in rules/mpich_csel.py, mpich_env.py, mpich_names.py and
env_profile.py; its page docs/mpich.md; its tests in docs/architecture.md's map."""

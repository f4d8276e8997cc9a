"""MVAPICH2: its installations, tuning profiles, their size ranges and runtime parameters.

Elsewhere: its formats in rules/mvapich2.py, mvapich3.py and env_profile.py; its page
docs/mvapich.md; its tests in docs/architecture.md's map."""

"""MVAPICH2: its installations, tuning profiles, their size ranges and runtime parameters."""

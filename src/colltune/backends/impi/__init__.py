"""Intel MPI: its installations, presets, JSON tuning files and spliced binary tables, and
the proof of what a preset ran."""

"""Intel MPI: its installations, presets, JSON tuning files and spliced binary tables, and
the proof of what a preset ran.

Elsewhere: its formats in rules/impi_tuning.py, impi_env.py and impi_table.py; its page
docs/impi.md; its tests in docs/architecture.md's map."""

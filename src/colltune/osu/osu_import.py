"""`tune import-osu`: OSU Micro-Benchmarks output files read as runs to import (one file =
one launch of one algorithm)."""

from __future__ import annotations

from pathlib import Path

from colltune.errors import ColltuneError, FormatError
from colltune.osu.importing import Run, algorithm_from_name, file_algorithm
from colltune.osu.osu_output import read as read_osu

__all__ = ["algorithm_from_name", "osu_runs"]


def osu_runs(paths: list[Path], algorithm: int | None = None) -> list[Run]:
    """Every file read and its algorithm known (--algorithm or its name), or an error
    naming the file."""
    runs = []
    for p in paths:
        try:
            run = read_osu(p)
        except FormatError as e:
            raise ColltuneError(f"cannot import {e}", "fix or leave out that file") from None
        alg = file_algorithm(p, algorithm)
        runs.append(Run(p, run.collective, {r.size: r.avg_us for r in run.rows}, alg))
    return runs

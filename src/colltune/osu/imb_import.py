"""`tune import-imb`: IMB-MPI1 output files read as runs to import. One file is one launch
under one algorithm; IMB prints a table per benchmark and process count, and the tables at
--np are taken. A file forced to an algorithm (alg<N> in its name, or --algorithm) holds one
benchmark colltune tunes: the others in it ran their defaults."""

from __future__ import annotations

from pathlib import Path

from colltune.errors import ColltuneError, FormatError, read_text
from colltune.osu.imb_output import IMB_NAMES, ImbError, parse
from colltune.osu.importing import Run, file_algorithm


def imb_runs(paths: list[Path], np: int, algorithm: int | None = None) -> list[Run]:
    names = {v.lower(): k for k, v in IMB_NAMES.items()}
    runs = []
    for p in paths:
        try:  # read_text: a regular file of bounded size (never a FIFO someone planted)
            tables = parse(read_text(p))
        except (OSError, FormatError, ImbError) as e:
            raise ColltuneError(f"cannot import {p}: {e}", "fix or leave out that file"
                                ) from None
        here = [t for t in tables if t.processes == np and t.benchmark.lower() in names]
        if not here:
            held = sorted({f"{t.benchmark} at {t.processes}" for t in tables})
            raise ColltuneError(f"{p}: no table of a collective colltune tunes at {np} "
                                "processes" + (f" (it holds {', '.join(held)})" if held else
                                               " (no IMB-MPI1 table found)"),
                                "pass the --np the run used, or leave that file out")
        alg = file_algorithm(p, algorithm)
        if alg and len(here) > 1:
            raise ColltuneError(
                f"{p}: forced to algorithm {alg}, but it holds "
                + ", ".join(t.benchmark for t in here) + ": the others ran their defaults",
                "run one benchmark per forced run (IMB-MPI1 Bcast ...)")
        for t in here:
            coll = names[t.benchmark.lower()]
            avg = {0: t.rows[0]["t_avg[usec]"]} if coll == "barrier" else t.avg_us()
            runs.append(Run(p, coll, avg, alg))
    return runs

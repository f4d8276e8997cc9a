"""Intel MPI Benchmarks (IMB-MPI1) output, read: one table per benchmark and process count.

The text may come from another user's run: it is data. Every line that is not a table row
of the header just read is skipped, numbers must be finite, and sizes whole."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_BENCH = re.compile(r"^# Benchmarking (\w+)\s*$")
_PROCS = re.compile(r"^# #processes = (\d{1,9})\b")
MAX_ROWS = 100_000  # more than any IMB run prints: a bigger file is not IMB's
# a number as IMB prints one (Python's float() also takes "1_6", "inf", "nan")
_NUMBER = re.compile(r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?\Z")
MAX_BYTES = 1 << 40  # per rank: far above any IMB message length
# colltune's collective -> IMB-MPI1's benchmark
IMB_NAMES = {"allgather": "Allgather", "allgatherv": "Allgatherv", "allreduce": "Allreduce",
             "alltoall": "Alltoall", "alltoallv": "Alltoallv", "barrier": "Barrier",
             "bcast": "Bcast", "gather": "Gather", "gatherv": "Gatherv",
             "reduce": "Reduce", "reduce_scatter": "Reduce_scatter",
             "reduce_scatter_block": "Reduce_scatter_block", "scatter": "Scatter",
             "scatterv": "Scatterv"}


@dataclass
class ImbTable:
    benchmark: str  # as IMB names it: Bcast, Reduce, Allreduce...
    processes: int
    columns: list[str]  # "#bytes", "#repetitions", "t_min[usec]", ...
    rows: list[dict[str, float]] = field(default_factory=list)

    def avg_us(self, skip: int = 0) -> dict[int, float]:
        """Message size -> t_avg (the mean over ranks, microseconds), past the first `skip`
        rows (a lead of calls nobody judges)."""
        return {int(r["#bytes"]): r["t_avg[usec]"] for r in self.rows[skip:]
                if "#bytes" in r and "t_avg[usec]" in r}


class ImbError(ValueError):
    pass


def parse(text: str) -> list[ImbTable]:
    tables: list[ImbTable] = []
    bench: str | None = None
    procs: int | None = None
    cur: ImbTable | None = None
    rows = 0
    for line in text.splitlines():
        s = line.strip()
        if (m := _BENCH.match(s)):
            bench, procs, cur = m.group(1), None, None
            continue
        if (m := _PROCS.match(s)):
            procs = int(m.group(1))
            continue
        if bench and procs and s.startswith("#") and "[usec]" in s:
            cur = ImbTable(bench, procs, s.split())
            tables.append(cur)
            continue
        if cur is None or not s or s.startswith("#"):
            if s.startswith("#") and cur is not None and cur.rows:
                cur = None  # the table ended
            continue
        words = s.split()
        if len(words) != len(cur.columns):
            cur = None
            continue
        if not re.match(r"[0-9+-]|inf|nan", words[0], flags=re.I):
            cur = None  # not a row (text after the table)
            continue
        if not all(_NUMBER.match(w) for w in words):
            raise ImbError(f"{cur.benchmark}: a row holds a value no timing has: {s[:80]!r}")
        values = [float(w) for w in words]
        if not all(math.isfinite(v) for v in values):
            raise ImbError(f"{cur.benchmark}: a row holds a value no timing has: {s[:80]!r}")
        row = dict(zip(cur.columns, values, strict=True))
        if "#bytes" in row and (not re.fullmatch(r"[0-9]+", words[cur.columns.index("#bytes")])
                                or row["#bytes"] > MAX_BYTES):
            raise ImbError(f"{cur.benchmark}: {words[cur.columns.index('#bytes')][:20]} is not "
                           "a message size")
        rows += 1
        if rows > MAX_ROWS:
            raise ImbError(f"more than {MAX_ROWS} rows: not IMB output")
        cur.rows.append(row)
    return [t for t in tables if t.rows]


def table(tables: list[ImbTable], benchmark: str, processes: int) -> ImbTable | None:
    """The table of one benchmark (case-insensitive: bcast finds Bcast) at a process count."""
    return next((t for t in tables if t.benchmark.lower() == benchmark.lower()
                 and t.processes == processes), None)

"""Reads OSU Micro-Benchmarks collective output (plain or `-f`), strictly, with line numbers."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from colltune.errors import FormatError, read_text

# OSU's benchmark titles -> colltune's collective names
TITLES: dict[str, str] = {
    "allgather": "allgather", "allgatherv": "allgatherv", "allreduce": "allreduce",
    "all-to-all personalized exchange": "alltoall", "alltoall": "alltoall",
    "all-to-allv personalized exchange": "alltoallv", "alltoallv": "alltoallv",
    "barrier": "barrier", "broadcast": "bcast", "bcast": "bcast", "gather": "gather",
    "gatherv": "gatherv", "reduce": "reduce", "reduce_scatter": "reduce_scatter",
    "reduce_scatter_block": "reduce_scatter_block", "reduce scatter": "reduce_scatter",
    "scatter": "scatter", "scatterv": "scatterv",
}

_TITLE = re.compile(r"^#\s*OSU MPI(?:-\w+)? (?P<what>.+?) Latency Test(?: v(?P<ver>[\w.]+))?\s*$",
                    re.IGNORECASE)
# a column name: words, then maybe a unit in brackets; columns are apart by 2+ spaces. The
# header is split on those first, then each part matched whole: one pattern over the whole
# line (lazy, with a lookahead) took quadratic time on a header that fails at its end
_COLUMN = re.compile(r"[A-Za-z][A-Za-z0-9 ]*(?:\([^)]*\))?")
_KNOWN = {"size": "size", "avg latency(us)": "avg", "min latency(us)": "min",
          "max latency(us)": "max", "iterations": "iterations",
          "validation": "validation"}  # OSU's -c: did the collective compute the right result


@dataclass
class OsuRow:
    size: int  # what OSU prints: bytes per rank for allgather, alltoall, gather, scatter
    avg_us: float
    min_us: float | None = None
    max_us: float | None = None
    iterations: int | None = None
    line: int = 0


@dataclass
class OsuRun:
    path: str
    collective: str
    version: str | None
    datatype: str | None
    rows: list[OsuRow] = field(default_factory=list)


# what OSU prints: digits, a point, digits (Python's float() would also take 1_0.0 as 10,
# "nan", "1e3", " 1 ")
_DECIMAL = re.compile(r"[0-9]{1,15}(\.[0-9]{1,15})?")


def _number(tok: str, path: str, line: int, what: str) -> float:
    if not _DECIMAL.fullmatch(tok):
        raise FormatError(path, line, f"{what} '{tok[:30]}' is not a number as OSU prints one")
    try:
        v = float(tok)
    except ValueError:
        raise FormatError(path, line, f"{what} '{tok}' is not a number") from None
    if not math.isfinite(v) or v < 0:
        raise FormatError(path, line, f"{what} {tok} is not a finite latency >= 0")
    return v


def parse(text: str, path: str = "<osu>") -> OsuRun:  # noqa: C901, PLR0915 (a line reader: a branch per kind of line OSU prints)
    """One OSU run. Lines before the title (launcher chatter) are ignored; after the
    column header every non-comment line must be a complete data row."""
    collective: str | None = None
    version = datatype = None
    columns: list[str] | None = None
    rows: list[OsuRow] = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        m = _TITLE.match(line)
        if m:
            if collective is not None:
                raise FormatError(path, no, "a second OSU run in the same file; "
                                  "give one file per run")
            what = re.sub(r"\s+", " ", m["what"].strip().lower())
            what = re.sub(r"^(non-blocking|nonblocking)\s+", "", what)
            if what not in TITLES:
                raise FormatError(path, no, f"'{m['what']}' is not a collective colltune tunes")
            collective, version = TITLES[what], m["ver"]
            continue
        if collective is None:
            continue  # mpirun warnings, module banners...
        if line.startswith("#"):
            body = line.lstrip("#").strip()
            if body.lower().startswith("datatype:"):
                datatype = body.split(":", 1)[1].strip().rstrip(".")
            elif "latency" in body.lower():
                parts = [c.strip() for c in re.split(r"\s{2,}", body) if c.strip()]
                names = [c.lower() for c in parts if _COLUMN.fullmatch(c)]
                if len(names) != len(parts):
                    names = []  # a part that is no column name: refused below
                if not names or any(n not in _KNOWN for n in names) or "avg" not in [
                        _KNOWN[n] for n in names]:
                    raise FormatError(path, no, f"unknown column header '{body[:80]}'")
                columns = [_KNOWN[n] for n in names]
            continue
        if columns is None:
            if line[0].isdigit():
                raise FormatError(path, no, "data before the column header")
            continue
        toks = line.split()
        if len(toks) != len(columns):
            raise FormatError(path, no, f"{len(toks)} values, the header names "
                              f"{len(columns)}: {' '.join(columns)}")
        vals = dict(zip(columns, toks))
        if "size" in vals:
            if not re.fullmatch(r"[0-9]{1,15}", vals["size"]):
                raise FormatError(path, no, f"size '{vals['size']}' is not a whole number")
            size = int(vals["size"])
        else:
            size = 0  # barrier: no size column
        row = OsuRow(size, _number(vals["avg"], path, no, "average latency"), line=no)
        if "min" in vals:
            row.min_us = _number(vals["min"], path, no, "minimum latency")
        if "max" in vals:
            row.max_us = _number(vals["max"], path, no, "maximum latency")
        if row.min_us is not None and row.max_us is not None and not (
                row.min_us <= row.avg_us <= row.max_us):
            raise FormatError(path, no, "the average is not between the minimum and maximum")
        if "iterations" in vals:
            if not re.fullmatch(r"[0-9]{1,12}", vals["iterations"]) or int(
                    vals["iterations"]) == 0:
                raise FormatError(path, no, f"iterations '{vals['iterations']}' is not a "
                                  "positive whole number")
            row.iterations = int(vals["iterations"])
        if "validation" in vals:
            if vals["validation"] not in ("Pass", "Fail"):
                raise FormatError(path, no, f"validation '{vals['validation'][:20]}' is "
                                  "neither Pass nor Fail")
            if vals["validation"] == "Fail":  # a wrong result is never a candidate
                raise FormatError(path, no, f"OSU's validation failed at {row.size} B: this "
                                  "configuration computed a wrong result")
        if rows and row.size <= rows[-1].size:
            raise FormatError(path, no, f"size {row.size} does not increase "
                              f"(previous {rows[-1].size} on line {rows[-1].line})")
        rows.append(row)
    if collective is None:
        raise FormatError(path, 0, "no OSU title line ('# OSU MPI ... Latency Test')")
    if not rows:
        raise FormatError(path, 0, "no measurements after the column header")
    return OsuRun(path, collective, version, datatype, rows)


def read(path: str | Path) -> OsuRun:
    return parse(read_text(path), str(path))

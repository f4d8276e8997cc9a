"""tl/ucp's k-nomial radix settings per message range (UCC 1.8's UINT_RANGED variables):
read as UCC reads them, checked for what it accepts but runs badly, and written."""

from __future__ import annotations

from dataclasses import dataclass

from colltune.rules.ucc_tune import INF, MEM_TYPES, UccTuneError, memunits, number, size_text

AUTO = "auto"


@dataclass(frozen=True)
class RadixRange:
    lo: int  # both ends included: UCC's lookup takes start <= size <= end
    hi: int
    mem_types: tuple[str, ...]  # (): every memory type
    radix: int


@dataclass(frozen=True)
class Radix:
    """A radix setting as UCC reads it: ranges tried in order, the first that holds a
    call's size and memory type giving its radix; `default` elsewhere (None: "auto", the
    algorithm's own; "unset": no default given, which UCC leaves uninitialised)."""

    ranges: tuple[RadixRange, ...]
    default: int | str | None

    def at(self, size: int, mem: str = "host") -> int | str | None:
        for r in self.ranges:
            if r.lo <= size <= r.hi and (not r.mem_types or mem in r.mem_types):
                return r.radix
        return self.default


def parse_radix(value: str) -> Radix:
    """A radix setting as UCC 1.8 reads it, or UccTuneError where it refuses the value
    (then tl/ucp's configuration fails to load: no UCC collective runs on tl/ucp). Parts
    are joined by ','; a part is one to three ':'-fields, the last a number or `auto`
    (alone: the default); in a range part each field is the radix (digits), memory types
    (joined by '^') or a range `start-end` (UCX memory units, both included), and `auto`
    there is refused. Empty fields and parts vanish (strtok)."""
    if value.lower() == AUTO:
        return Radix((), None)
    ranges: list[RadixRange] = []
    default: int | str | None = "unset"
    parts = [p for p in value.split(",") if p]
    if not parts:
        raise UccTuneError(value, "no radix or range")
    for part in parts:
        fields = [f for f in part.split(":") if f]
        if not fields or len(fields) > 3 or not (
                fields[-1].isdigit() or fields[-1].lower() == AUTO):
            raise UccTuneError(part, "is not [start-end:][memory types:]radix (at most "
                               "three fields, the last a number or auto)")
        if len(fields) == 1:
            default = None if fields[0].lower() == AUTO else number(fields[0]) % 2**32
            continue
        lo, hi, radix = 0, INF, None
        mems: tuple[str, ...] = ()
        for f in fields:
            if f.isdigit():
                radix = number(f) % 2**32  # atoi into an unsigned
            elif (m := _names_by(f, "^", MEM_TYPES)) is not None:
                mems = tuple(sorted(set(m)))  # a set of memory types: order says nothing
            elif (r := _radix_range(f)) is not None:
                lo, hi = r
            else:
                raise UccTuneError(part, f"{f!r} is no radix, memory type or range "
                                   "start-end" + (" (auto is the default's alone)"
                                                  if f.lower() == AUTO else ""))
        assert radix is not None  # the last field is digits
        ranges.append(RadixRange(lo, hi, mems, radix))
    return Radix(tuple(ranges), default)


def _names_by(text: str, sep: str, known: tuple[str, ...]) -> tuple[str, ...] | None:
    parts = [p for p in text.split(sep) if p]
    if not parts or any(p.lower() not in known for p in parts):
        return None
    return tuple(p.lower() for p in parts)


def _radix_range(text: str) -> tuple[int, int] | None:
    ends = [e for e in text.split("-") if e]
    if len(ends) != 2:
        return None
    lo, hi = memunits(ends[0]), memunits(ends[1])
    return None if lo is None or hi is None else (lo, hi)


def radix_problems(r: Radix) -> list[str]:
    """What UCC accepts in a radix setting but runs badly or not as written: a radix below
    2 (no k-nomial tree has one), ranges that end before they start or that an earlier
    range already covers (the first that holds a size wins), no default."""
    out = []
    for i, x in enumerate(r.ranges):
        if x.radix < 2:
            out.append(f"{x.lo}-{x.hi}: radix {x.radix} (a k-nomial tree needs 2 or more)")
        if x.hi < x.lo:
            out.append(f"{x.lo}-{x.hi}: ends before it starts (no size uses it)")
        for y in r.ranges[:i]:
            if (y.lo <= x.lo and x.hi <= y.hi and set(x.mem_types or MEM_TYPES)
                    <= set(y.mem_types or MEM_TYPES)):
                out.append(f"{x.lo}-{x.hi}: inside {y.lo}-{y.hi}, which comes first (UCC "
                           "never reaches it)")
                break
    if isinstance(r.default, int) and r.default < 2:
        out.append(f"default radix {r.default} (a k-nomial tree needs 2 or more)")
    if r.default == "unset":
        out.append("no default (a lone radix or auto): UCC leaves the sizes outside every "
                   "range with an uninitialised radix")
    return out


def render_radix(rows: list[tuple[int, int, int]]) -> str:
    """The setting that gives each (first size, end excluded, radix) its radix on host
    memory, UCC's own (auto) elsewhere: written with both ends included, as UCC reads."""
    parts = [f"{size_text(lo)}-{'inf' if hi == INF else size_text(hi - 1)}:host:{k}"
             for lo, hi, k in sorted(rows)]
    return ",".join([*parts, AUTO])

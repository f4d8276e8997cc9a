"""UCC's tuning strings (`UCC_<CL|TL>_<NAME>_TUNE`): read as UCC reads them, refused where
UCC would refuse them (naming the token and why), and written from per-size choices.

How UCC 1.8 reads a string (src/coll_score/ucc_coll_score.c, and its runs here,
tests/test_ucc_live.py): tokens are joined by '#', the qualifiers of a token by ':', and
empty ones vanish (strtok). A qualifier is known by its form, tried in this order, each
kind at most once per token: collective names (a comma list, any case), memory types,
a score (digits, or `inf`), message ranges (`start-end`, a comma list, in UCX's memory
units: `4k`, `1M`, `inf`), team sizes (`[a-b,c,...]`), an algorithm (`@id` or `@name`).
Anything else rejects the whole string. A token applies only to the teams its sizes
include; without a score or an algorithm it does nothing.

A range `start-end` holds the sizes from start up to end, end excluded: with
`0-4k:@a#4k-inf:@b` a call of 4096 B runs b (UCC 1.8 here, proven by its own init
functions under a debugger, tests/test_ucc_live.py; its source's lookup reads as if the
end were included, and its score map prints `{0..4095}`: the run decides). Two ranges
overlap where one starts before the other ends, so adjacent ranges share a bound.

Beside them: the radix variables and an environment file of both (the value of a radix
setting is read in ucc_radix.py, the configuration file in ucc_config.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from colltune.rules import safe

INF = 2**64 - 1  # UCC_MSG_MAX: a range's `inf`
TEAM_MAX = 2**32 - 1  # a team size's `inf`
SCORE_INF = "inf"

# ucc_coll_type_from_str and ucc_mem_type_from_str (UCC 1.8): matched without case
COLL_TYPES = ("allgather", "allgatherv", "allreduce", "alltoall", "alltoallv", "barrier",
              "bcast", "fanin", "fanout", "gather", "gatherv", "reduce", "reduce_scatter",
              "reduce_scatterv", "scatter", "scatterv")
MEM_TYPES = ("host", "cuda", "cuda_managed", "rocm", "rocm_managed")

# tl/ucp's algorithms in UCC 1.8, by id (the order is the id; `ucc_info -A` prints them,
# and tests/test_ucc_live.py holds this table to the version built)
TL_UCP_ALGS: dict[str, tuple[str, ...]] = {
    "allgather": ("knomial", "ring", "neighbor", "bruck", "sparbit", "linear", "batched"),
    "allgatherv": ("ring", "knomial"),
    "allreduce": ("knomial", "sra_knomial", "sliding_window", "dbt", "ring"),
    "alltoall": ("pairwise", "bruck", "onesided"),
    "alltoallv": ("pairwise", "hybrid", "onesided"),
    "barrier": ("knomial",),
    "bcast": ("knomial", "sag_knomial", "dbt"),
    "fanin": ("knomial",),
    "fanout": ("knomial",),
    "gather": ("knomial",),
    "gatherv": ("linear",),
    "reduce": ("knomial", "dbt", "srg"),
    "reduce_scatter": ("ring", "knomial"),
    "reduce_scatterv": ("ring",),
    "scatterv": ("linear",),
}

# ucs_str_to_memunits (UCX 1.13, observed here): digits with an optional unit and an
# optional B after it (`4k`, `4KB`), anything after those two ignored; `inf` is UCC_MSG_MAX
_MEMUNITS = re.compile(r"\s*\+?(\d+)(?:([bkmgtBKMGT])([bB].*)?)?")
_UNIT = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_LONG_MAX = 2**63 - 1


class UccTuneError(ValueError):
    """A string UCC would reject: `token` is the token (or qualifier) it stops at."""

    def __init__(self, token: str, why: str) -> None:
        super().__init__(f"{token!r}: {why}")
        self.token = token
        self.why = why


def number(digits: str) -> int:
    """Digits as C's strtol reads them: what overflows a long is a long's largest value
    (and Python never converts a string of 100,000 digits: tests/test_linear_readers.py)."""
    digits = digits.lstrip("0") or "0"
    return int(digits) if len(digits) <= 19 else _LONG_MAX


def memunits(text: str) -> int | None:
    """A message size as UCX reads it, or None where UCX refuses it."""
    if text.lower() == "inf":
        return INF
    if text.lower() == "auto":
        return INF - 1  # UCS_MEMUNITS_AUTO: a size no call has
    m = _MEMUNITS.fullmatch(text)
    if m is None:
        return None
    value = min(number(m.group(1)), _LONG_MAX)  # UCX clamps what overflows a long
    return value * _UNIT[(m.group(2) or "b").lower()]


@dataclass(frozen=True)
class Token:
    """One '#'-separated token of a string; an empty field: the token did not say."""

    text: str
    colls: tuple[str, ...] = ()  # every collective
    mem_types: tuple[str, ...] = ()  # every memory type
    score: int | str | None = None  # a number or "inf"
    ranges: tuple[tuple[int, int], ...] = ()  # every size: 0-inf
    teams: tuple[tuple[int, int], ...] = ()  # every team size
    alg: str | None = None  # what follows '@': an id or a name

    def for_team(self, size: int) -> bool:
        return not self.teams or any(lo <= size <= hi for lo, hi in self.teams)

    def acts(self) -> bool:
        return self.score is not None or self.alg is not None


def _names(text: str, known: tuple[str, ...]) -> tuple[str, ...] | None:
    parts = [p for p in text.split(",") if p]
    if not parts or any(p.lower() not in known for p in parts):
        return None
    return tuple(p.lower() for p in parts)


def _score(text: str) -> int | str | None:
    if text.lower() == SCORE_INF:
        return SCORE_INF
    return number(text) if text.isdigit() else None


def _ranges(text: str) -> tuple[tuple[int, int], ...] | None:
    out = []
    for part in (p for p in text.split(",") if p):
        ends = [e for e in part.split("-") if e]
        if len(ends) != 2:
            return None
        lo, hi = memunits(ends[0]), memunits(ends[1])
        if lo is None or hi is None:
            return None
        out.append((lo, hi))
    return tuple(out) or None


def _teams(text: str) -> tuple[tuple[int, int], ...] | None:
    """`[a-b,c]`; malformed inside the brackets: rejected (UCC stops there, not later)."""
    if len(text) < 2 or text[0] != "[" or text[-1] != "]":
        return None
    out = []
    for part in (p for p in text[1:-1].split(",") if p):
        ends = [e for e in part.split("-") if e]
        if len(ends) == 1 and ends[0].isdigit():
            out.append((number(ends[0]), number(ends[0])))
            continue
        if len(ends) != 2 or not ends[0].isdigit() or not (
                ends[1].isdigit() or ends[1].lower() == "inf"):
            raise UccTuneError(text, f"team size {part!r} is not N, N-M or N-inf")
        hi = TEAM_MAX if ends[1].lower() == "inf" else number(ends[1])
        if hi < number(ends[0]):
            raise UccTuneError(text, f"team size range {part!r} ends before it starts")
        out.append((number(ends[0]), hi))
    return tuple(out)


def parse_token(text: str) -> Token:
    """One token's qualifiers, each by its form in UCC's order (see the module's text)."""
    found: dict[str, object] = {}
    for q in (q for q in text.split(":") if q):
        if "colls" not in found and (v := _names(q, COLL_TYPES)) is not None:
            found["colls"] = v
        elif "mem_types" not in found and (v := _names(q, MEM_TYPES)) is not None:
            found["mem_types"] = v
        elif "score" not in found and (s := _score(q)) is not None:
            found["score"] = s
        elif "ranges" not in found and (r := _ranges(q)) is not None:
            found["ranges"] = r
        elif "teams" not in found and (t := _teams(q)) is not None:
            found["teams"] = t
        elif "alg" not in found and q.startswith("@"):
            found["alg"] = q[1:]
        else:
            raise UccTuneError(q, f"in token {text!r} is no collective, memory type, "
                               "score, message range (start-end), team size ([a-b]) or "
                               "@algorithm, or repeats one the token has")
    return Token(text, **found)  # type: ignore[arg-type]


def parse(value: str) -> list[Token]:
    """A string's tokens, as UCC splits and reads them (its syntax only: `check` says what
    a team of a given size makes of them)."""
    return [parse_token(t) for t in value.split("#") if t]


@dataclass
class Applied:
    """What a string does to one team size of a component: the ranges it sets per
    (collective, memory type), in order, and what it drops without a word."""

    ranges: dict[tuple[str, str], list[tuple[int, int, str | None]]] = field(
        default_factory=dict)
    ignored: list[str] = field(default_factory=list)


def _alg_name(coll: str, alg: str, algs: dict[str, tuple[str, ...]], token: str) -> str:
    table = algs.get(coll)
    if not table:
        raise UccTuneError(token, f"{coll} has no algorithm to choose in this component")
    if alg.isdigit():
        if number(alg) >= len(table):
            raise UccTuneError(token, f"{coll} has no algorithm @{alg} (ids 0-"
                               f"{len(table) - 1}: {', '.join(table)})")
        return table[number(alg)]
    if alg.lower() not in table:
        raise UccTuneError(token, f"{coll} has no algorithm @{alg} (it has "
                           f"{', '.join(table)})")
    return alg.lower()


def apply(tokens: list[Token], team_size: int,
          algs: dict[str, tuple[str, ...]] = TL_UCP_ALGS) -> Applied:
    """The ranges the tokens set for a team of `team_size`, or UccTuneError where UCC
    refuses the string for that team (and so the component's whole tuning for it): an
    algorithm the collective lacks, and the last range of a token overlapping a range
    already set or not ending after its start. An earlier range of the same token that
    fails is dropped silently by UCC (only the last one's status is kept): said in
    `ignored`."""
    out = Applied()
    for t in tokens:
        if not t.for_team(team_size):
            continue
        if not t.acts():
            out.ignored.append(f"{t.text!r} has no score or @algorithm: UCC ignores it")
            continue
        for coll in t.colls or COLL_TYPES:
            alg = _alg_name(coll, t.alg, algs, t.text) if t.alg is not None else None
            for mem in t.mem_types or MEM_TYPES:
                have = out.ranges.setdefault((coll, mem), [])
                spans = t.ranges or ((0, INF),)
                for i, (lo, hi) in enumerate(spans):
                    why = _refused(have, lo, hi)
                    if why is None:
                        have.append((lo, hi, alg))
                        have.sort()
                    elif i == len(spans) - 1:
                        raise UccTuneError(t.text, f"{coll} ({mem}): {why}")
                    elif (said := f"{t.text!r}: {coll} {why}: UCC drops this range and "
                                  "reads on") not in out.ignored:  # once, not per memory type
                        out.ignored.append(said)
    return out


def _refused(have: list[tuple[int, int, str | None]], lo: int, hi: int) -> str | None:
    if lo >= hi:
        return f"range {lo}-{hi} does not end after its start"
    for a, b, _ in have:
        if lo < b and a < hi:
            return f"range {lo}-{hi} overlaps {a}-{b}"
    return None


def size_text(n: int) -> str:
    """A size as the shortest text UCX reads back exactly."""
    if n == INF:
        return "inf"
    for unit, k in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n and n % k == 0:
            return f"{n // k}{unit}"
    return str(n)


def render(choices: dict[str, list[tuple[int, str]]],
           teams: tuple[int, int] | None = None) -> str:
    """A string that runs, per collective, each (first size, algorithm) from its first
    size up to the next one's, the last up to every size (the first from 0 B); `teams`:
    the team sizes it is for (None: every team)."""
    tokens = []
    team = "" if teams is None else (
        f":[{teams[0]}-{'inf' if teams[1] >= TEAM_MAX else teams[1]}]")
    for coll, starts in sorted(choices.items()):
        starts = sorted(starts)
        for i, (first, alg) in enumerate(starts):
            lo = first if i else 0
            hi = starts[i + 1][0] if i + 1 < len(starts) else INF
            tokens.append(f"{coll}:{size_text(lo)}-{size_text(hi)}{team}:@{alg}")
    return "#".join(tokens)


def runs(applied: Applied, coll: str, size: int, mem: str = "host") -> str | None:
    """The algorithm a string chooses for a call of `size` B (UCC's message size), or None
    where it leaves the call to UCC's own choice."""
    for lo, hi, alg in applied.ranges.get((coll, mem), []):
        if lo <= size < hi or size == hi == INF:
            return alg
    return None


# a job's environment file of such strings (`NAME=VALUE` lines, `export ` allowed), and of
# tl/ucp's radix settings per range (RANGED_RADIX, below): how a site or a user hands them
# to UCC beside an application (`mpirun -x NAME` or the module)
_VAR = re.compile(r"(?:export\s+)?(UCC_(?:CL|TL)_[A-Z0-9]+_TUNE|UCC_TL_UCP_[A-Z_]+_KN_RADIX)"
                  r"=(.*)")
TL_UCP = "UCC_TL_UCP_TUNE"  # the component whose algorithms are in TL_UCP_ALGS
UCC_TUNE = safe.UCC_TUNE  # a tuning string's variable (UCC_TL_UCP_TUNE, ...)

# tl/ucp's radix settings per message range (UCC 1.8's UINT_RANGED variables, read by
# ucc_config_sscanf_uint_ranged in src/utils/ucc_parser.c): the variable, and the
# algorithm whose radix it sets. Each sees the message size the tuning string does (one
# rank's buffer; allgather: the whole receive buffer). Those colltune tunes and writes:
RADIX_VARS: dict[tuple[str, str], str] = {
    ("allreduce", "knomial"): "UCC_TL_UCP_ALLREDUCE_KN_RADIX",
    ("allgather", "knomial"): "UCC_TL_UCP_ALLGATHER_KN_RADIX",
    ("bcast", "sag_knomial"): "UCC_TL_UCP_BCAST_SAG_KN_RADIX",
}
# ... and those it reads and checks but does not tune: their ranges see a pipeline
# fragment's size, not the call's (allreduce's sra_knomial, reduce's srg)
RANGED_RADIX = frozenset({*RADIX_VARS.values(), "UCC_TL_UCP_ALLREDUCE_SRA_KN_RADIX",
                          "UCC_TL_UCP_REDUCE_SRG_KN_RADIX"})


def env_lines(text: str) -> list[tuple[int, str, str]] | None:
    """(line number, variable, string) of every setting line of an environment file of
    UCC tuning strings, quotes around a whole value removed; None: some setting line is
    no such string (not this format). Only lines starting with '#' are comments: a '#'
    inside a value separates its tokens."""
    out = []
    for no, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        m = _VAR.fullmatch(line)
        if m is None or not (UCC_TUNE.fullmatch(m.group(1)) or m.group(1) in RANGED_RADIX):
            return None
        value = m.group(2)
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out.append((no, m.group(1), value))
    return out or None


def team_spans(tokens: list[Token]) -> list[tuple[int, int]]:
    """The spans of team sizes (1 up to UCC's largest) over which the tokens act the same:
    a token starts or stops applying only at the bounds of its team ranges, so checking
    one size of each span checks every team size."""
    cuts = {1}
    for t in tokens:
        for lo, hi in t.teams:
            cuts.update(c for c in (lo, hi + 1) if 1 <= c <= TEAM_MAX)
    starts = sorted(cuts)
    return [(a, (starts[i + 1] - 1) if i + 1 < len(starts) else TEAM_MAX)
            for i, a in enumerate(starts)]

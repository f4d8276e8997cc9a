"""MVAPICH2 2.3.x environment profiles (`NAME = VALUE` config file or `export NAME=VALUE`):
writer and strict reader, with the rules MVAPICH2 itself does not check but crashes on."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from colltune.errors import FormatError, read_text
from colltune.rules.safe import ALLOWED, SAFE_VALUE, comment
from colltune.rules.shell_lines import setting_lines


@dataclass(frozen=True)
class TuningVar:
    collective: str
    algorithms: frozenset[int]
    indexed_flag: str | None  # MV2_USE_INDEXED_<C>_TUNING, None where no indexed table exists


def _v(coll: str, algs: range | list[int], flag: str | None) -> TuningVar:
    return TuningVar(coll, frozenset(algs), flag and f"MV2_USE_INDEXED_{flag}_TUNING")


# Algorithm numbers from MVAPICH2 2.3.7's switch statements (alltoall counts from 0).
TUNING_VARS: dict[str, TuningVar] = {
    "MV2_INTER_REDUCE_TUNING": _v("reduce", [1, 2, 5, 6, 8], "REDUCE"),
    "MV2_INTRA_REDUCE_TUNING": _v("reduce", [1, 3, 4], "REDUCE"),
    "MV2_INTER_ALLREDUCE_TUNING": _v("allreduce", [1, 2, 3, 4, 8, 9, 11], "ALLREDUCE"),
    "MV2_INTRA_ALLREDUCE_TUNING": _v("allreduce", [5, 6], "ALLREDUCE"),
    "MV2_INTER_BCAST_TUNING": _v("bcast", range(1, 11), "BCAST"),
    "MV2_INTRA_BCAST_TUNING": _v("bcast", [1, 2], "BCAST"),
    "MV2_INTER_GATHER_TUNING": _v("gather", [1, 2, 3], "GATHER"),
    "MV2_INTRA_GATHER_TUNING": _v("gather", [1, 2], "GATHER"),
    "MV2_INTER_SCATTER_TUNING": _v("scatter", range(1, 6), "SCATTER"),
    "MV2_INTRA_SCATTER_TUNING": _v("scatter", [1, 2], "SCATTER"),
    "MV2_INTER_ALLGATHER_TUNING": _v("allgather", range(1, 12), "ALLGATHER"),
    "MV2_ALLTOALL_TUNING": _v("alltoall", range(0, 5), "ALLTOALL"),
    "MV2_INTER_RED_SCAT_TUNING": _v("reduce_scatter", range(1, 6), None),
}
INDEXED_ALL = "MV2_USE_INDEXED_TUNING"
# numbers the single-index switch knows but the range parser does not: 2.3.7 silently runs
# its fallback (reduce: knomial) for them inside a range string
SINGLE_ONLY = {"MV2_INTER_REDUCE_TUNING": {8}}

_NAME = re.compile(r"MV2_[A-Z0-9_]+")
# the value is stripped after the match (a lazy value before `\s*$` is quadratic in blanks)
_LINE = re.compile(r"^(?:export\s+)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\s*=(?P<value>.*)$")
_RANGE = re.compile(r"([0-9]{1,9}):([0-9]{1,12})-([0-9]{1,12}|\+)")


@dataclass(frozen=True)
class Range:
    algorithm: int
    lo: int
    hi: int | None  # None: and above ("+")

    def render(self) -> str:
        return f"{self.algorithm}:{self.lo}-{'+' if self.hi is None else self.hi}"


@dataclass
class Profile:
    settings: dict[str, str] = field(default_factory=dict)  # in file order
    comments: list[str] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)  # where each name was read

    def set_ranges(self, var: str, ranges: list[Range]) -> None:
        """Set a tuning variable to a size table, with the switches that make MVAPICH2
        read it (indexed tuning on + a range string = every rank dies in MPI_Init)."""
        self.settings[var] = ",".join(r.render() for r in ranges)
        flag = TUNING_VARS[var].indexed_flag
        if flag:
            self.settings[INDEXED_ALL] = "0"
            self.settings[flag] = "0"

    def ranges(self, var: str) -> list[Range]:
        return parse_ranges(self.settings[var])


def parse_ranges(value: str) -> list[Range]:
    """A single index means that algorithm at every size."""
    if re.fullmatch(r"[0-9]{1,9}", value):
        return [Range(int(value), 0, None)]
    out = []
    for part in value.split(","):
        m = _RANGE.fullmatch(part.strip())
        if not m:
            raise ValueError(f"'{part}' is not ALG:MIN-MAX or ALG:MIN-+")
        out.append(Range(int(m[1]), int(m[2]), None if m[3] == "+" else int(m[3])))
    return out


def render(p: Profile, style: str = "conf") -> str:
    """`conf`: /etc/mvapich2.conf or $MV2_USER_CONFIG syntax; `env`: a shell fragment."""
    out = [f"# {comment(c)}" for c in p.comments]
    for name, value in p.settings.items():
        out.append(f"export {name}={value}" if style == "env" else f"{name} = {value}")
    return "\n".join(out) + "\n"


def _check_table(var: str, value: str, path: str, line: int) -> None:
    tv = TUNING_VARS[var]
    try:
        ranges = parse_ranges(value)
    except ValueError as e:
        raise FormatError(path, line, f"{var}: {e}") from None
    expect_lo = 0
    # without a comma MVAPICH2 reads the value as one number (atoi: "8:0-+" is 8)
    ranged = "," in value
    for i, r in enumerate(ranges):
        if r.algorithm not in tv.algorithms:
            raise FormatError(path, line, f"{var}: algorithm {r.algorithm} does not exist "
                              f"(valid: {', '.join(map(str, sorted(tv.algorithms)))})")
        if ranged and r.algorithm in SINGLE_ONLY.get(var, set()):
            raise FormatError(path, line, f"{var}: MVAPICH2 2.3.7 does not know {r.algorithm} "
                              "inside a range string and silently runs knomial; set it "
                              "alone (one number) or choose another algorithm")
        if r.lo != expect_lo:
            raise FormatError(path, line, f"{var}: range {r.render()} should start at "
                              f"{expect_lo} (ranges must cover every size in order)")
        if r.hi is None:
            if i != len(ranges) - 1:
                raise FormatError(path, line, f"{var}: only the last range may end in '+'")
        elif r.hi < r.lo:
            raise FormatError(path, line, f"{var}: range {r.render()} ends before it starts")
        else:
            expect_lo = r.hi + 1
    if ranges[-1].hi is not None:
        raise FormatError(path, line, f"{var}: the last range must end in '+' so every "
                          "size has an algorithm")


def parse(text: str, path: str = "<profile>") -> Profile:
    p = Profile()
    for no, line in setting_lines(text, p.comments):
        m = _LINE.match(line)
        if not m:
            raise FormatError(path, no, "expected NAME = VALUE (or export NAME=VALUE)")
        name, value = m["name"], m["value"].strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
            value = value[1:-1]
        if not _NAME.fullmatch(name):
            raise FormatError(path, no, f"{name} is not an MVAPICH2 (MV2_) variable")
        if name in p.settings:
            raise FormatError(path, no, f"{name} is set twice (first on line {p.lines[name]}); "
                              "which one wins depends on how the file is used")
        if not value:
            raise FormatError(path, no, f"{name} has no value")
        if name in TUNING_VARS:
            _check_table(name, value, path, no)
        elif name.startswith("MV2_USE_INDEXED_") and value not in ("0", "1"):
            raise FormatError(path, no, f"{name} must be 0 or 1")
        elif not SAFE_VALUE.fullmatch(value):
            raise FormatError(path, no, f"{name}: {value!r} has characters no MVAPICH2 "
                              f"variable takes (allowed: {ALLOWED}); exported profiles and "
                              "modules run in every user's session")
        p.settings[name] = value
        p.lines[name] = no
    for name, value in p.settings.items():
        tv = TUNING_VARS.get(name)
        if tv and tv.indexed_flag and not re.fullmatch(r"[0-9]+", value):
            for flag in (INDEXED_ALL, tv.indexed_flag):
                if p.settings.get(flag) != "0":
                    raise FormatError(path, p.lines[name], f"{name} has size ranges but "
                                      f"{flag} is not 0: MVAPICH2 2.3.x then crashes every "
                                      "rank in MPI_Init")
    return p


def lookup(p: Profile, var: str, size: int) -> int | None:
    """The algorithm MVAPICH2 runs for `size` (only each range's upper end matters)."""
    if var not in p.settings:
        return None
    for r in p.ranges(var):
        if r.hi is None or size <= r.hi:
            return r.algorithm
    return None


def read(path: str | Path) -> Profile:
    return parse(read_text(path), str(path))


def is_profile_text(text: str) -> bool:
    return any(re.match(r"\s*(export\s+)?MV2_", ln) for ln in text.splitlines())


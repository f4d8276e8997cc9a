"""MVAPICH 3.0 environment profiles (`export MVP_<COLL>_..._ALGO=NAME`): writer, reader, and
the conversion from an MVAPICH2 2.3 profile.

MVAPICH 3 names one algorithm per variable, with no message-size ranges, so an MVAPICH2 table
that changes algorithm with the size converts only at one chosen size. Names and numbers
are MVAPICH 3.0's enumerations and MVAPICH2 2.3.7's switch statements."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from colltune.rules import mvapich2 as mv2
from colltune.rules.safe import comment
from colltune.rules.shell_lines import setting_lines

TWO_LEVEL = "MVP_{}_TUNING_IS_TWO_LEVEL"


@dataclass(frozen=True)
class Target:
    variable: str
    names: dict[int, str]  # MVAPICH2 number -> MVAPICH 3 name
    two_level: frozenset[int] = frozenset()  # MVAPICH2 numbers that are two-level variants
    collective: str = ""


# MVAPICH2 variable -> where MVAPICH 3 takes the same choice
TARGETS: dict[str, Target] = {
    "MV2_INTER_REDUCE_TUNING": Target(
        "MVP_REDUCE_INTER_NODE_TUNING_ALGO",
        {1: "BINOMIAL", 2: "KNOMIAL", 5: "RED_SCAT_GATHER", 8: "ALLREDUCE"},
        collective="REDUCE"),
    "MV2_INTRA_REDUCE_TUNING": Target(
        "MVP_REDUCE_INTRA_NODE_TUNING_ALGO", {1: "BINOMIAL", 3: "KNOMIAL", 4: "SHMEM"},
        collective="REDUCE"),
    "MV2_INTER_ALLREDUCE_TUNING": Target(
        "MVP_ALLREDUCE_INTER_NODE_TUNING_ALGO",
        {1: "P2P_RD", 2: "P2P_RSA", 3: "MCAST_2LVL", 4: "MCAST_RSA", 8: "RSA", 9: "RING",
         11: "SOCK_AWARE"}, collective="ALLREDUCE"),
    "MV2_INTRA_ALLREDUCE_TUNING": Target(
        "MVP_ALLREDUCE_INTRA_NODE_TUNING_ALGO", {5: "SHMEM", 6: "P2P"},
        collective="ALLREDUCE"),
    "MV2_INTER_BCAST_TUNING": Target(
        "MVP_BCAST_INTER_NODE_TUNING_ALGO",
        {1: "BINOMIAL", 2: "BINOMIAL", 3: "SCATTER_DOUBLING_ALLGATHER",
         4: "SCATTER_DOUBLING_ALLGATHER", 5: "SCATTER_RING_ALLGATHER",
         6: "SCATTER_RING_ALLGATHER", 7: "SCATTER_RING_ALLGATHER_SHM", 8: "KNOMIAL",
         9: "PIPELINED"}, frozenset({2, 4, 6}), "BCAST"),
    "MV2_INTER_GATHER_TUNING": Target(
        "MVP_GATHER_INTER_NODE_TUNING_ALGO", {1: "BINOMIAL", 2: "DIRECT", 3: "2LVL_DIRECT"},
        collective="GATHER"),
    "MV2_INTER_SCATTER_TUNING": Target(
        "MVP_SCATTER_INTER_NODE_TUNING_ALGO",
        {1: "BINOMIAL", 2: "DIRECT", 3: "2LVL_BINOMIAL", 4: "2LVL_DIRECT", 5: "MCAST"},
        collective="SCATTER"),
    "MV2_INTER_ALLGATHER_TUNING": Target(
        "MVP_ALLGATHER_COLLECTIVE_ALGORITHM",
        {1: "RD_ALLGATHER_COMM", 2: "RD", 3: "BRUCK", 4: "RING", 5: "DIRECT",
         6: "DIRECTSPREAD", 7: "GATHER_BCAST", 8: "2LVL_NONBLOCKED", 9: "2LVL_RING_NONBLOCKED",
         10: "2LVL_DIRECT", 11: "2LVL_RING"}, collective="ALLGATHER"),
    "MV2_ALLTOALL_TUNING": Target(
        "MVP_ALLTOALL_COLLECTIVE_ALGORITHM",
        {0: "BRUCK", 1: "RD", 2: "SCATTER_DEST", 3: "PAIRWISE", 4: "INPLACE"},
        collective="ALLTOALL"),
}
VALID = {t.variable: set(t.names.values()) for t in TARGETS.values()}
TWO_LEVEL_VARS = {TWO_LEVEL.format(t.collective) for t in TARGETS.values()}


class ConversionError(ValueError):
    pass


@dataclass
class Profile:
    settings: dict[str, str] = field(default_factory=dict)
    comments: list[str] = field(default_factory=list)


def from_mvapich2(p: mv2.Profile, at_size: int | None = None) -> tuple[Profile, list[str]]:
    """The MVAPICH 3 choices of an MVAPICH2 profile, and what could not be carried over.
    A table that changes with the size converts at `at_size` only (required then)."""
    out = Profile(comments=list(p.comments))
    notes: list[str] = []
    for var, value in p.settings.items():
        if var not in mv2.TUNING_VARS:
            continue
        target = TARGETS.get(var)
        if target is None:
            notes.append(f"{var}: MVAPICH 3 has no variable for it; left out")
            continue
        ranges = p.ranges(var)
        algs = {r.algorithm for r in ranges}
        if len(algs) > 1:
            if at_size is None:
                raise ConversionError(
                    f"{var}={value} changes algorithm with the message size; MVAPICH 3 takes "
                    "one algorithm per variable: choose the size that matters (--for-size)")
            alg = mv2.lookup(p, var, at_size)
            assert alg is not None
            notes.append(f"{var}: table {value} converted at {at_size} B "
                         f"(algorithm {alg} there)")
        else:
            alg = algs.pop()
        name = target.names.get(alg)
        if name is None:
            notes.append(f"{var}: algorithm {alg} has no MVAPICH 3 counterpart; left out")
            continue
        out.settings[target.variable] = name
        if alg in target.two_level:
            out.settings[TWO_LEVEL.format(target.collective)] = "1"
    for var, value in p.settings.items():
        m = re.fullmatch(r"MV2_INTER_(\w+)_TUNING_TWO_LEVEL", var)
        if m is None or not value.isdigit() or int(value) < 1:
            continue
        # MVAPICH2 2.3.7 makes only a table's first entry two-level (colltune writes it
        # for the default's shared-memory path there): carried over where that entry
        # is the one converted
        inter = f"MV2_INTER_{m.group(1)}_TUNING"
        first = p.ranges(inter)[0] if inter in p.settings else None
        if first is not None and (len(p.ranges(inter)) == 1 or at_size is None
                                  or first.hi is None or at_size <= first.hi):
            out.settings[TWO_LEVEL.format(m.group(1))] = "1"
        else:
            notes.append(f"{var}: applies to the first range of {inter} only, not at "
                         f"{at_size} B; left out")
    return out, notes


def render(p: Profile) -> str:
    lines = [f"# {comment(c)}" for c in p.comments]
    lines += [f"export {k}={v}" for k, v in p.settings.items()]
    return "\n".join(lines) + "\n"


_LINE = re.compile(r"^(?:export\s+)?(MVP_\w+)\s*=\s*(\S+)$")


def parse(text: str) -> Profile:
    p = Profile()
    for n, line in setting_lines(text, p.comments):
        m = _LINE.match(line)
        if not m:
            raise ConversionError(f"line {n}: not `export MVP_NAME=VALUE`: {line!r}")
        name, value = m.group(1), m.group(2)
        if name in p.settings:
            raise ConversionError(f"line {n}: {name} is set twice")
        if name in VALID and value not in VALID[name]:
            raise ConversionError(f"line {n}: {name}={value} is not one of "
                                  + ", ".join(sorted(VALID[name])))
        if name in TWO_LEVEL_VARS and value not in ("0", "1"):
            raise ConversionError(f"line {n}: {name} must be 0 or 1")
        p.settings[name] = value
    return p

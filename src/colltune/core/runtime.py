"""Runtime parameters: job-wide settings a library reads when a job starts (binding, eager
limits, which collective component runs), declared by each family's catalog as `Knob`s, so
the search, its records and the writers take names, types, ranges and proofs from there
and never from a family's own vocabulary."""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass, field

from colltune.errors import ColltuneError

KINDS = ("int", "bool", "choice")
# how a job shows that it took a value: the MPI_T control variable of the same name read
# back in every rank; the CPUs each rank may run on (binding); nothing the library shows
# cvar: its control variable read back; affinity: the CPUs a rank may run on; component:
# its control variable and the library's own log of what it put in charge
PROOFS = ("cvar", "affinity", "component", "")
_SUFFIX = {"": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20}
# a value written into profiles, modules and parameter files: no quoting needed anywhere
_SAFE_VALUE = re.compile(r"[A-Za-z0-9_.:+,/-]{1,200}\Z")
_SAFE_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}\Z")


@dataclass(frozen=True)
class Knob:
    """One runtime parameter as the family's catalog declares it."""

    name: str  # the library's own name: the MCA parameter or environment variable
    kind: str  # int | bool | choice
    via: str  # how the family sets it, in its own word (Open MPI: mca, prte; others: env)
    values: tuple[str, ...]  # what a search tries by default (ints: powers of two)
    default: str  # what the library uses when nothing is set, as it reads it
    lo: int | None = None  # accepted range of an int (inclusive)
    hi: int | None = None
    choices: tuple[str, ...] = ()  # every value the library accepts for a choice
    proof: str = "cvar"
    affects: tuple[str, ...] = ()  # what it is known to change: "point-to-point", ...
    doc: str = ""
    # the library reads it in the launcher, not the ranks (binding): it must be in the
    # launcher's own environment, not passed to the ranks by the launcher's option
    launcher_reads: bool = False

    @property
    def has_cvar(self) -> bool:
        """Proven (also) by its control variable read back in every rank."""
        return self.proof in ("cvar", "component")

    def __post_init__(self) -> None:
        if self.kind not in KINDS or self.proof not in PROOFS:
            raise ValueError(f"knob {self.name}: kind/proof {self.kind}/{self.proof}")

    def parse(self, raw: str) -> str:
        """`raw` as the library reads this parameter (ints with k/m suffixes made bytes);
        anything the library would reject, or that could not be written safely into a
        profile, is a ColltuneError (exit 2) before any launch."""
        text = raw.strip()
        if self.kind == "int":
            m = re.fullmatch(r"(-?\d{1,18})\s*([a-zA-Z]*)", text)
            if not m or m.group(2).lower() not in _SUFFIX:
                raise ColltuneError(f"{self.name}={raw!r}: not an integer",
                                    f"give a number of bytes, e.g. {self.name}=4096 or 4k")
            v = int(m.group(1)) * _SUFFIX[m.group(2).lower()]
            if (self.lo is not None and v < self.lo) or (self.hi is not None and v > self.hi):
                raise ColltuneError(
                    f"{self.name}={raw}: outside {self.lo}..{self.hi}, what the library "
                    "accepts here", f"choose values between {self.lo} and {self.hi}")
            return str(v)
        if self.kind == "bool":
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                return "1"
            if low in ("0", "false", "no", "off"):
                return "0"
            raise ColltuneError(f"{self.name}={raw!r}: not a boolean", "use 0 or 1")
        if self.choices and text not in self.choices:
            raise ColltuneError(f"{self.name}={raw!r}: the library accepts only "
                                + ", ".join(self.choices), f"choose one of them for {self.name}")
        if not _SAFE_VALUE.match(text):
            raise ColltuneError(f"{self.name}={raw[:60]!r}: not a value colltune writes into "
                                "profiles", "use letters, digits and _ . : + , / -")
        return text


Setting = dict[str, str]  # knob name -> value as the library reads it


@dataclass
class Space:
    """The knobs a search varies and the values it tries for each."""

    knobs: list[Knob]
    values: dict[str, tuple[str, ...]] = field(default_factory=dict)

    def size(self) -> int:
        return math.prod(len(self.values[k.name]) for k in self.knobs)

    def default(self) -> Setting:
        return {k.name: k.default for k in self.knobs}

    def grid(self) -> list[Setting]:
        names = [k.name for k in self.knobs]
        return [dict(zip(names, combo, strict=True))
                for combo in itertools.product(*(self.values[n] for n in names))]


def changed(setting: Setting, space: Space) -> Setting:
    """What `setting` sets that differs from the library's own defaults."""
    base = space.default()
    return {k: v for k, v in setting.items() if base.get(k) != v}


def label(setting: Setting) -> str:
    return " ".join(f"{k}={v}" for k, v in sorted(setting.items())) or "library defaults"


def build_space(catalog: list[Knob], names: list[str], values: dict[str, list[str]],
                unknown: dict[str, Knob] | None = None) -> Space:
    """The search space of `--params` names (every catalog knob when empty) with the values
    `--param NAME=V,...` gave (else the catalog's); `unknown`: knobs the library itself
    vouched for although the catalog does not declare them (Open MPI's other MCA
    parameters). A name neither knows is refused with the closest ones."""
    known = {k.name: k for k in catalog} | (unknown or {})
    picked = list(dict.fromkeys([*names, *values])) or [k.name for k in catalog]
    space = Space([])
    for n in picked:
        if not _SAFE_NAME.match(n):
            raise ColltuneError(f"{n[:60]!r} is not a parameter name", "use NAME=V1,V2")
        knob = known.get(n)
        if knob is None:
            import difflib

            near = difflib.get_close_matches(n, list(known), n=3)
            raise ColltuneError(f"the library has no runtime parameter {n}"
                                + (f" (did you mean {', '.join(near)}?)" if near else ""),
                                "tune runtime --list shows the parameters colltune tunes")
        raw = values.get(n)
        vals = tuple(dict.fromkeys(knob.parse(v) for v in raw)) if raw else knob.values
        if knob.default not in vals:  # the library's own choice is always a candidate
            vals = (knob.default, *vals)
        space.knobs.append(knob)
        space.values[n] = vals
    return space


@dataclass(frozen=True)
class Allowed:
    """What a runtime file of one family may set: an allowlist (each family's runtime
    module holds one). A name is allowed when it is one of `names`, or starts with one of
    `prefixes` (the library's tuning frameworks: collectives, transports, binding) and
    names nothing that starts programs or loads code: no launcher, agent, component path,
    loader, prefix or file (`files`: the data files the format names, such as a rules
    file, are the exception)."""

    prefixes: tuple[str, ...]
    names: frozenset[str] = frozenset()
    files: frozenset[str] = frozenset()

    def __call__(self, name: str) -> bool:
        if name in self.names or name in self.files:
            return True
        low = name.lower()
        return (name.startswith(self.prefixes) and _SAFE_NAME.fullmatch(name) is not None
                and not any(w in low for w in _NEVER))

    def refused(self, names: list[str]) -> list[str]:
        return [n for n in names if not self(n)]


# words in a parameter's name that say it starts a program, finds code or reads a file
_NEVER = ("agent", "path", "prefix", "dir", "file", "exec", "launch", "cmd", "command",
          "script", "lib", "plugin", "component", "preload", "wrapper", "shell", "daemon",
          "rsh", "ssh", "debug", "tool")

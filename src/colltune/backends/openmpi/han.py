"""Open MPI 5's coll/han: its configurations, how to force one at launch, its rules file.

On communicators that span nodes han runs bcast, reduce, allreduce, allgather, gather and
scatter itself, as an intra-node step and an inter-node step. What can be chosen, and how
(checked on 5.0.11, see docs/launchers.md):

- per call size, through han's dynamic rules file: which component runs the collective on
  the whole communicator (han, or tuned: the flat algorithms) and, for han, which of its
  algorithms (`coll_han_use_<coll>_algorithm`: default, simple, ...);
- per collective only, as MCA variables: the modules of the levels the default (pipelined)
  algorithm uses: `coll_han_<coll>_up_module` (0 libnbc, 1 adapt between nodes) and
  `coll_han_<coll>_low_module` (0 tuned, 1 sm inside a node).

The file's intra/inter-node sections exist too, but 5.0.11 consults only the global one
for these collectives (its own verbose log shows no sub-level lookup), so they are not
written.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from colltune.backends.openmpi.install import OpenMPI, _run
from colltune.core.catalog import Catalog

# the collectives han implements itself (and colltune measures)
COLLECTIVES = ("allgather", "allreduce", "bcast", "gather", "reduce", "scatter")

# component ids of han's file and of coll_han_<coll>_dynamic_*_module
TUNED = 3
HAN = 6
MODULES = {"up": ("libnbc", "adapt"), "low": ("tuned", "sm")}


@dataclass(frozen=True)
class Choice:
    """One way han can run a collective: the flat tuned path, or han with one algorithm
    and one pair of level modules (0 = han's own default module)."""

    component: str  # "han" or "tuned"
    algorithm: str = "default"
    up: int = 0
    low: int = 0

    @property
    def label(self) -> str:
        if self.component == "tuned":
            return "tuned (flat)"
        mods = [f"{lvl}={MODULES[lvl][v]}" for lvl, v in (("up", self.up), ("low", self.low))
                if v]
        return " ".join([f"han:{self.algorithm}", *mods])

    @property
    def modules(self) -> tuple[int, int]:
        return self.up, self.low


BASELINE = Choice("han")  # what Open MPI 5 runs with nothing set


def parse_algorithms(text: str) -> dict[str, dict[int, str]]:
    """han's algorithms per collective from `ompi_info --param coll han --level 9
    --parsable` (enumerators of coll_han_use_<coll>_algorithm)."""
    out: dict[str, dict[int, str]] = {}
    pat = re.compile(r"^mca:coll:han:param:coll_han_use_(\w+?)_algorithm:enumerator:value:"
                     r"(\d+):(\S+)$")
    for line in text.splitlines():
        m = pat.match(line.strip())
        if m and m.group(1) in COLLECTIVES:
            out.setdefault(m.group(1), {})[int(m.group(2))] = m.group(3)
    return out


def read_algorithms(mpi: OpenMPI) -> dict[str, dict[int, str]]:
    return parse_algorithms(_run([str(mpi.ompi_info), "--param", "coll", "han", "--level",
                                 "9", "--parsable"], mpi.prefix))


def choices(coll: str, algorithms: dict[int, str]) -> dict[int, Choice]:
    """Configuration ids for one collective; 0 is the baseline (nothing set). The flat
    path, each han algorithm, then the default algorithm's level-module variants."""
    out: dict[int, Choice] = {0: BASELINE, 1: Choice("tuned")}
    for _, name in sorted(algorithms.items()):
        if name != "default":
            out[len(out)] = Choice("han", name)
    for up, low in ((1, 0), (0, 1), (1, 1)):
        out[len(out)] = Choice("han", "default", up, low)
    return out


def forcing(coll: str, choice: Choice, algorithms: dict[int, str]) -> dict[str, int]:
    """MCA variables (read at MPI_Init) that make Open MPI run `choice`."""
    if choice.component == "tuned":
        return {f"coll_han_{coll}_dynamic_global_communicator_module": TUNED}
    ids = {name: i for i, name in algorithms.items()}
    out: dict[str, int] = {}
    if choice.algorithm != "default":
        out[f"coll_han_use_{coll}_algorithm"] = ids[choice.algorithm]
    if choice.up:
        out[f"coll_han_{coll}_up_module"] = choice.up
    if choice.low:
        out[f"coll_han_{coll}_low_module"] = choice.low
    return out


@dataclass
class HanCatalog(Catalog):
    """A Catalog whose algorithm ids are han choices, each forced by launch variables."""

    choices: dict[str, dict[int, Choice]] = field(default_factory=dict)

    def choice(self, coll: str, alg: int) -> Choice:
        return self.choices.get(coll, {}).get(alg, BASELINE)


def catalog(algorithms: dict[str, dict[int, str]]) -> HanCatalog:
    cat = HanCatalog(source="coll/han")
    for coll in COLLECTIVES:
        if coll not in algorithms:
            continue
        ch = choices(coll, algorithms[coll])
        cat.choices[coll] = ch
        cat.algorithms[coll] = {i: c.label for i, c in ch.items() if i}
        cat.forcing[coll] = {i: forcing(coll, c, algorithms[coll]) for i, c in ch.items() if i}
    return cat


# ---------------------------------------------------------------------------
# han's dynamic rules file
# ---------------------------------------------------------------------------

class HanRulesError(ValueError):
    pass


# collective -> comm size -> [(first message size, choice)], ascending
HanRules = dict[str, dict[int, list[tuple[int, Choice]]]]


def _entry(choice: Choice) -> str:
    if choice.component == "tuned":
        return "tuned"
    return "han" if choice.algorithm == "default" else f"han @{choice.algorithm}"


def render(rules: HanRules, comments: list[str] | None = None) -> str:
    """han's file: collectives, then the global-communicator level, its comm sizes (the
    first must be 1, so the smallest tuned size starts at 1) and message-size rules (the
    first at 0). Sizes are the per-rank block in bytes, which is what han compares."""
    lines = [f"# {c}" for c in comments or []]
    colls = [c for c in sorted(rules) if rules[c]]
    lines.append(f"{len(colls)}  # collectives")
    for coll in colls:
        per_np = rules[coll]
        lines += [coll, "1  # topological levels", "global_communicator",
                  f"{len(per_np)}  # communicator sizes"]
        for i, np in enumerate(sorted(per_np)):
            sizes = per_np[np]
            lines += [f"{1 if i == 0 else np}  # np {np}", f"{len(sizes)}  # message sizes"]
            lines += [f"{start} {_entry(ch)}" for start, ch in sizes]
    return "\n".join(lines) + "\n"


def parse(text: str) -> HanRules:
    """Read back what `render` writes (global level only). The first communicator size
    is 1 in the file (han's rule); its `# np N` comment gives the size that was tuned."""
    toks: list[str] = []
    for line in text.splitlines():
        body, _, comment = line.partition("#")
        m = re.fullmatch(r"\s*np (\d{1,10})\s*", comment)
        toks += [m.group(1)] if m and body.split() == ["1"] else body.split()
    pos = 0

    def take() -> str:
        nonlocal pos
        if pos >= len(toks):
            raise HanRulesError("unexpected end of file")
        pos += 1
        return toks[pos - 1]

    def num() -> int:
        t = take()
        if not t.isdigit():
            raise HanRulesError(f"expected a number, got {t!r}")
        return int(t)

    out: HanRules = {}
    for _ in range(num()):
        coll = take()
        for _ in range(num()):
            level = take()
            if level not in ("global_communicator", "2"):
                raise HanRulesError(f"level {level!r} is not written by colltune")
            for _ in range(num()):
                np = num()
                rows: list[tuple[int, Choice]] = []
                for _ in range(num()):
                    start, comp = num(), take()
                    if comp == "han" and pos < len(toks) and toks[pos].startswith("@"):
                        alg = take()[1:] or take()
                        rows.append((start, Choice("han", alg)))
                    elif comp in ("han", "tuned"):
                        rows.append((start, Choice(comp)))
                    else:
                        raise HanRulesError(f"component {comp!r} is not han or tuned")
                out.setdefault(coll, {})[np] = rows
    if pos != len(toks):
        raise HanRulesError(f"trailing content: {' '.join(toks[pos:pos + 5])}")
    return out


def fragment_path(rules_path: Path) -> Path:
    """Where the MCA parameter file for a han rules file goes: beside it."""
    return rules_path.with_name(f"{rules_path.stem}-mca-params.conf")


def file_params(rules_path: Path, modules: dict[str, tuple[int, int]]) -> dict[str, str]:
    """The MCA variables that make Open MPI read the han file, plus the per-collective
    level modules (han has no per-size setting for them)."""
    params = {"coll_han_use_dynamic_file_rules": "1",
              "coll_han_dynamic_rules_filename": str(rules_path.resolve())}
    for coll, (up, low) in sorted(modules.items()):
        if up:
            params[f"coll_han_{coll}_up_module"] = str(up)
        if low:
            params[f"coll_han_{coll}_low_module"] = str(low)
    return params


def mca_fragment(rules_path: Path, modules: dict[str, tuple[int, int]]) -> str:
    """`file_params` as an MCA parameter file."""
    lines = ["# coll/han settings written by colltune --tune-han"]
    lines += [f"{k} = {v}" for k, v in file_params(rules_path, modules).items()]
    return "\n".join(lines) + "\n"


def fragment_modules(text: str) -> dict[str, tuple[int, int]]:
    """The level modules an MCA parameter file written by `mca_fragment` sets."""
    out: dict[str, tuple[int, int]] = {}
    for m in re.finditer(r"^coll_han_(\w+?)_(up|low)_module\s*=\s*(\d{1,10})\s*$", text, re.M):
        up, low = out.get(m.group(1), (0, 0))
        out[m.group(1)] = (int(m.group(3)), low) if m.group(2) == "up" else (up, int(m.group(3)))
    return out


def file_env(rules_path: Path, modules: dict[str, tuple[int, int]]) -> dict[str, str]:
    """`file_params` as environment variables (for a launch)."""
    return {f"OMPI_MCA_{k}": v for k, v in file_params(rules_path, modules).items()}

"""What a library can run: algorithms per collective and the parameters each one takes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from colltune.errors import ColltuneError

# the names under which the families here declare their algorithm parameters (a catalog
# may declare others: a configuration carries any name its catalog declares)
SEG, FAN, MAXREQ = "segsize", "fanout", "max_requests"  # coll/tuned's
RADIX, CHUNK = "radix", "chunk"  # MPICH's
# the segment (chunk) sizes a search measures when the user names none
SEGMENT_GRID = [0] + [1024 << i for i in range(8)]  # 0, 1 KiB .. 128 KiB


@dataclass(frozen=True)
class Param:
    """A tunable a configuration carries besides its algorithm, as a catalog declares it."""

    name: str  # in configuration keys and the store
    label: str  # the library's own word for it, in labels
    # a value at or above the message size does what 0 (no value) does: a segment as
    # large as the message is no segmentation, so the point is not measured
    below_message: bool = False


@dataclass
class Catalog:
    """Algorithms (id -> name) and settable parameters per collective, for one installation.

    The base declares no parameters; a family whose algorithms take some overrides
    `declared` and `param_values` (backends/openmpi/install.py, backends/mpich/install.py)."""

    algorithms: dict[str, dict[int, str]] = field(default_factory=dict)
    # collective -> the library's variables for its parameters (Open MPI's MCA names)
    variables: dict[str, set[str]] = field(default_factory=dict)
    source: str = "builtin"
    # collective -> id -> variables that force it at launch, for configurations that are
    # not one variable's value (coll/han's choices)
    forcing: dict[str, dict[int, dict[str, int]]] = field(default_factory=dict)
    # which table of cost formulas predicts its algorithms (models/formulas.TABLES; "":
    # none, so --predict and --strategy model cannot run on it)
    cost_model: str = ""

    def declared(self) -> tuple[Param, ...]:
        """Every parameter this library's configurations can carry, in the order labels
        and search models list them."""
        return ()

    def param_values(self, coll: str, alg: int, np: int, grid: dict[str, list[int]]
                ) -> dict[str, list[int]]:
        """The values worth measuring for each parameter algorithm `alg` takes at `np`
        ranks (0: the library's own value); `grid` holds the values a user asked for, by
        parameter name. A parameter the algorithm does not take is absent."""
        return {}

    def redundant(self, coll: str, alg: int, values: dict[str, int]) -> bool:
        """Whether a combination of values only repeats another one."""
        return False

    def runs_at(self, coll: str, alg: int, np: int) -> bool:
        """Whether algorithm `alg` is defined for a communicator of `np` ranks."""
        return True

    def grid(self, asked: Mapping[str, list[int]], segments: list[int] | None = None
             ) -> dict[str, list[int]]:
        """The values a search measures per parameter, where the user named some: `asked`
        by declared name (--param NAME=VALUES), `segments` for every segment-like parameter
        (--segsizes: coll/tuned's segment size, MPICH's chunk). A name this library does
        not declare is refused before anything runs."""
        names = [p.name for p in self.declared()]
        unknown = sorted(set(asked) - set(names))
        if unknown:
            raise ColltuneError(
                f"--param {unknown[0]}: not a parameter of this library's algorithms",
                f"its parameters: {', '.join(names)}" if names else
                "its algorithms take no parameter colltune can set")
        out = {n: list(v) for n, v in asked.items()}
        for p in self.declared():
            if segments is not None and p.below_message:
                out.setdefault(p.name, list(segments))
        return out

    def algorithm_name(self, coll: str, alg: int) -> str:
        if alg == 0:
            return "default"
        return self.algorithms.get(coll, {}).get(alg, f"algorithm {alg}")

    def param(self, name: str) -> Param:
        """The declaration of `name` (one this catalog does not declare: its own name)."""
        return next((p for p in self.declared() if p.name == name), Param(name, name))

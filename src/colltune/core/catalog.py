"""What a library can run: algorithms per collective and the parameters each one takes."""

from __future__ import annotations

from dataclasses import dataclass, field

# the tuning parameters a configuration can carry besides its algorithm
SEG, FAN, MAXREQ = "segsize", "fanout", "max_requests"


@dataclass
class Catalog:
    """Algorithms (id -> name) and settable parameters per collective, for one installation.

    The base takes no parameters; a family whose algorithms do overrides `uses` and the
    choices (backends/openmpi.py, backends/mpich.py)."""

    algorithms: dict[str, dict[int, str]] = field(default_factory=dict)
    # collective -> the library's variables for its parameters (Open MPI's MCA names)
    variables: dict[str, set[str]] = field(default_factory=dict)
    source: str = "builtin"
    # collective -> id -> variables that force it at launch, for configurations that are
    # not one variable's value (coll/han's choices)
    forcing: dict[str, dict[int, dict[str, int]]] = field(default_factory=dict)

    def has(self, coll: str, param: str) -> bool:
        return False

    def algorithm_name(self, coll: str, alg: int) -> str:
        if alg == 0:
            return "default"
        return self.algorithms.get(coll, {}).get(alg, f"algorithm {alg}")

    def uses(self, coll: str, alg: int, param: str) -> bool:
        return False

    def fanout_choices(self, coll: str, alg: int, np: int) -> list[int]:
        return [0]

    def segsize_choices(self, coll: str, alg: int, segsizes: list[int]) -> list[int]:
        return segsizes

    def param_label(self, param: str) -> str:
        """How a configuration's label names the parameter (this library's word for it)."""
        return {SEG: "seg", FAN: "fanout", MAXREQ: "maxreq"}[param]

"""The collectives colltune tunes: buffer semantics and the size Open MPI's rules compare
(its collective ids are its rules format's: rules/ompi_classic.COLLTYPE)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class SizeRule(Enum):
    """How Open MPI's coll/tuned turns a call into the size it looks up in a rules file."""

    BLOCK = "block"  # dtsize * count
    TOTAL = "total"  # dtsize * count * comm size
    DTSIZE_TIMES_P = "dtsize*p"  # scan, exscan: the count is ignored
    ZERO = "zero"  # alltoallv, barrier: always 0


@dataclass(frozen=True)
class Collective:
    """One MPI collective as the kernel measures it and Open MPI looks it up.

    `size` everywhere in colltune is the per-rank block in bytes: what one rank
    contributes (reduce, allgather, gather) or receives from one peer (alltoall,
    scatter). That is the number OSU prints; `lookup_size` converts it to what the
    rules file must hold.
    """

    name: str
    reduction: bool  # reductions use MPI_DOUBLE with MPI_SUM, the rest MPI_BYTE
    size_rule: SizeRule

    @property
    def granularity(self) -> int:
        """Smallest unit of a block in bytes (the datatype size)."""
        return 8 if self.reduction else 1

    @property
    def has_sizes(self) -> bool:
        return self.name != "barrier"

    @property
    def size_dependent(self) -> bool:
        """False when every call maps to the same rule, whatever its size."""
        return self.size_rule in (SizeRule.BLOCK, SizeRule.TOTAL)

    def lookup_size(self, size: int, np: int) -> int:
        """The message size Open MPI compares against MSGSIZE for a block of `size` bytes."""
        if self.size_rule is SizeRule.BLOCK:
            return size
        if self.size_rule is SizeRule.TOTAL:
            return size * np
        if self.size_rule is SizeRule.DTSIZE_TIMES_P:
            return self.granularity * np
        return 0

    def block_for_lookup(self, lookup: int, np: int) -> int:
        """A per-rank block whose lookup size is at least `lookup` (inverse of lookup_size)."""
        if self.size_rule is SizeRule.TOTAL:
            block = -(-lookup // np)
        else:
            block = lookup
        g = self.granularity
        return max(g, -(-block // g) * g)


# allgatherv's lookup divides the total by comm size, which for equal blocks is
# the block; reduce_scatter's is the sum of recvcounts, i.e. the total.
COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in (
        Collective("allgather", False, SizeRule.TOTAL),
        Collective("allgatherv", False, SizeRule.BLOCK),
        Collective("allreduce", True, SizeRule.BLOCK),
        Collective("alltoall", False, SizeRule.TOTAL),
        Collective("alltoallv", False, SizeRule.ZERO),
        Collective("barrier", False, SizeRule.ZERO),
        Collective("bcast", False, SizeRule.BLOCK),
        Collective("exscan", True, SizeRule.DTSIZE_TIMES_P),
        Collective("gather", False, SizeRule.TOTAL),
        Collective("reduce", True, SizeRule.BLOCK),
        Collective("reduce_scatter", True, SizeRule.TOTAL),
        Collective("reduce_scatter_block", True, SizeRule.TOTAL),
        Collective("scan", True, SizeRule.DTSIZE_TIMES_P),
        Collective("scatter", False, SizeRule.TOTAL),
    )
}


def get_collective(name: str) -> Collective:
    from colltune.errors import ColltuneError

    try:
        return COLLECTIVES[name]
    except KeyError:
        raise ColltuneError(
            f"unknown collective '{name}'",
            "choose one of: " + ", ".join(sorted(COLLECTIVES)) + ", or 'all'",
        ) from None

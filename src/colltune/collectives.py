"""The collectives colltune tunes and their buffer semantics. What size a library's rules
compare is the family's to say (Backend.rule_size; Open MPI's in rules/ompi_classic)."""

from __future__ import annotations

from dataclasses import dataclass, replace

# what a reduction can sum, and each element's size in bytes: the kernel's `datatype`
# (kernel/bench/bench_colls.c). A library decides by the bytes a call moves and by how many
# elements it holds: 8 B of chars (as OSU sums by default) may run another algorithm than
# one double (docs/methodology.md, "The datatype")
DATATYPES = {"double": 8, "float": 4, "int": 4, "char": 1}


@dataclass(frozen=True)
class Collective:
    """One MPI collective as the kernel measures it.

    `size` everywhere in colltune is the per-rank block in bytes: what one rank
    contributes (reduce, allgather, gather) or receives from one peer (alltoall,
    scatter). That is the number OSU prints; each family converts it to what its own
    rules compare (Backend.rule_size).
    """

    name: str
    reduction: bool  # reductions sum `datatype` with MPI_SUM, the rest move MPI_BYTE
    np_blocks: bool  # a rank's send or receive buffer holds one block per rank
    # decided per message size; False: one decision for every size (barrier has none;
    # coll/tuned looks scan, exscan and alltoallv up without their size)
    size_dependent: bool = True
    datatype: str = "double"  # what a reduction sums (DATATYPES); nothing else reads it

    @property
    def granularity(self) -> int:
        """Smallest unit of a block in bytes (the datatype size)."""
        return DATATYPES[self.datatype] if self.reduction else 1

    def summing(self, datatype: str) -> Collective:
        """This collective as measured summing `datatype` (itself where it sums nothing)."""
        return replace(self, datatype=datatype) if self.reduction else self

    @property
    def datatype_key(self) -> str:
        """What an installation key gains for points of a reduction summing another
        datatype than double: another call to the library, kept apart in the store."""
        return f"~datatype={self.datatype}" if self.reduction and self.datatype != "double" \
            else ""

    @property
    def has_sizes(self) -> bool:
        return self.name != "barrier"


COLLECTIVES: dict[str, Collective] = {
    c.name: c
    for c in (
        Collective("allgather", False, True),
        Collective("allgatherv", False, True),
        Collective("allreduce", True, False),
        Collective("alltoall", False, True),
        Collective("alltoallv", False, True, size_dependent=False),
        Collective("barrier", False, False, size_dependent=False),
        Collective("bcast", False, False),
        Collective("exscan", True, False, size_dependent=False),
        Collective("gather", False, True),
        Collective("reduce", True, False),
        Collective("reduce_scatter", True, True),
        Collective("reduce_scatter_block", True, True),
        Collective("scan", True, False, size_dependent=False),
        Collective("scatter", False, True),
    )
}


# the message sizes a tune decides: a rules file's ranges start at 1 B (a call of 0 B moves
# nothing, and the library runs it as it likes), and 2 GiB is MPI's int count of bytes
MIN_SIZE, MAX_SIZE = 1, 1 << 31


def tunable_size(nbytes: int) -> bool:
    """Whether a tune decides calls of `nbytes` per rank."""
    return MIN_SIZE <= nbytes <= MAX_SIZE


def get_collective(name: str) -> Collective:
    from colltune.errors import ColltuneError

    try:
        return COLLECTIVES[name]
    except KeyError:
        raise ColltuneError(
            f"unknown collective '{name}'",
            "choose one of: " + ", ".join(sorted(COLLECTIVES)) + ", or 'all'",
        ) from None

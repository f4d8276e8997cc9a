"""How Open MPI 6 reads a classic rules file's communicator-size sections: as ranges below
each section's size, where 4.1 and 5.0 take the last section at or below the size (read
from its source; docs/openmpi.md). The same file, another meaning: `tune check` says where."""

from __future__ import annotations

from colltune.rules.ompi_classic import CommRule, RulesFile, served


def served_v6(sections: list[CommRule]) -> list[tuple[CommRule, int, int | None]]:
    """Each section with the communicator sizes Open MPI 6 decides with it. Its classic
    reader (coll_tuned_dynamic_file.c since e973840e2b, 2025-02-17) makes each section a
    range: the first from 0 to its COMSIZE - 1, each next one from the previous COMSIZE to
    its own COMSIZE - 1, the last from the previous COMSIZE up (a lone one: every size), and
    the lookup takes the first range holding the size (docs/openmpi.md)."""
    out: list[tuple[CommRule, int, int | None]] = []
    for i, sec in enumerate(sections):
        lo = 0 if i == 0 else sections[i - 1].comsize
        last = i == len(sections) - 1
        out.append((sec, lo, None if last else sec.comsize - 1))
    return out


def v6_warnings(rf: RulesFile) -> list[str]:
    """Where Open MPI 6 decides communicator sizes with another section than 4.1 and 5.0
    do (the same file, another meaning)."""
    def span(lo: int, hi: int | None) -> str:
        lo = max(lo, 1)
        if hi is not None and hi < lo:
            return "no communicator"
        if hi is None:
            return f"communicators of {lo} rank(s) and more"
        return (f"communicators of {lo} rank(s)" if hi == lo
                else f"communicators of {lo} to {hi} ranks")

    out = []
    for cid, secs in sorted(rf.collectives.items()):
        for (sec, lo5, hi5), (_, lo6, hi6) in zip(served(secs), served_v6(secs)):
            if span(lo5, hi5) != span(lo6, hi6):
                out.append(f"collective {cid}: Open MPI 6 applies the section for "
                           f"{sec.comsize} rank(s) to {span(lo6, hi6)} (4.1 and 5.0: "
                           f"{span(lo5, hi5)})")
    return out

"""Speed-ups too large to be a better algorithm: flag them with their likely cause.

On 2 cores, 4 ranks of a library whose ranks busy-poll make its default wait for scheduler
ticks: MPICH 5.0.2's default reduce took 10-1560 ms per call where forced algorithms took
19 us-2.4 ms, and the "speed-ups" of 500-2600x were written as tuned rules. On a node with
a core per rank the default does not wait for a tick, so such a gap says nothing about the
cluster the rules are for. The decision stands (it was measured), with a warning wherever
its numbers are shown: tables, summary, report."""

from __future__ import annotations

from colltune.core.config import DEFAULT
from colltune.core.records import Decision

ARTIFACT_SPEEDUP = 10.0  # default / best in the sweep, from which a win is suspect


def flag(ds: list[Decision], ppn: int, cores: int | None, cause: str) -> None:
    """Sets `warning` on decisions whose sweep speed-up is ARTIFACT_SPEEDUP or more.
    `cores`: of the node the ranks ran on, where known."""
    for d in ds:
        sp = (d.default_median / d.best_median if d.best_median and d.default_median
              and d.best not in (None, DEFAULT) else 1.0)
        if sp < ARTIFACT_SPEEDUP:
            continue
        why = f" ({cause})" if cause else ""
        if cores is not None and ppn > cores:
            d.warning = (f"{sp:.0f}x over the default with {ppn} ranks on {cores} cores: a "
                         f"scheduling artifact of oversubscription{why}, not a win a node "
                         "with a core per rank will see; tune there before using this rule")
        else:
            d.warning = (f"{sp:.0f}x over the default is rarely a better algorithm: check it "
                         f"on a node with a core per rank before trusting it{why}")

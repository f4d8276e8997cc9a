"""What the store already knows of an installation's candidates, as tune online's plan
lines: a candidate measured clearly slower than the fastest configuration at a
communicator size and size bucket is not explored there (`skip COLL ID NP BUCKET`), so a
run spends its share of calls on the candidates still in question."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from colltune.store import Store

# a candidate this many times slower is clearly slower: skipped here, and dropped by the
# layer while it explores (apploop/online.plan_text's `drop`)
SLOWER = 1.5
# a point with fewer samples says too little to skip a candidate on
MIN_SAMPLES = 5
NBUCKET = 48  # kernel/collonline.c's size buckets


def bucket_of(nbytes: int) -> int:
    """The layer's size bucket of a call of `nbytes` per rank: floor(log2) + 1, 0 for 0."""
    return min(max(nbytes, 0).bit_length(), NBUCKET - 1)


def known_medians(db: Path, mpi_key: str, collectives: set[str]
                  ) -> dict[tuple[str, int, int], dict[int, float]]:
    """(collective, communicator size, bucket) -> algorithm -> its fastest median there,
    from every point the store holds for this installation: the kernel's, the
    application's replayed arrival's, earlier online runs' (whatever follows `~` in the
    key). The algorithm's best variant counts: the layer tries the library's own
    parameters, so a skip is never for a variant it would not run. A point stored invalid
    (a wrong answer, the kernel's or the layer's check) counts as infinitely slow."""
    out: dict[tuple[str, int, int], dict[int, float]] = defaultdict(dict)
    if not db.is_file():
        return out
    base = mpi_key.split("~", 1)[0]
    store = Store(db, readonly=True)
    try:
        for ctx in store.contexts():
            if ctx.mpi_key.split("~", 1)[0] != base or ctx.collective not in collectives:
                continue
            for m in store.measurements(ctx):
                at = out[(ctx.collective, ctx.np, bucket_of(m.size))]
                alg = m.config.algorithm
                if m.status == "invalid":  # a wrong answer: as slow as can be, unless it
                    at.setdefault(alg, math.inf)  # answered right at another size there
                    continue
                if m.status != "ok" or m.median is None or m.n < MIN_SAMPLES:
                    continue
                at[alg] = min(at.get(alg, m.median), m.median)
    finally:
        store.close()
    return out


def skip_lines(db: Path, mpi_key: str, candidates: dict[str, list[int]]) -> list[str]:
    """The plan's `skip` lines: each candidate the store measured over SLOWER times the
    fastest configuration of its (collective, communicator size, bucket). A candidate
    never measured there stays: what the store does not know, the run explores."""
    lines = []
    known = known_medians(db, mpi_key, set(candidates))
    for (coll, np, bucket), medians in sorted(known.items()):
        fastest = min(medians.values())
        if math.isinf(fastest):  # nothing there answered right: nothing to compare with
            continue
        lines += [f"skip {coll} {alg} {np} {bucket}" for alg in candidates.get(coll, [])
                  if alg in medians and medians[alg] > SLOWER * fastest]
    return lines

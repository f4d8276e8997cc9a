"""What the store already knows of an installation's candidates, as tune online's plan
lines: a candidate measured clearly slower than the fastest configuration at a
communicator size and size bucket is not explored there (`skip COLL ID NP BUCKET`), so a
run spends its share of calls on the candidates still in question."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from colltune.core.config import Config
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
                  ) -> dict[tuple[str, int, int], dict[Config, float]]:
    """(collective, communicator size, bucket) -> configuration -> its fastest median
    there, from every point the store holds for this installation: the kernel's, the
    application's replayed arrival's, earlier online runs' (whatever follows `~` in the
    key). A point stored invalid (a wrong answer, the kernel's or the layer's check) counts
    as infinitely slow."""
    out: dict[tuple[str, int, int], dict[Config, float]] = defaultdict(dict)
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
                if m.status == "invalid":  # a wrong answer: as slow as can be, unless it
                    at.setdefault(m.config, math.inf)  # answered right at another size
                    continue
                if m.status != "ok" or m.median is None or m.n < MIN_SAMPLES:
                    continue
                at[m.config] = min(at.get(m.config, m.median), m.median)
    finally:
        store.close()
    return out


def _median_of(cfg: Config, medians: dict[Config, float]) -> float | None:
    """What the store says of `cfg`: its own median, or, for an algorithm run with the
    library's own parameters, its best variant's (the layer runs it so: a skip is never
    for a variant it would not run); None: never measured there."""
    if cfg in medians:
        return medians[cfg]
    if cfg.params:
        return None
    same = [m for c, m in medians.items() if c.algorithm == cfg.algorithm]
    return min(same) if same else None


def skip_lines(db: Path, mpi_key: str, candidates: dict[str, dict[int, Config]]
               ) -> list[str]:
    """The plan's `skip` lines: each candidate (the plan's id -> what it runs, per
    collective) the store measured over SLOWER times the fastest configuration of its
    (collective, communicator size, bucket). A candidate never measured there stays: what
    the store does not know, the run explores."""
    lines = []
    known = known_medians(db, mpi_key, set(candidates))
    for (coll, np, bucket), medians in sorted(known.items(), key=lambda kv: kv[0]):
        fastest = min(medians.values())
        if math.isinf(fastest):  # nothing there answered right: nothing to compare with
            continue
        for ident, cfg in sorted(candidates.get(coll, {}).items()):
            m = _median_of(cfg, medians)
            if ident and m is not None and m > SLOWER * fastest:
                lines.append(f"skip {coll} {ident} {np} {bucket}")
    return lines

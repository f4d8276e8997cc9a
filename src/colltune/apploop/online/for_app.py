"""What tune app takes from online tuning, and the one module of apploop/online/ it imports:
what tune online's runs of an application found in its own calls. A configuration that
answered wrong there, or ran clearly slower than the library's choice launch by launch, at
a size the application calls, is not measured again at that size."""

from __future__ import annotations

from pathlib import Path

from colltune.apploop.online.known import MIN_SAMPLES, SLOWER, bucket_of, online_key
from colltune.core.config import DEFAULT
from colltune.core.plan import Excluded
from colltune.core.stats import stratified_ratio
from colltune.store import Context, Measurement, Store

# what tune app names of online tuning: the key of a command's runs, the threshold
__all__ = ["SLOWER", "excluded_for", "online_key"]


def _slower(m: Measurement, library: Measurement | None) -> bool:
    """Wrong there, or over SLOWER times the library's choice by each launch's own
    medians (van Elteren's weights, core/stats.stratified_ratio): launches here differ by
    more than candidates do, so pooled medians are never compared."""
    if m.status == "invalid":
        return True
    if m.status != "ok" or m.n < MIN_SAMPLES or library is None or library.status != "ok":
        return False
    ratio = stratified_ratio(m.by_launch(), library.by_launch())
    return ratio is not None and ratio > SLOWER


def excluded_for(db: Path, key: str, collective: str, comm_size: int,
                 layout: tuple[int, int] | None, sizes: list[int]) -> Excluded:
    """(collective, communicator size, configuration key, size) for each of `sizes` whose
    size bucket the runs under `key` found a configuration wrong or clearly slower in,
    at `comm_size` ranks in `layout` (nodes, ranks a node; None: any). The library's own
    choice is never left out."""
    if not db.is_file():
        return frozenset()
    out: set[tuple[str, int, str, int]] = set()
    store = Store(db, readonly=True)
    try:
        for ctx in _contexts(store, key, collective, comm_size, layout):
            by_bucket: dict[int, list[Measurement]] = {}
            for m in store.measurements(ctx):
                by_bucket.setdefault(bucket_of(m.size), []).append(m)
            for size in sizes:
                points = by_bucket.get(bucket_of(size), [])
                library = next((m for m in points if m.config == DEFAULT), None)
                out |= {(collective, comm_size, m.config.key, size) for m in points
                        if m.config != DEFAULT and _slower(m, library)}
    finally:
        store.close()
    return frozenset(out)


def _contexts(store: Store, key: str, collective: str, comm_size: int,
              layout: tuple[int, int] | None) -> list[Context]:
    return [c for c in store.contexts() if c.mpi_key == key and c.collective == collective
            and c.np == comm_size and (layout is None or (c.nodes, c.ppn) == layout)]

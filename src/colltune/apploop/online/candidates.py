"""tune online's candidates: every algorithm of the family's catalog for the collectives
the layer wraps, and its segment-size variants, as the plan's `cand` lines with the ids
the layer reports them by."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from colltune.backends.base import Backend
from colltune.collectives import get_collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.errors import ColltuneError

MAX_CANDIDATES = 39  # kernel/online/online.h's MAXC, less the library's own choice
# what the layer wraps (kernel/online/collonline.c's NAMES): every other call passes untouched
COLLECTIVES = ("allreduce", "bcast", "reduce", "allgather", "alltoall", "barrier")


# segment sizes tried beside each segmenting algorithm's run without segments (what it
# runs with the library's own parameters when forced): small, middle and large; each only
# on calls larger than itself (one segment would be the unsegmented run again)
SEGMENTS = (1024, 8192, 65536)
VARIANT_IDS = 1000  # a variant's plan id: this plus its place among its collective's


@dataclass(frozen=True)
class Candidate:
    """One line of the layer's plan: what it sets and the id the layer reports it by."""

    collective: str
    ident: int  # the algorithm's number for its library-parameter run; VARIANT_IDS + n
    config: Config
    writes: dict[str, int]
    below: int = 0  # its segment size: never tried on calls of this many bytes or fewer

    def line(self) -> str:
        return (f"cand {self.collective} {self.ident} {len(self.writes)} "
                + " ".join(f"{k} {int(v)}" for k, v in self.writes.items())
                + (f" below {self.below}" if self.below else ""))


def _variants(catalog: Catalog, name: str, alg: int) -> list[tuple[Config, int]]:
    """Algorithm `alg` with the library's own parameters, then with each of SEGMENTS for a
    segment-like parameter it takes (its segment size beside it)."""
    takes = catalog.param_values(name, alg, 4, {})
    segs = [p.name for p in catalog.declared() if p.below_message and p.name in takes]
    return [(Config(alg), 0)] + [(Config.of(alg, {p: v}), v) for p in segs for v in SEGMENTS]


def candidates(backend: Backend[Any], catalog: Catalog) -> list[Candidate]:
    """Every algorithm the catalog lists for a wrapped collective, with the control
    variables that force it, and its segment-size variants."""
    out = []
    for name in COLLECTIVES:
        coll = get_collective(name)
        n = 0
        for alg in sorted(a for a in catalog.algorithms.get(name, {}) if a > 0):
            for cfg, below in _variants(catalog, name, alg):
                writes = backend.mpit_vars(catalog, coll, cfg)
                if not writes or len(writes) > 6:
                    continue
                for var in writes:
                    if not var.replace("_", "").isalnum():
                        raise ColltuneError(f"a control variable named {var!r} cannot go "
                                            "into the layer's plan", "report this")
                ident = alg if not cfg.params else VARIANT_IDS + n
                n += bool(cfg.params)
                out.append(Candidate(name, ident, cfg, writes, below))
    return _fit(out)


def _fit(cands: list[Candidate]) -> list[Candidate]:
    """At most the layer's MAXC - 1 candidates per collective (kernel/online/online.h): the
    library-parameter runs first, then the variants in order."""
    kept: dict[str, int] = defaultdict(int)
    out = []
    for c in sorted(cands, key=lambda c: (c.collective, bool(c.config.params))):
        if kept[c.collective] < MAX_CANDIDATES:
            kept[c.collective] += 1
            out.append(c)
    return out


def ids_of(cands: list[Candidate]) -> dict[str, dict[int, Config]]:
    """Per collective, the plan's id -> the configuration it runs (0: the library's)."""
    out: dict[str, dict[int, Config]] = defaultdict(lambda: {0: DEFAULT})
    for c in cands:
        out[c.collective][c.ident] = c.config
    return dict(out)

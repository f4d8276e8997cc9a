"""Configurations (an algorithm and its catalog-declared parameters) and the grid over
them; message sizes."""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping

from colltune.collectives import Collective
from colltune.core.catalog import Catalog
from colltune.core.config import DEFAULT, Config
from colltune.errors import ColltuneError

# per-rank block sizes; reductions need a multiple of 8 (one double)
# every power of two from 4 B to 1 MiB per rank: a rule between two measured sizes is a
# guess (issue 21), and with the MPI_T sweep 19 sizes cost little more than 8
DEFAULT_SIZES = [1 << k for k in range(2, 21)]
# a rank never allocates more than this for one point (alltoall: np blocks)
MAX_BUFFER_BYTES = 256 << 20




def parse_size(text: str) -> int:
    m = re.fullmatch(r"\s*(\d+)\s*([kKmMgG]?)(i?[bB])?\s*", text)
    if not m:
        raise ColltuneError(f"cannot read size '{text}'", "write sizes like 8, 4K, 1M (bytes)")
    mult = {"": 1, "k": 1024, "m": 1 << 20, "g": 1 << 30}[m.group(2).lower()]
    return int(m.group(1)) * mult


def parse_sizes(text: str) -> list[int]:
    """A list (`8,4K,1M`), OSU's range form (`4:1M`: every power of two between, from the
    first), or both (`8,64K:1M`)."""
    out: set[int] = set()
    for t in (t for t in text.split(",") if t.strip()):
        if ":" not in t:
            out.add(parse_size(t))
            continue
        lo, _, hi = t.partition(":")
        a, b = parse_size(lo), parse_size(hi)
        if a < 1 or b < a:
            raise ColltuneError(f"cannot read size range '{t}'",
                                "write it as FIRST:LAST with 0 < FIRST <= LAST, e.g. 4:1M")
        while a <= b:
            out.add(a)
            a *= 2
    return sorted(out)


def parse_params(texts: list[str]) -> dict[str, list[int]]:
    """--param NAME=VALUES, repeated: the values (sizes or counts, 0: the library's own)
    a search measures for a parameter the installation's catalog declares."""
    out: dict[str, list[int]] = {}
    for t in texts:
        name, eq, values = t.partition("=")
        name = name.strip()
        if not eq or not re.fullmatch(r"[a-z][a-z0-9_]*", name) or not values.strip():
            raise ColltuneError(f"cannot read --param '{t}'",
                                "write NAME=VALUES, e.g. --param radix=0,2,4 or "
                                "--param chunk=0,4K")
        if name in out:
            raise ColltuneError(f"--param {name} is given twice", "give each name once")
        out[name] = sorted({parse_size(v) for v in values.split(",") if v.strip()})
    return out


def configurations(coll: Collective, catalog: Catalog, np: int,
                   grid: Mapping[str, list[int]] | None = None) -> list[Config]:
    """Every configuration of the grid, the library default first: each algorithm with
    every combination of the values its catalog offers for the parameters it takes
    (`grid`: the values a user asked for, by parameter name)."""
    out = [DEFAULT]
    for alg in sorted(catalog.algorithms.get(coll.name, {})):
        if not catalog.runs_at(coll.name, alg, np):
            continue
        axes = catalog.param_values(coll.name, alg, np, dict(grid or {}))
        for combo in itertools.product(*axes.values()):
            values = dict(zip(axes, combo, strict=True))
            if not catalog.redundant(coll.name, alg, values):
                out.append(Config.of(alg, values))
    return out


def useful_at(cfg: Config, size: int, catalog: Catalog) -> bool:
    """False when the point would only repeat another: a segment at least as large as
    the message is no segmentation at all."""
    return not any(p.below_message and 0 < cfg.get(p.name) and cfg.get(p.name) >= size
                   for p in catalog.declared())


def sizes_for(coll: Collective, np: int, sizes: list[int] | None = None) -> list[int]:
    if not coll.has_sizes:
        return [0]
    g = coll.granularity
    # a reduction of chars makes calls of 1 and 2 B, which the file's first rule would
    # otherwise answer for unmeasured: its default sizes start at one element
    first = min(g, DEFAULT_SIZES[0]) if coll.reduction else DEFAULT_SIZES[0]
    chosen = [1 << k for k in range(DEFAULT_SIZES[-1].bit_length()) if 1 << k >= first] \
        if sizes is None else sizes
    rounded = sorted({max(g, -(-s // g) * g) for s in chosen})
    per_rank_blocks = np if coll.np_blocks else 1
    return [s for s in rounded if s * per_rank_blocks <= MAX_BUFFER_BYTES]

"""What the cost model says of tune online's candidates, as plan lines: at each
communicator size the launch can make and each size bucket, a segment-size variant the
model ranks below its own algorithm's best variant (and outside its few fastest overall) is
not explored there (`skip COLL ID NP BUCKET`), so the first round of a group's halving
gives its calls to fewer candidates.

Why only variants: on a node, algorithms differ by less than the models' error, so the
model's order across algorithms is often wrong, while between the variants of one
algorithm (the same pattern, more or less pipelined) it ranks far better
(docs/benchmarks.md, "Cost models"); it is `--strategy model`'s shortlist
(tuner/guided.shortlist), so every algorithm stays in question."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.apploop.online.candidates import SEGMENTS
from colltune.collectives import get_collective
from colltune.core.catalog import Catalog
from colltune.core.config import Config
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError
from colltune.store import Store

if TYPE_CHECKING:  # numpy and scipy, which the models need, only where a model is used
    from colltune.models.predict import Models

TOP_K = 3  # as `--strategy model`'s --top-k: the k predicted fastest stay too
# the size buckets judged: from the smallest segment's (below it no variant is tried) to
# 16 GiB a rank (a count is an int: 2^31 elements of 8 bytes); larger calls explore all
FIRST_BUCKET = min(SEGMENTS).bit_length()
LAST_BUCKET = 34
SMALL = range(2, 9)  # communicator sizes every launch may make (pairs, a node's few)
MAX_LINES = 12288  # kernel/online/online.h's MAXSKIP (16384), less room for the store's lines
_COUNT = {"-np", "--np", "-n", "--n", "-c"}  # mpirun / mpiexec (Open MPI, Hydra)


def world_size(cmd: list[str], environ: dict[str, str] | None = None) -> int | None:
    """The ranks a launch starts, from its own options (the first count it gives; srun's
    allocation when it gives none); None: it does not say. A wrong guess only moves which
    communicator sizes the model's lines are for: a group of another size explores every
    candidate."""
    env = os.environ if environ is None else environ
    srun = bool(cmd) and Path(cmd[0]).name == "srun"
    for i, arg in enumerate(cmd[1:], 1):
        key, eq, val = arg.partition("=")
        if srun and arg.startswith("-n") and arg[2:].isdigit():
            return int(arg[2:])
        if key in ({"-n", "--ntasks"} if srun else _COUNT):
            given = val if eq else (cmd[i + 1] if i + 1 < len(cmd) else "")
            return int(given) if given.isdigit() and int(given) > 0 else None
    tasks = env.get("SLURM_NTASKS", "") if srun else ""
    return int(tasks) if tasks.isdigit() and int(tasks) > 0 else None


def comm_sizes(world: int) -> list[int]:
    """The world first, then every divisor of it (an application splits its ranks evenly:
    pools, rows, nodes) and the small sizes, largest first."""
    # by pairs up to the square root: a launch's count is the user's, however large
    low = [d for d in range(1, int(world ** 0.5) + 1) if world % d == 0]
    divisors = {x for d in low for x in (d, world // d)} - {1}
    return [world, *sorted((divisors | {p for p in SMALL if p <= world}) - {world},
                           reverse=True)]


def model_lines(db: Path, mpi: Installation, catalog: Catalog,
                candidates: dict[str, dict[int, Config]], world: int,
                note: Callable[[str], None]) -> list[str]:
    """The plan's `skip` lines the model gives (above); none, said once, where the store
    holds no fit for this installation on this host or the catalog has no formulas."""
    from colltune.models.predict import load_models

    if not catalog.cost_model:
        note("the cost model has no formulas for this library's algorithms: every segment "
             "size explored")
        return []
    if not db.is_file():
        note("no cost model in the store: every segment size explored (tune model fit)")
        return []
    store = Store(db, readonly=True)
    try:
        models = load_models(store, mpi)
    except ColltuneError as e:
        note(f"{e.message}: every segment size explored (tune model fit)")
        return []
    finally:
        store.close()
    lines = variant_skips(models, catalog, candidates, world)
    if lines:
        pairs = {tuple(ln.split()[3:5]) for ln in lines}
        note(f"the cost model ({models.source}) leaves {len(lines)} segment-size "
             f"variant(s) out at {len(pairs)} (communicator size, size bucket) pair(s) of "
             f"{world} ranks' launch: each algorithm keeps its best-predicted variant")
    if len(lines) > MAX_LINES:  # the smallest sizes' lines go: they come last
        note(f"the layer takes {MAX_LINES} of the model's {len(lines)} lines: the smaller "
             f"communicator sizes' groups explore every segment size")
    return lines[:MAX_LINES]


def variant_skips(models: Models, catalog: Catalog, candidates: dict[str, dict[int, Config]],
                  world: int) -> list[str]:
    """Per communicator size of the launch (comm_sizes) and size bucket, a `skip` line for
    each candidate outside the model's shortlist there: each algorithm's best-predicted
    variant and the TOP_K predicted fastest stay (tuner/guided.shortlist)."""
    from colltune.models.predict import predict
    from colltune.tuner.guided import shortlist

    lines: list[str] = []
    for np in comm_sizes(world):
        for name, ids in sorted(candidates.items()):
            if not any(c.params for c in ids.values()):
                continue  # no variants: the model would keep every algorithm
            coll, which = get_collective(name), {c: k for k, c in ids.items() if k}
            for bucket in range(FIRST_BUCKET, LAST_BUCKET + 1):
                # the bucket [2^(b-1), 2^b) judged at its lower end: where applications'
                # sizes often are, and a segment that fits there fits its whole bucket,
                # so every algorithm keeps a variant the layer can run
                size = 2 ** (bucket - 1)
                ranked = predict(models, coll, catalog, np, size, list(which))
                keep = set(shortlist(ranked, TOP_K))
                lines += [f"skip {name} {which[p.config]} {np} {bucket}"
                          for p in ranked if p.config not in keep]
    return lines

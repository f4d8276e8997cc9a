"""Intel MPI's own tuning table with colltune's rules spliced in (`--format impi-bin`): the
table the library loads (dumped by it), where only the tuned collective at the tuned job
size and ppn changes, only at the confirmed ranges; every other range keeps the library's
own entries, so a kept size needs no stand-in. Each preset's entry is what Intel MPI itself
made of it from a JSON file, and the written table is loaded and dumped back by the library
before it is kept (what it read is what colltune wrote)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from colltune import jobdir
from colltune.backends.impi.install import IntelMPI, job_env, launch_command
from colltune.errors import MPIError
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.rules import impi_table
from colltune.rules.impi_env import TUNING_VAR
from colltune.rules.impi_table import Node
from colltune.rules.impi_tuning import (
    LIBRARY,
    ImpiFormatError,
    Layers,
    Rules,
    collectives,
    render,
)

if TYPE_CHECKING:
    from colltune.slots import Placement

BIN_VAR, DUMP_VAR = "I_MPI_TUNING_BIN", "I_MPI_TUNING_BIN_DUMP"
SUFFIX = ".dat"  # what Intel MPI's own binary tuning files are called
_MARK = 900_000  # message sizes no table holds: where each preset's entry is found


def record_of(table: Path) -> Path:
    """colltune's record of the rules spliced into `table`: beside it, `.rules`."""
    return table.with_suffix(".rules")


def dump(mpi: IntelMPI, placement: Placement, coll: str, env: dict[str, str]) -> bytes:
    """The table Intel MPI loaded in a launch with `env` (one call of `coll`), as it dumps
    it with I_MPI_TUNING_BIN_DUMP."""
    plan = KernelPlan(coll, [KernelConfig(0, {}, placement.group)], [(0, 8)],
                      Repetitions(warmup=0, min_reps=1, max_reps=1, point_time=0.01),
                      dup_always=False)
    with jobdir.temporary(prefix="colltune-table-") as tmp:
        out = Path(tmp) / f"dump{SUFFIX}"
        outcome = run_kernel(launch_command(mpi, placement), build_kernel(mpi), plan,
                             job_env(mpi, {**env, DUMP_VAR: str(out)}),
                             point_timeout=60, runs_on=mpi)
        if outcome.status != "ok" or not out.is_file() or out.stat().st_size == 0:
            raise MPIError(f"{mpi.describe()} dumped no tuning table with {DUMP_VAR} "
                           f"({outcome.status} {outcome.message})".strip(),
                           "write the JSON tuning file instead (--format impi)")
        return out.read_bytes()


def _markers(i: int, presets: list[int]) -> Rules:
    """One rule per preset at message sizes of its own, the last also the catch-all."""
    base = _MARK + 1000 * i
    return Rules([(base + j, p) for j, p in enumerate(presets)] + [(None, presets[-1])])


def _is_mark(n: Node, rules: Rules) -> bool:
    """Whether `n` is a collective's node holding exactly the marker rules (ppn, comm size
    and comm id -1)."""
    want = [-1 if u is None else u for u, _ in rules.limits]
    for _ in range(3):  # ppn, comm size, comm id: one entry each, the catch-all
        if len(n.kids) != 1 or n.kids[0].key != -1:
            return False
        n = n.kids[0]
    return [m.key for m in n.kids] == want


class Splicer:
    """Spliced tables for one installation and job placement: the library's own table and
    what Intel MPI makes of each preset, each dumped once (a launch, then one per
    collective), then any rules spliced in without a launch."""

    def __init__(self, mpi: IntelMPI, placement: Placement, catalog: dict[str, list[int]]
                 ) -> None:
        self.mpi, self.placement, self.catalog = mpi, placement, catalog
        self.own: Node | None = None
        self.paths: dict[str, list[int]] = {}  # collective -> its node's keys in the table
        self.leaves: dict[tuple[str, int], Node] = {}  # (collective, preset) -> its entry
        self.made: dict[str, bytes] = {}  # the rules' record -> their table (the fresh
        # pairs' arms ask for the same rules again: a copy and an encoding of 1 MB each)

    def _learn(self, coll: str) -> None:
        if self.own is None:
            self.own = impi_table.decode(dump(self.mpi, self.placement, coll, {}))
        if coll in self.paths:
            return
        presets = sorted(set(self.catalog.get(coll, [])))
        if not presets:
            raise ImpiFormatError(f"{coll}: no presets known to splice")
        marks = _markers(len(self.paths), presets)
        with jobdir.temporary(prefix="colltune-table-") as tmp:
            src = Path(tmp) / "presets.json"
            src.write_text(render({coll: {None: marks}}))
            made = impi_table.decode(dump(self.mpi, self.placement, coll,
                                          {TUNING_VAR: str(src)}))
        path = impi_table.find(made, lambda n: _is_mark(n, marks))
        node = impi_table.at(made, path).kids[0].kids[0].kids[0]
        for (_, p), m in zip(marks.limits, node.kids, strict=False):
            self.leaves.setdefault((coll, p), m.kids[0])
        self.paths[coll] = path

    def entry(self, table: Node | None, coll: str, size: int) -> Node:
        """What `table` (decoded; None: the library's own; or another file, e.g. another
        tuner's) runs for `coll` at `size` bytes in this placement's job: compared leaf to
        leaf, two tables are told apart where they differ, not where their tuners say so."""
        self._learn(coll)
        assert self.own is not None
        tree = self.own if table is None else table
        return impi_table.selected(impi_table.at(tree, self.paths[coll]),
                                   self.placement.ppn, self.placement.np, size)

    def table(self, layers: Layers) -> bytes:
        """The library's own table with each layer's rules spliced in at its ranks a node
        (every job of another ppn or comm size keeps what it had: splice's fences)."""
        if any(ppn is None or np is None for ppn, t in layers.items()
               for per in t.values() for np in per):
            raise ImpiFormatError("a spliced table is for measured comm sizes and ppn")
        key = impi_table.render_rules(layers, "")
        if key in self.made:
            return self.made[key]
        colls = collectives(layers)
        for c in colls:
            self._learn(c)
        assert self.own is not None
        table = self.own
        for c in colls:
            table = impi_table.copied_along(table, self.paths[c])
        for ppn, t in layers.items():
            assert ppn is not None  # refused above
            for c, per in t.items():
                node = impi_table.at(table, self.paths[c])  # the library's own entries
                for np, r in per.items():
                    assert np is not None  # refused above
                    self._splice(node, c, ppn, np, r)
        self.made[key] = impi_table.encode(table)
        return self.made[key]

    def _splice(self, node: Node, coll: str, ppn: int, np: int, r: Rules) -> None:
        """`r` into the collective's `node` for jobs of `np` ranks, `ppn` a node."""
        assert self.own is not None
        theirs = impi_table.messages(impi_table.at(self.own, self.paths[coll]), ppn, np)
        entries: list[tuple[int, Node]] = []
        for low, high, p in r.ranges():
            if p != LIBRARY and (coll, p) not in self.leaves:
                raise ImpiFormatError(f"{coll}: preset {p} is not one Intel MPI lists")
            entries += impi_table.clip(theirs, low, high) if p == LIBRARY else \
                [(-1 if high is None else high, self.leaves[(coll, p)])]
        impi_table.splice(node, ppn, np, entries)


def read_back(mpi: IntelMPI, placement: Placement, coll: str, data: bytes) -> None:
    """MPIError unless Intel MPI, loading `data`, dumps the same table back."""
    with jobdir.temporary(prefix="colltune-table-") as tmp:
        f = Path(tmp) / f"spliced{SUFFIX}"
        f.write_bytes(data)
        back = dump(mpi, placement, coll, {BIN_VAR: str(f)})
    if impi_table.decode(back) != impi_table.decode(data):
        raise MPIError(f"{mpi.describe()} loaded the spliced table as another one",
                       "write the JSON tuning file instead (--format impi)")


def differs(mpi: IntelMPI, placement: Placement, data: bytes, layers: Layers) -> str | None:
    """Where the table `data` is not Intel MPI's own (as `mpi` loads it in `placement`'s
    job) with the record's `layers` spliced in, or None where it is exactly that: the
    table is built again from the record and compared node by node. A table judged by its
    shape and the record beside it could be empty, or run presets that do not exist."""
    from colltune.backends.impi.install import catalog

    got = impi_table.decode(data)
    colls = collectives(layers)
    cat = catalog(mpi, colls)
    missing = [c for c in colls if not cat.algorithms.get(c)]
    if missing:
        return f"{mpi.describe()} lists no presets for {', '.join(missing)}"
    want = impi_table.decode(Splicer(mpi, placement, {c: sorted(cat.algorithms[c])
                                                      for c in colls}).table(layers))
    if got == want:
        return None
    ours, theirs = {k.key: k for k in want.kids}, {k.key: k for k in got.kids}
    odd = sorted(k for k in ours.keys() | theirs.keys() if ours.get(k) != theirs.get(k))
    return (f"it is not {mpi.describe()}'s own table with the rules of its record spliced "
            f"in: {len(odd) or 'its top'} collective entr{'y' if len(odd) == 1 else 'ies'} "
            f"differ (table keys {', '.join(map(str, odd[:5])) or 'none'})")

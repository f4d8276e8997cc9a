"""MVAPICH2 2.3.x: find an installation, its algorithm catalog, force an algorithm for a
whole launch through `MV2_*_TUNING`, launch with Hydra, and name what ran from its counters.

MVAPICH2 reads its tuning variables once, in MPI_Init, so every configuration is its own
launch. The numbers are those of its switch statements (alltoall counts from 0). Which
algorithm really ran is counted by its MPI_T performance variables (`mv2_coll_*`, when
built with `--enable-mpit-pvars=mv2`); the kernel reports their growth per point."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.backends.common import tools as common_tools
from colltune.core.catalog import Catalog
from colltune.core.toolchain import HydraToolchain
from colltune.errors import ColltuneError, MPIError
from colltune.rules.mvapich2 import INDEXED_ALL, TUNING_VARS

if TYPE_CHECKING:
    from colltune.slots import Placement

INSTALL_HINT = ("build MVAPICH2 2.3.x with the ch3:mrail device (and --enable-mpit-pvars=mv2 "
                "so it counts what ran) and point at its prefix with --mpi PREFIX")
PVAR_PREFIX = "mv2_coll_"


@dataclass(frozen=True)
class Algorithm:
    value: int  # what the tuning variable takes
    name: str
    counter: str | None  # the mv2_coll_ counter its calls increment


def _a(value: int, name: str, counter: str | None) -> Algorithm:
    return Algorithm(value, name, counter and PVAR_PREFIX + counter)


# The variable that decides each collective on one node, and the algorithms whose forcing
# MVAPICH2 2.3.7's own counters confirmed there (4 ranks, 4 KiB and 256 KiB; counter names
# from its sources). Left out because the counters did not confirm them: allreduce 8 and 9
# (recursive doubling ran instead), alltoall 1 (counts as pairwise too), allgather 5-7,
# every bcast and gather algorithm (no counter moved); multicast, zero-copy, SHArP and the
# two-level variants need adapters or several nodes; reduce 8 (via allreduce) cannot be
# written in a range string (2.3.7 runs knomial for it there).
VARIABLE = {
    "reduce": "MV2_INTER_REDUCE_TUNING",
    "allreduce": "MV2_INTER_ALLREDUCE_TUNING",
    "scatter": "MV2_INTER_SCATTER_TUNING",
    "allgather": "MV2_INTER_ALLGATHER_TUNING",
    "alltoall": "MV2_ALLTOALL_TUNING",
}
ALGORITHMS: dict[str, list[Algorithm]] = {
    "reduce": [_a(1, "binomial", "reduce_binomial"), _a(2, "knomial", "reduce_knomial"),
               _a(5, "redscat_gather", "reduce_redscat_gather")],
    "allreduce": [_a(1, "recursive_doubling", "allreduce_shm_rd"),
                  _a(2, "reduce_scatter_allgather", "allreduce_shm_rs")],
    "scatter": [_a(1, "binomial", "scatter_binomial"), _a(2, "direct", "scatter_direct")],
    "allgather": [_a(2, "recursive_doubling", "allgather_rd"), _a(3, "bruck", "allgather_bruck"),
                  _a(4, "ring", "allgather_ring")],
    "alltoall": [_a(0, "bruck", "alltoall_bruck"), _a(2, "scatter_dest", "alltoall_sd"),
                 _a(3, "pairwise", "alltoall_pw")],
}


# what the library's own choice may run besides the searched algorithms (value, counter)
ALSO_COUNTED: dict[str, list[tuple[int, str]]] = {
    "reduce": [(8, PVAR_PREFIX + "reduce_allreduce")],  # reduce via allreduce
}


@dataclass(frozen=True)
class MVAPICH2(HydraToolchain):
    """One MVAPICH2 installation, identified by its real binaries."""

    version: str
    prefix: Path
    mpicc: Path
    mpirun: Path  # Hydra's mpiexec: passes the environment to every rank
    mpiname: Path
    device: str
    name: str = "MVAPICH2"

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", self.version)[:3])

    @property
    def key(self) -> str:
        return f"mvapich2-{self.version}@{self.prefix}"

    def describe(self) -> str:
        return f"{self.name} {self.version} ({self.device}) at {self.prefix}"

    def tool_env(self) -> dict[str, str]:
        return launch_env()


def parse_mpiname(text: str) -> tuple[str, str] | None:
    """(version, device) from `mpiname -a`."""
    m = re.search(r"MVAPICH2\s+(\S+)", text)
    d = re.search(r"\bch3:\w+|\bch4:\w+", text)
    return (m.group(1), d.group(0) if d else "unknown") if m else None


def find_mvapich2(prefix: str | Path | None) -> MVAPICH2:
    """The MVAPICH2 under --mpi PREFIX (never guessed from PATH)."""
    if not prefix:
        raise ColltuneError("--backend mvapich2 needs --mpi PREFIX", INSTALL_HINT)
    bindir = Path(prefix).expanduser() / "bin"
    tools = {n: bindir / n for n in ("mpiname", "mpicc", "mpiexec")}
    missing = [n for n, p in tools.items() if not (p.exists() and os.access(p, os.X_OK))]
    if missing:
        raise MPIError(f"no MVAPICH2 under {prefix} (missing {', '.join(missing)} in "
                       f"{bindir})", INSTALL_HINT)
    root = Path(prefix).expanduser()
    out = common_tools.ask([str(tools["mpiname"]), "-a"], root, "MVAPICH2", timeout=30)
    found = parse_mpiname(out)
    if not found:
        raise common_tools.not_answered(tools["mpiname"], out, "MVAPICH2", root)
    version, device = found
    if device != "ch3:mrail":
        raise MPIError(f"MVAPICH2 {version} at {prefix} is built with {device}: only "
                            "ch3:mrail has the OSU collectives that MV2_*_TUNING selects",
                            INSTALL_HINT)
    return MVAPICH2(version, Path(prefix).expanduser(), tools["mpicc"], tools["mpiexec"],
                    tools["mpiname"], device)


# what the library's own choice may run that no tuning variable can name, and why: 2.3.7
# takes its shared-memory reduce only from its built-in tables (at or below
# MV2_COLL_SKIP_TABLE_THRESHOLD, 1 KiB), and any user table, a range string or a single
# number, skips that shortcut (reduce_osu.c)
UNNAMEABLE: dict[str, dict[str, str]] = {
    "reduce": {PVAR_PREFIX + "reduce_shmem": "its shared-memory reduce, which it runs only "
               "from its built-in tables: any MV2_INTER_REDUCE_TUNING turns it off"},
}
# ... except in a range string's first range: 2.3.7 marks only entry 0 of a user table
# two-level (MV2_INTER_<C>_TUNING_TWO_LEVEL) and reads the intra-node algorithm from
# MV2_INTRA_<C>_TUNING, which is what its default runs for small messages (shared memory
# inside the node, binomial between node leaders; reduce_tuning.c, reduce_osu.c). Seen on
# the library: with these, its counters show reduce_shmem and reduce_two_level_helper in
# the first range, as for the default. collective -> (its counter, inter value, settings)
FIRST_RANGE: dict[str, tuple[str, int, dict[str, str]]] = {
    "reduce": (PVAR_PREFIX + "reduce_shmem", 1, {"MV2_INTER_REDUCE_TUNING_TWO_LEVEL": "1",
                                                 "MV2_INTRA_REDUCE_TUNING": "4"}),
}


@dataclass
class MV2Catalog(Catalog):
    """Algorithms per collective. Ids are 1-based like every catalog's (0 = the library's
    choice), so alltoall's id is its MVAPICH2 number + 1; `value` maps back."""

    value: dict[str, dict[int, int]] = field(default_factory=dict)
    counter: dict[str, dict[int, str | None]] = field(default_factory=dict)

    def ran(self, coll: str, counts: dict[str, int]) -> int | None:
        """The catalog algorithm (id) whose counter grew most in `counts`: what ran."""
        return _most(counts, {c: i for i, c in self.counter.get(coll, {}).items() if c})

    def ran_value(self, coll: str, counts: dict[str, int]) -> int | None:
        """The MVAPICH2 number of what ran, also among algorithms not searched."""
        by_counter = {c: self.value[coll][i] for i, c in self.counter.get(coll, {}).items()
                      if c}
        by_counter.update({c: v for v, c in ALSO_COUNTED.get(coll, [])})
        # what no variable names counts too: the shared-memory reduce at 2 KiB grew by
        # every call, binomial by a few (its leaders' step, or set-up), and it is not binomial
        unnamed = -1
        by_counter.update({c: unnamed for c in UNNAMEABLE.get(coll, {})})
        v = _most(counts, by_counter)
        return None if v == unnamed else v

    def unnameable(self, coll: str, counts: dict[str, int]) -> str | None:
        """What ran that no tuning variable can name, if its counter grew."""
        return next((why for c, why in UNNAMEABLE.get(coll, {}).items() if counts.get(c)),
                    None)


def _most(counts: dict[str, int], meaning: dict[str, int]) -> int | None:
    """What the counter that grew most (among those in `meaning`) stands for."""
    hits = [(n, meaning[c]) for c, n in counts.items() if c in meaning and n > 0]
    return max(hits)[1] if hits else None


def catalog(collectives: list[str]) -> MV2Catalog:
    cat = MV2Catalog(source="MVAPICH2 2.3.7 switch statements")
    for coll in collectives:
        algs = ALGORITHMS.get(coll)
        if not algs:
            continue
        shift = 1 if min(a.value for a in algs) == 0 else 0
        cat.algorithms[coll] = {a.value + shift: a.name for a in algs}
        cat.value[coll] = {a.value + shift: a.value for a in algs}
        cat.counter[coll] = {a.value + shift: a.counter for a in algs}
    return cat


def forcing_env(catalog: MV2Catalog, coll: str, alg: int) -> dict[str, str]:
    """Environment that makes one launch run algorithm `alg` (id) at every size, with the
    indexed tables off as the written profile has them."""
    if alg == 0:
        return {}
    var = VARIABLE[coll]
    env = {var: str(catalog.value[coll][alg]), INDEXED_ALL: "0"}
    flag = TUNING_VARS[var].indexed_flag
    if flag:
        env[flag] = "0"
    return env


# inherited settings that would change what the library chooses
_INHERITED = re.compile(r"^MV2_(\w*_TUNING(_TWO_LEVEL)?|USE_INDEXED_\w+|ENABLE_AFFINITY)$")


def launch_env(extra: dict[str, str] | None = None, oversubscribed: bool = False
               ) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _INHERITED.match(k)}
    if oversubscribed:
        env["MV2_ENABLE_AFFINITY"] = "0"  # pinned ranks sharing a core never progress
    env.update(extra or {})
    return env


def launch_command(mpi: MVAPICH2, placement: Placement) -> list[str]:
    from colltune.launchers import hydra_command

    return hydra_command("MVAPICH2", str(mpi.mpirun), placement.launch, placement.np,
                         placement.hostfile, placement.oversubscribe)

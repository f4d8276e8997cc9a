"""MVAPICH2's runtime parameters (environment variables, from MVAPICH2 2.3.7's user guide
and its coll/shmem sources): shared-memory collectives and their thresholds, the two-level
communicator switch after a number of calls, the intra-node eager size, and binding."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from colltune.backends.common import env_runtime
from colltune.backends.mvapich2.install import MVAPICH2
from colltune.backends.runtime import RuntimeSupport
from colltune.core.runtime import Allowed, Knob, Setting

UNSET = "unset"  # the library's own value (architecture dependent): nothing set


# what an MVAPICH2 runtime profile or parameter file may set: MVAPICH2's own variables
MAY_SET = Allowed(prefixes=("MV2_",))


def knobs() -> list[Knob]:
    """What colltune tunes of MVAPICH2. MVAPICH2 exposes none of them through MPI_T, so
    only binding is proven (the CPUs each rank may run on)."""
    return [
        Knob("MV2_ENABLE_AFFINITY", "bool", "env", ("0", "1"), "1", proof="affinity",
             affects=("every call: ranks bound or free",),
             doc="bind ranks to cores (0: leave them to the scheduler; needed when "
                 "oversubscribed)"),
        Knob("MV2_CPU_BINDING_POLICY", "choice", "env", ("bunch", "scatter"), "bunch",
             choices=("bunch", "scatter", "hybrid"), proof="",
             affects=("which cores ranks share",), doc="how bound ranks are spread"),
        Knob("MV2_USE_SHMEM_COLL", "bool", "env", ("0", "1"), "1", proof="",
             affects=("collectives on a node: shared-memory paths",),
             doc="shared-memory collectives on or off"),
        Knob("MV2_SHMEM_COLL_MAX_MSG_SIZE", "int", "env", ("32768", "131072", "524288"),
             "131072", lo=1024, hi=1 << 24, proof="",
             affects=("collectives up to this size take shared-memory paths",),
             doc="largest message of the shared-memory collectives"),
        Knob("MV2_TWO_LEVEL_COMM_THRESHOLD", "int", "env", ("1", "16", "1024"), "16", lo=1,
             hi=1 << 30, proof="",
             affects=("calls on a communicator before its two-level paths start",),
             doc="collective calls on a communicator before MVAPICH2 builds its node-level "
                 "communicators and switches to two-level algorithms (seen here: flat "
                 "binomial for the first 16 calls)"),
        Knob("MV2_SMP_EAGERSIZE", "int", "env", ("8192", "32768", "131072"), UNSET,
             lo=1024, hi=1 << 24, proof="",
             affects=("point-to-point on a node: the eager limit",),
             doc="largest message sent eagerly between ranks of a node"),
    ]


def cpus(knob: Knob, value: str) -> Callable[[int], bool] | None:
    """MV2_ENABLE_AFFINITY=0: every rank may run on every CPU of the node; 1: fewer."""
    import os

    if knob.proof != "affinity":
        return None
    n = len(os.sched_getaffinity(0))
    return (lambda c: c == n) if value == "0" else (lambda c: 0 < c < n or n == 1)


class MVAPICH2Runtime(RuntimeSupport[MVAPICH2]):
    """MVAPICH2's runtime parameters: MV2_ variables, read once in MPI_Init; written as a
    profile installed as its parameter file."""

    def knobs(self, mpi: MVAPICH2) -> list[Knob]:
        return knobs()

    def refuse(self, mpi: MVAPICH2, knobs: list[Knob], cmd: list[str]) -> None:
        env_runtime.refuse_overrides(cmd, knobs)

    def environ(self, mpi: MVAPICH2, knobs: dict[str, Knob], setting: Setting,
                base: dict[str, str]) -> dict[str, str]:
        return env_runtime.environment(knobs, setting, base)

    def cpus(self, knob: Knob, value: str) -> Callable[[int], bool] | None:
        return cpus(knob, value)

    def write(self, mpi: MVAPICH2, knobs: dict[str, Knob], setting: Setting,
              rules: Path | None, out: Path, notes: list[str]) -> dict[str, object]:
        if rules is not None:  # a tuning profile of its own
            notes = [*notes, f"searched with {rules} loaded: install it too"]
        return env_runtime.write(mpi, knobs, setting, out, notes, "MVAPICH2")

    def read(self, path: Path) -> tuple[Setting, Path | None] | None:
        return env_runtime.read(path, "MVAPICH2", MAY_SET)

"""MPICH's runtime parameters (its CVARs, set as environment variables): the shared-memory
transport's cell size (its eager limit on a node), whether the device may override the
generic collectives, asynchronous progress, polling before yielding; each checked against
what the installation's own mpivars lists (MPI_T) before any launch."""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

from colltune.backends.common import env_runtime
from colltune.backends.common.env_runtime import refuse_overrides
from colltune.backends.mpich.install import MPICH
from colltune.backends.runtime import RuntimeSupport
from colltune.core.runtime import Allowed, Knob, Setting
from colltune.errors import ColltuneError

# MPI_T reads an enumerated CVAR as its index (MPICH's cvars.txt order)
_ENUMS = {"MPIR_CVAR_DEVICE_COLLECTIVES": ("all", "none", "percoll")}


# what an MPICH runtime profile may set (read and exported through env_runtime with it):
# MPICH's own control variables, and of the files among them only the tuning file
MAY_SET = Allowed(prefixes=("MPIR_CVAR_",),
                  files=frozenset({"MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE"}))


def knobs(mpi: MPICH) -> list[Knob]:
    """What colltune tunes of MPICH, kept to what this installation lists."""
    every = [
        Knob("MPIR_CVAR_CH4_SHM_POSIX_IQUEUE_CELL_SIZE", "int", "env",
             ("4096", "8192", "16384", "65536"), "8192", lo=1024, hi=1 << 20,
             affects=("point-to-point on a node: the eager limit", "small collectives"),
             doc="size of a shared-memory queue cell: larger messages go by rendezvous"),
        Knob("MPIR_CVAR_DEVICE_COLLECTIVES", "choice", "env", ("all", "none", "percoll"),
             "percoll", choices=("all", "none", "percoll"),
             affects=("every collective: the device's own (shared-memory) paths",),
             doc="whether the device may override MPICH's generic collective algorithms"),
        Knob("MPIR_CVAR_ASYNC_PROGRESS", "bool", "env", ("0", "1"), "0",
             affects=("nonblocking calls", "a progress thread per rank"),
             doc="a progress thread per rank (needs MPI_THREAD_MULTIPLE)"),
        Knob("MPIR_CVAR_POLLS_BEFORE_YIELD", "int", "env", ("100", "1000", "10000"), "1000",
             lo=0, hi=1 << 30, affects=("every wait when ranks share cores",),
             doc="busy-wait iterations before a waiting rank yields its core"),
    ]
    listed = _listed(mpi)
    return [k for k in every if k.name in listed] if listed else every


@cache
def _listed(mpi: MPICH) -> frozenset[str]:
    """Every CVAR mpivars (MPI_T) lists; empty when the installation has no mpivars."""
    tool = mpi.prefix / "bin" / "mpivars"
    if not tool.exists():
        return frozenset()
    try:
        text = subprocess.run([str(tool)], capture_output=True, text=True, timeout=60,
                              env=mpi.tool_env(), check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    return frozenset(re.findall(r"^\s*(MPIR_CVAR_\w+)\s*[=:]", text, re.M))


def refuse(mpi: MPICH, ks: list[Knob], cmd: list[str]) -> None:
    listed = _listed(mpi)
    missing = [k.name for k in ks if listed and k.name not in listed]
    if missing:
        raise ColltuneError(f"{mpi.describe()} has no CVAR " + ", ".join(missing)
                            + " (mpivars does not list it)", "check the name with mpivars")
    refuse_overrides(cmd, ks)


def readback(knob: Knob, value: str) -> set[str]:
    names = _ENUMS.get(knob.name, ())
    return {value} | ({str(names.index(value))} if value in names else set())


class MPICHRuntime(RuntimeSupport[MPICH]):
    """MPICH's runtime parameters: CVARs in the environment, read back through MPI_T;
    written as a profile that exports them."""

    def knobs(self, mpi: MPICH) -> list[Knob]:
        return knobs(mpi)

    def refuse(self, mpi: MPICH, knobs: list[Knob], cmd: list[str]) -> None:
        refuse(mpi, knobs, cmd)

    def environ(self, mpi: MPICH, knobs: dict[str, Knob], setting: Setting,
                base: dict[str, str]) -> dict[str, str]:
        return env_runtime.environment(knobs, setting, base)

    def readback(self, mpi: MPICH, knob: Knob, value: str) -> set[str]:
        return readback(knob, value)

    def write(self, mpi: MPICH, knobs: dict[str, Knob], setting: Setting,
              rules: Path | None, out: Path, notes: list[str]) -> dict[str, object]:
        if rules is not None:  # MPICH's tuning file has its own profile
            notes = [*notes, f"searched with the tuning file {rules} loaded: source "
                             "its profile too"]
        return env_runtime.write(mpi, knobs, setting, out, notes, "MPICH")

    def read(self, path: Path) -> tuple[Setting, Path | None] | None:
        return env_runtime.read(path, "MPICH", MAY_SET)

"""An Intel MPI tuning file frozen to the library's binary form (`--format impi-bin`): one
launch of colltune's kernel with the JSON loaded and I_MPI_TUNING_BIN_DUMP set writes what
Intel MPI loaded; jobs then read the binary (I_MPI_TUNING_BIN) instead of parsing JSON. The
JSON stays beside it, same name: it is what `tune check`, `explain` and `verify` read (a
binary is this Intel MPI's own dump, not a format colltune parses)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.backends.impi import IntelMPI, launch_command, launch_env
from colltune.errors import MPIError
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.outfile import write_atomic
from colltune.rules.impi_env import TUNING_VAR

if TYPE_CHECKING:
    from colltune.slots import Placement

BIN_VAR, DUMP_VAR = "I_MPI_TUNING_BIN", "I_MPI_TUNING_BIN_DUMP"
SUFFIX = ".dat"  # what Intel MPI's own binary tuning files are called


def source_of(binary: Path) -> Path:
    """The JSON a frozen file was dumped from: beside it, same name."""
    return binary.with_suffix(".json")


def freeze(mpi: IntelMPI, placement: Placement, coll: str, source: Path, out: Path) -> int:
    """Dump what Intel MPI loads from the tuning file `source` into `out` (one launch, a
    call of `coll`); the bytes written."""
    plan = KernelPlan(coll, [KernelConfig(0, {}, placement.group)], [(0, 8)],
                      Repetitions(warmup=0, min_reps=1, max_reps=1, point_time=0.01),
                      dup_always=False)
    with tempfile.TemporaryDirectory(prefix="colltune-freeze-") as tmp:
        dump = Path(tmp) / f"frozen{SUFFIX}"
        env = launch_env(mpi.prefix, {TUNING_VAR: str(source.resolve()), DUMP_VAR: str(dump)})
        outcome = run_kernel(launch_command(mpi, placement), build_kernel(mpi), plan, env,
                             point_timeout=60, library_ok=mpi.runs_on)
        if outcome.status != "ok" or not dump.is_file() or dump.stat().st_size == 0:
            raise MPIError(f"{mpi.describe()} wrote no binary tuning file with {DUMP_VAR} "
                           f"({outcome.status} {outcome.message})".strip(),
                           f"write the JSON (--format impi) and load it with {TUNING_VAR}")
        data = dump.read_bytes()
    write_atomic(out, data)
    return len(data)

"""What tune runtime minimises, read from the profiler's record of one launch: an
application's own wall time (`-- CMD`), or a collective's time per call at each size in a
kernel launch with a fixed number of calls (`--collective`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from colltune.backends.base import Backend
from colltune.collectives import get_collective
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError, MPIError
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions
from colltune.slots import Placement

Figures = dict[int, float]  # cell (message size bucket; 0: the whole run) -> seconds


@dataclass
class Objective:
    what: str  # for messages and the files' comments
    cmd: list[str]  # the launcher's command line, program and arguments included
    figures: Callable[[dict[str, object]], Figures]
    cell: str  # what a cell is: "run" or "size"


def application(cmd: list[str]) -> Objective:
    """The application's own wall time: MPI_Init to MPI_Finalize, slowest rank (the
    launcher's start-up is not the application's and differs from launch to launch)."""
    if not cmd:
        raise ColltuneError("no objective: give a collective or a command",
                            "tune runtime --collective bcast ..., or tune runtime ... -- "
                            "mpirun -np 4 ./app ARGS")

    def wall(prof: dict[str, object]) -> Figures:
        return {0: float(prof["wall_s"]["max"])}  # type: ignore[index]

    return Objective(f"the wall time of {Path(cmd[0]).name} ... {Path(_program(cmd)).name}",
                     cmd, wall, "run")


def _program(cmd: list[str]) -> str:
    """The program a launcher command line runs (its first word that is not an option
    or an option's value, after the launcher): for messages only."""
    return next((a for a in reversed(cmd) if a.startswith("/") or "." not in a), cmd[-1])


def kernel(backend: Backend, mpi: Installation, placement: Placement, name: str,
           sizes: list[int], calls: int, workdir: Path) -> Objective:
    """`name` at `sizes` in the kernel, back to back (as an application's loop calls it),
    `calls` calls a size after a warm-up, the library's own algorithm choice: the time per
    call at each size, mean over ranks."""
    coll = get_collective(name)
    if not sizes or any(s <= 0 for s in sizes):
        raise ColltuneError("--sizes needs positive message sizes", "e.g. --sizes 8,65536")
    plan = KernelPlan(name, [KernelConfig(0, baseline=True)], [(0, s) for s in sizes],
                      Repetitions(warmup=20, min_reps=calls, max_reps=calls, rel_ci=0.0,
                                  point_time=1e9, timing="back-to-back"),
                      dup_always=not backend.on_world)
    path = workdir / f"{name}.plan"
    path.write_text(plan.render())
    exe = build_kernel(mpi)
    cmd, _env = backend.launch(mpi, placement, name, 0, None)

    def per_call(prof: dict[str, object]) -> Figures:
        """Per size, the steady state: the calls after the first ones the profiler times
        apart (a library that changes after N calls is judged by what it does later)."""
        out: Figures = {}
        for e in prof["entries"]:  # type: ignore[attr-defined]
            if e["collective"] == coll.name and e["comm_size"] == placement.np and e["calls"]:
                n, first = int(e["calls"]), len(e.get("first_s", []))
                total = float(e["time_s"]["mean"])
                out[int(e["size"])] = ((total - float(e["first_total_s"])) / (n - first)
                                       if n > 2 * first else total / n)
        if not out:
            raise MPIError(f"the kernel made no {coll.name} calls the profiler saw",
                           "run tune profile on it to see what it called")
        return out

    return Objective(f"{name} per call at {len(sizes)} size(s), {placement.np} ranks",
                     [*cmd, str(exe), str(path)], per_call, "size")

"""What tune runtime minimises, read from the profiler's record of one launch: an
application's own wall time (`-- CMD`), or a collective's time per call at each size in a
kernel launch with a fixed number of calls (`--collective`)."""

from __future__ import annotations

import math
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colltune.backends.base import Backend
from colltune.collectives import get_collective
from colltune.core.toolchain import Installation
from colltune.errors import ColltuneError, MPIError
from colltune.kernel.build import build_kernel, loaded_libraries, mpi_sonames
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions
from colltune.slots import Placement

Figures = dict[int, float]  # cell (message size bucket; 0: the whole run) -> seconds


@dataclass
class Objective:
    what: str  # for messages and the files' comments
    cmd: list[str]  # the launcher's command line, program and arguments included
    figures: Callable[[dict[str, object]], Figures]
    cell: str  # what a cell is: "run" or "size"
    env: dict[str, str] = field(default_factory=dict)  # given to every rank


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


def printed(obj: Objective, metric: str) -> Objective:
    """`obj` judged by what its program prints instead of its wall time: `osu` (an OSU
    benchmark's average latency per size), `imb` (IMB-MPI1's t_avg per size, its last
    table), or a regular expression whose first group is a time in seconds (its last match:
    LAMMPS's `Loop time of (\\S+)`, the time-step loop without set-up)."""
    import re

    from colltune.errors import FormatError
    from colltune.osu import imb_output, osu_output

    if metric not in ("osu", "imb"):
        try:
            rx = re.compile(metric)
        except re.error as e:
            raise ColltuneError(f"--metric {metric[:60]!r} is not a regular expression: {e}",
                                "e.g. --metric 'Loop time of (\\S+)'") from None
        if rx.groups < 1:
            raise ColltuneError(f"--metric {metric[:60]!r} has no group",
                                "put the seconds in a group: 'Loop time of (\\S+)'")

    def figures(prof: dict[str, object]) -> Figures:
        text = str(prof.get("stdout") or "")
        try:
            if metric == "osu":
                got = {r.size: r.avg_us * 1e-6 for r in osu_output.parse(text).rows}
            elif metric == "imb":
                sized = [t.avg_us() for t in imb_output.parse(text) if t.avg_us()]
                # a size IMB timed as 0.00 us has no ratio: left out
                got = {s: t * 1e-6 for s, t in sized[-1].items() if t > 0} if sized else {}
            else:
                found = rx.findall(text)
                last = found[-1] if found else None
                got = {0: float(last[0] if isinstance(last, tuple) else last)} \
                    if last is not None else {}
        except (FormatError, ValueError) as e:
            raise MPIError(f"--metric {metric[:40]}: the program's output does not give "
                           f"a time ({e})", "check the metric against its output") from None
        if not got or not all(math.isfinite(v) and v > 0 for v in got.values()):
            raise MPIError(f"--metric {metric[:40]}: no positive time in the program's "
                           "output", "check the metric against its output")
        return got

    how = {"osu": "OSU's average latency", "imb": "IMB's t_avg"}.get(metric,
                                                                     "the time it prints")
    return Objective(obj.what.replace("the wall time of", f"{how}:"), obj.cmd, figures,
                     "run" if metric not in ("osu", "imb") else "size", obj.env)


def program(backend: Backend, mpi: Installation, placement: Placement, argv: list[str]
            ) -> Objective:
    """`argv` (a program and its arguments, no launcher) launched by `mpi`'s own launcher,
    its ranks finding `mpi`'s library before any other: one binary runs on every library
    of the ABI it was built for (Open MPI 4.1 and 5.0; MPICH and Intel MPI), and the
    profiler's read-back of the library's own version proves which one ran. Its wall
    time, as `application`."""
    if not argv or Path(argv[0]).name.startswith(("mpirun", "mpiexec", "srun", "prterun")):
        raise ColltuneError("give the program and its arguments after --, not a launcher",
                            "tune compare launches it with each library's own launcher: "
                            "tune compare --lib ... -- lmp -in in.melt")
    cmd, _env = backend.launch(mpi, placement, "", 0, None)
    env = mpi.tool_env()
    kernel_libs = loaded_libraries(build_kernel(mpi), env)
    own = mpi_sonames(kernel_libs)
    # the library's own directories first: its libmpi and what that needs from its prefix
    # (MPICH's wheel keeps its UCX beside it), as the kernel built by its mpicc loads them
    top = mpi.prefix.resolve()
    dirs = list(dict.fromkeys(str(p.parent) for n, p in kernel_libs.items()
                              if n in own or p.resolve().is_relative_to(top)))
    exe = shutil.which(argv[0]) or argv[0]
    needs = mpi_sonames(loaded_libraries(Path(exe), env))
    # the soname the library's own programs load (a system directory may hold another
    # library's file of the needed name: Debian puts Open MPI's and MPICH's side by side)
    lacking = [n for n in needs if n not in own]
    if own and lacking:  # another ABI (Open MPI's libmpi.so.40, Debian MPICH's libmpich)
        raise ColltuneError(f"{Path(exe).name} needs {', '.join(lacking)}, which "
                            f"{mpi.describe()} does not provide (it has "
                            f"{', '.join(own) or 'no libmpi'})",
                            "compare libraries of the ABI the program was built for, or "
                            "build it with each library's mpicc")
    obj = application([*cmd, *argv])
    if dirs:
        obj.env = {"LD_LIBRARY_PATH": ":".join(dict.fromkeys(
            [*dirs, *env.get("LD_LIBRARY_PATH", "").split(":")])).strip(":")}
    return obj


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
    g = coll.granularity
    if any(s % g for s in sizes):  # the kernel would refuse the plan
        raise ColltuneError(f"{name} sums doubles: --sizes must be multiples of {g} B",
                            "e.g. --sizes 8,65536")
    plan = KernelPlan(name, [KernelConfig(0, baseline=True)], [(0, s) for s in sizes],
                      Repetitions(warmup=20, min_reps=calls, max_reps=calls, rel_ci=0.0,
                                  point_time=1e9, timing="back-to-back"),
                      dup_always=not backend.traits.on_world)
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

"""Command lines for the launchers users already have (Open MPI `mpirun`, Slurm `srun`,
MPICH/Hydra `mpiexec`, MVAPICH2 `mpirun_rsh`), and what a Slurm allocation offers.

colltune never starts remote processes itself: it builds the command the site's own
launcher understands, with the layout (nodes x ranks per node), binding, and the MCA or
environment settings a launch needs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from colltune.errors import ColltuneError

LAUNCHERS = ("mpirun", "srun", "mpiexec", "mpirun_rsh")


@dataclass(frozen=True)
class Layout:
    np: int
    nodes: int | None = None  # None: whatever the launcher decides
    ppn: int | None = None  # ranks per node
    hostfile: str | None = None
    oversubscribe: bool = False  # more ranks than cores: no binding, yield when idle
    extra: tuple[str, ...] = ()  # --launcher-args, passed through untouched


@dataclass(frozen=True)
class Launch:
    """What the user asked of the launcher (`--launcher`, `--nodes`, `--ppn`,
    `--launcher-args`); None: the launcher's own default."""

    launcher: str | None = None
    nodes: int | None = None
    ppn: int | None = None
    args: tuple[str, ...] = ()


@dataclass(frozen=True)
class SlurmAllocation:
    job_id: str
    nodes: int
    tasks: int
    tasks_per_node: list[int] = field(default_factory=list)  # one entry per node
    nodelist: str = ""

    @property
    def ppn(self) -> int:
        """Ranks per node when every node has the same count, else the smallest."""
        return min(self.tasks_per_node) if self.tasks_per_node else -(-self.tasks //
                                                                       max(1, self.nodes))


def expand_tasks_per_node(text: str) -> list[int]:
    """Slurm's compressed per-node counts, e.g. `16(x3),8` -> [16, 16, 16, 8]."""
    out: list[int] = []
    for part in filter(None, (p.strip() for p in text.split(","))):
        m = re.fullmatch(r"(\d+)(?:\(x(\d+)\))?", part)
        if not m:
            raise ColltuneError(f"cannot read SLURM_TASKS_PER_NODE '{text}'",
                                "pass --nodes and --ppn explicitly")
        out += [int(m.group(1))] * int(m.group(2) or 1)
    return out


def slurm_allocation(env: Mapping[str, str]) -> SlurmAllocation | None:
    """The allocation this process runs in, from Slurm's SLURM_* variables; None outside."""
    job = env.get("SLURM_JOB_ID") or env.get("SLURM_JOBID")
    if not job:
        return None
    per_node = expand_tasks_per_node(env.get("SLURM_TASKS_PER_NODE", "")) \
        if env.get("SLURM_TASKS_PER_NODE") else []
    nodes = int(env.get("SLURM_JOB_NUM_NODES") or env.get("SLURM_NNODES") or
                (len(per_node) or 1))
    tasks = int(env.get("SLURM_NTASKS") or env.get("SLURM_NPROCS") or sum(per_node) or 0)
    return SlurmAllocation(job, nodes, tasks, per_node,
                           env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST") or "")


def _env_prefix(env: Mapping[str, str]) -> list[str]:
    """Settings for launchers without an option for them: `env K=V ... launcher`, which
    every launcher here forwards to the ranks (srun exports the environment by default)."""
    return ["env", *(f"{k}={v}" for k, v in env.items())] if env else []


def command(launcher: str, program: str, layout: Layout, mca: Mapping[str, str] | None = None,
            env: Mapping[str, str] | None = None) -> list[str]:
    """The launcher's command line up to (not including) the executable. `program` is the
    launcher's path; `mca` are Open MPI MCA parameters; `env` goes to every rank."""
    mca = dict(mca or {})
    env = dict(env or {})
    n = layout
    if launcher == "mpirun":
        cmd = [program, "-np", str(n.np)]
        if n.hostfile:
            cmd += ["--hostfile", n.hostfile]
        if n.ppn:
            cmd += ["--map-by", f"ppr:{n.ppn}:node"]
        if n.oversubscribe:
            # yield so oversubscribed ranks make progress instead of spinning
            cmd += ["--oversubscribe"]
            mca = {"mpi_yield_when_idle": "1", **mca}
        elif n.ppn or n.nodes:
            cmd += ["--bind-to", "core"]  # one rank per core: stable timings
        for k, v in mca.items():
            cmd += ["--mca", k, str(v)]
        for k in env:
            cmd += ["-x", k]  # the value comes from mpirun's own environment
        return _env_prefix(env) + cmd + list(n.extra)
    if launcher == "srun":
        cmd = [program, "-n", str(n.np)]
        if n.nodes:
            cmd += ["-N", str(n.nodes)]
        if n.ppn:
            cmd += ["--ntasks-per-node", str(n.ppn)]
        cmd += ["--cpu-bind=none" if n.oversubscribe else "--cpu-bind=cores"]
        if n.oversubscribe:
            cmd += ["--overcommit"]
            mca = {"mpi_yield_when_idle": "1", **mca}
        settings = {f"OMPI_MCA_{k}": str(v) for k, v in mca.items()} | env
        return _env_prefix(settings) + cmd + list(n.extra)
    if launcher == "mpiexec":  # MPICH's Hydra
        cmd = [program, "-n", str(n.np)]
        if n.hostfile:
            cmd += ["-f", n.hostfile]
        if n.ppn:
            cmd += ["-ppn", str(n.ppn)]
        if not n.oversubscribe and (n.ppn or n.nodes):
            cmd += ["-bind-to", "core"]
        for k, v in env.items():
            cmd += ["-genv", k, str(v)]
        if mca:
            raise ColltuneError("MCA parameters given for an MPICH launch",
                                "use --launcher mpirun for Open MPI")
        return cmd + list(n.extra)
    if launcher == "mpirun_rsh":  # MVAPICH2: hosts, then VAR=VALUE, then the program
        cmd = [program, "-np", str(n.np)]
        if n.hostfile:
            cmd += ["-hostfile", n.hostfile]
        else:
            cmd += ["localhost"] * n.np  # one node: every rank here
        cmd += list(n.extra)
        if n.oversubscribe:
            env.setdefault("MV2_ENABLE_AFFINITY", "0")  # else ranks pile onto core 0
        return cmd + [f"{k}={v}" for k, v in env.items()]
    raise ColltuneError(f"unknown launcher '{launcher}'",
                        "use --launcher " + ", ".join(LAUNCHERS))


def default_launcher(env: Mapping[str, str], requested: str | None) -> str:
    """srun inside a Slurm allocation, mpirun elsewhere, unless the user said otherwise."""
    if requested:
        if requested not in LAUNCHERS:
            raise ColltuneError(f"unknown launcher '{requested}'",
                                "use --launcher " + ", ".join(LAUNCHERS))
        return requested
    return "srun" if slurm_allocation(env) else "mpirun"


def hydra_command(family: str, mpiexec: str, launch: Launch, np: int, hostfile: str | None,
                  oversubscribe: bool) -> list[str]:
    """The command line, up to the executable, of a family launched by Hydra (MPICH,
    MVAPICH2, Intel MPI): its own mpiexec, which passes the environment to every rank, or
    srun inside an allocation."""
    launcher = launch.launcher or "mpiexec"
    if launcher not in ("mpiexec", "srun"):
        raise ColltuneError(f"{launcher} does not launch {family} jobs for colltune",
                            f"use --launcher mpiexec ({family}'s own), or srun inside an "
                            "allocation")
    return command(launcher, mpiexec if launcher == "mpiexec" else "srun",
                   Layout(np, launch.nodes, launch.ppn, hostfile, oversubscribe, launch.args))

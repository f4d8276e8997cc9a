"""Command lines for the launchers users already have (Open MPI `mpirun`, Slurm `srun`,
MPICH/Hydra `mpiexec`, MVAPICH2 `mpirun_rsh`), and what a Slurm allocation offers.

colltune never starts remote processes itself: it builds the command the site's own
launcher understands, with the layout (nodes x ranks per node), binding, and the MCA or
environment settings a launch needs."""

from __future__ import annotations

import functools
import os
import re
import subprocess
import sys
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


@functools.lru_cache(maxsize=4)
def srun_mpi_types(program: str) -> tuple[str, ...]:
    """The PMI plugins this Slurm offers (`srun --mpi=list`), e.g. pmix, pmix_v4, pmi2."""
    try:
        r = subprocess.run([program, "--mpi=list"], capture_output=True, text=True,
                           timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ()
    text = r.stdout + r.stderr
    # its plugins one a line, tab-indented (Slurm 22.05; "srun: " before each in older ones)
    names = [ln.split()[-1] for ln in text.splitlines()
             if re.fullmatch(r"(\t|srun: +)[a-z][a-z0-9_]*", ln.rstrip())]
    for m in re.finditer(r"versions available:\s*(.+)", text):
        names += [v.strip() for v in m.group(1).split(",") if v.strip()]
    return tuple(dict.fromkeys(n for n in names if n != "MPI"))


_told: set[str] = set()


def _tell_once(text: str) -> None:
    """Say which PMI srun was given, once a process (each launch would repeat it)."""
    if text not in _told:
        _told.add(text)
        print(f"note: {text}", file=sys.stderr)


def srun_mpi(program: str, extra: tuple[str, ...], env: Mapping[str, str],
             built_for: tuple[str, ...]) -> list[str]:
    """srun's `--mpi=` for this MPI: the user's own (`--launcher-args --mpi=...`, or
    SLURM_MPI_TYPE), else the first of `built_for` (the PMIs the installation was built
    for, best first) that `srun --mpi=list` offers. Without one, srun starts each rank
    as a singleton (a site's MpiDefault=none)."""
    if any(a == "--mpi" or a.startswith("--mpi=") for a in extra):
        return []
    if env.get("SLURM_MPI_TYPE"):
        _tell_once(f"srun --mpi={env['SLURM_MPI_TYPE']} (from SLURM_MPI_TYPE)")
        return []
    offered = srun_mpi_types(program)
    if not offered:  # this srun lists nothing (no Slurm configuration here): trust the build
        _tell_once(f"srun --mpi={built_for[0]}: this MPI was built for it (srun --mpi=list "
                   "did not answer)")
        return [f"--mpi={built_for[0]}"]
    for kind in built_for:
        if kind in offered:
            _tell_once(f"srun --mpi={kind}: this MPI was built for {' or '.join(built_for)}, "
                       f"and srun --mpi=list offers {', '.join(offered)}")
            return [f"--mpi={kind}"]
    raise ColltuneError(
        f"srun offers no PMI this MPI can use: it offers {', '.join(offered) or 'none'}; "
        f"this MPI needs {' or '.join(built_for)}",
        "ask the site which PMI to use and pass --launcher-args --mpi=TYPE (or set "
        "SLURM_MPI_TYPE), or use --launcher mpirun inside the allocation")


def _users_binding(extra: tuple[str, ...], option: str, ours: str) -> bool:
    """Whether --launcher-args binds the ranks itself; then that binding applies, not
    colltune's, and the output says so once."""
    given = [a for a in extra if a == option or a.startswith(option + "=")]
    if given:
        i = extra.index(given[-1])
        value = given[-1].split("=", 1)[1] if "=" in given[-1] else \
            (extra[i + 1] if i + 1 < len(extra) else "")
        _tell_once(f"binding: {option} {value} from --launcher-args applies, not colltune's "
                   f"{option} {ours}")
    return bool(given)


def _env_prefix(env: Mapping[str, str]) -> list[str]:
    """Settings for launchers without an option for them: `env K=V ... launcher`, which
    every launcher here forwards to the ranks (srun exports the environment by default)."""
    return ["env", *(f"{k}={v}" for k, v in env.items())] if env else []


def command(  # noqa: C901 (a branch per launcher (mpirun, mpiexec, srun, smpirun) and option)
        launcher: str, program: str, layout: Layout, mca: Mapping[str, str] | None = None,
        env: Mapping[str, str] | None = None, pmi: tuple[str, ...] = ()) -> list[str]:
    """The launcher's command line up to (not including) the executable. `program` is the
    launcher's path; `mca` are Open MPI MCA parameters; `env` goes to every rank; `pmi`:
    the PMIs the MPI was built for, best first (srun: see srun_mpi)."""
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
        elif (n.ppn or n.nodes) and not _users_binding(n.extra, "--bind-to", "core"):
            cmd += ["--bind-to", "core"]  # one rank per core: stable timings
        for k, v in mca.items():
            cmd += ["--mca", k, str(v)]
        for k in env:
            cmd += ["-x", k]  # the value comes from mpirun's own environment
        return _env_prefix(env) + cmd + list(n.extra)
    if launcher == "srun":
        cmd = [program, "-n", str(n.np)]
        if pmi:
            cmd += srun_mpi(program, n.extra, {**os.environ, **env}, pmi)
        if n.nodes:
            cmd += ["-N", str(n.nodes)]
        if n.ppn:
            cmd += ["--ntasks-per-node", str(n.ppn)]
        ours = "--cpu-bind=none" if n.oversubscribe else "--cpu-bind=cores"
        if not _users_binding(n.extra, "--cpu-bind", ours.split("=")[1]):
            cmd += [ours]
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

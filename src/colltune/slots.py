"""How many ranks fit where: cores here, a Slurm allocation, or a hostfile."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace

from colltune.errors import ColltuneError, FormatError, read_text
from colltune.host import cores
from colltune.jobdir import require_shared
from colltune.launchers import Launch, SlurmAllocation, default_launcher, slurm_allocation


@dataclass(frozen=True)
class Placement:
    np: int
    oversubscribe: bool
    hostfile: str | None
    nodes: int
    ppn: int
    warning: str | None = None
    launch: Launch = Launch()  # launcher, and what to ask it for (resolved: never None)
    # a rung of a ladder of communicator sizes: measured inside this launch, on groups of
    # `np` consecutive ranks that all run at once (None: a launch of its own)
    within: Placement | None = None

    @property
    def launched(self) -> Placement:
        """The job that is started to measure at this communicator size."""
        return self.within or self

    @property
    def group(self) -> int:
        """Ranks per communicator inside the launched job (0: the whole job)."""
        return self.np if self.within else 0


def ladder(top: Placement, sizes: list[int]) -> list[Placement]:
    """One placement per communicator size, every one but `top` itself measured inside
    `top`'s launch: its groups fill the same nodes the same way (block placement), so a
    rung's context records the launch's ranks per node and the nodes a group spans."""
    bad = [s for s in sizes if s < 2 or s > top.np]
    if bad:
        raise ColltuneError(
            f"--comm-sizes {','.join(map(str, bad))}: each must be 2 to --np {top.np}",
            f"e.g. --comm-sizes 2:{top.np}")
    return [top if s == top.np else
            replace(top, np=s, nodes=-(-s // top.ppn), warning=None, within=top)
            for s in sorted(set(sizes))]


def parse_layouts(text: str) -> list[tuple[int, int]]:
    """--layouts 2x2,1x4: (nodes, ranks per node) each, in the order given."""
    out = []
    for word in text.split(","):
        m = re.fullmatch(r"\s*(\d{1,6})x(\d{1,6})\s*", word)
        if not m or int(m.group(1)) < 1 or int(m.group(2)) < 1 or \
                int(m.group(1)) * int(m.group(2)) < 2:
            raise ColltuneError(f"--layouts: cannot read {word.strip()[:40]!r} as a layout",
                                "give NODESxPPN, at least 2 ranks each, e.g. --layouts 2x2,1x4")
        out.append((int(m.group(1)), int(m.group(2))))
    if len(set(out)) < len(out):
        raise ColltuneError("--layouts names a layout twice", "e.g. --layouts 2x2,1x4")
    return out


def layout_name(p: Placement) -> str:
    """A placement's layout as --layouts spells it: 2x2."""
    return f"{p.nodes}x{p.ppn}"


def hostfile_hosts(path: str) -> int:
    """How many distinct hosts a hostfile names (its first word on each line)."""
    try:
        return max(1, len(hostfile_hosts_slots(path)))
    except ColltuneError:
        return 1  # hostfile_slots says why


def hostfile_hosts_slots(path: str) -> list[tuple[str, int]]:
    """Each host of a hostfile, in order, with its slots: Open MPI's `host slots=N`,
    Hydra's `host:N`, else 1 a line (a host on several lines adds them up)."""
    try:  # a regular UTF-8 file of bounded size: not a FIFO (a hang), not /dev/zero
        text = read_text(path)
    except FormatError as e:
        raise ColltuneError(f"cannot read hostfile {e}", "pass a hostfile (a regular text "
                            "file: one host a line) with --hostfile") from None
    hosts: dict[str, int] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        # `slots` as a whole word: `max_slots=8 slots=1` has 1 slot, not 8
        m = re.search(r"(?<![\w-])slots\s*=\s*(\d{1,9})", line) or \
            re.match(r"[^\s:]+:(\d{1,9})\b", line)
        host = line.split()[0].split(":")[0]
        hosts[host] = hosts.get(host, 0) + (int(m.group(1)) if m else 1)
    return list(hosts.items())


def hostfile_slots(path: str) -> int:
    return sum(n for _, n in hostfile_hosts_slots(path))


def hostfile_fill(path: str, np: int) -> tuple[int, int]:
    """(nodes, most ranks on one) of `np` ranks filling the hostfile's slots host by host,
    as mpirun and Hydra place them when told nothing else."""
    left, nodes, ppn = np, 0, 0
    for _, slots in hostfile_hosts_slots(path):
        take = min(slots, left)
        if take:
            nodes, ppn, left = nodes + 1, max(ppn, take), left - take
    return max(nodes, 1), max(ppn, 1)


# ranks per core above which a launch on this machine is refused: 4 ranks on 2 cores
# already differ 2.5x from launch to launch (docs/benchmarks.md); 512 on 2 measured
# nothing in a minute
MAX_OVERSUBSCRIPTION = 4


def refuse_heavy_oversubscription(p: Placement) -> None:
    """Refuse a launch on this machine with more than MAX_OVERSUBSCRIPTION ranks per core,
    before it starts, saying what gives numbers instead."""
    n = cores()
    if p.oversubscribe and p.nodes == 1 and not p.hostfile and p.ppn > MAX_OVERSUBSCRIPTION * n:
        raise ColltuneError(
            f"--np {p.np}: {p.ppn} ranks on this machine's {n} cores is "
            f"{p.ppn / n:.0f}x oversubscribed; what it measured would be the scheduler",
            "use --predict (fit models at small --np, predict this one), --backend smpi "
            "--platform FILE (simulate it), --slurm-script FILE (run it where the cores "
            "are) or a --hostfile; --oversubscribe runs it here anyway")


def refuse_unavailable(nodes: int, hostfile: str | None,
                       alloc: SlurmAllocation | None) -> None:
    """Refuse, before any launch (and any plan), a layout on more nodes than the hostfile
    names or the Slurm allocation holds: the launcher would place it otherwise, and the
    tune would stop at its first launch."""
    have, where = (len(hostfile_hosts_slots(hostfile)), hostfile) if hostfile else (
        (alloc.nodes, f"Slurm job {alloc.job_id}") if alloc else (0, ""))
    if where and nodes > have:
        raise ColltuneError(f"--nodes {nodes}: {where} has {have} node(s)",
                            "ask for the nodes (a larger allocation, more hosts in the "
                            "hostfile), or lower --nodes")


def place(np: int, hostfile: str | None = None, env: Mapping[str, str] | None = None,
          launch: Launch | None = None) -> Placement:
    """Decide the launcher and oversubscription, or refuse when an allocation is too
    small for what was asked, or when a job across nodes would keep its files where only
    one node sees them."""
    p = _place(np, hostfile, os.environ if env is None else env, launch)
    require_shared(max(p.nodes, hostfile_hosts(hostfile) if hostfile else 1))
    return p


def _place(np: int, hostfile: str | None, env: Mapping[str, str],
           launch: Launch | None) -> Placement:
    if np < 2:
        raise ColltuneError(f"--np {np}: a collective needs at least 2 ranks to tune",
                            "pass --np 2 or more")
    want = launch or Launch()
    want = Launch(default_launcher(env, want.launcher), want.nodes, want.ppn, want.args)
    if want.nodes is not None and want.nodes < 1 or want.ppn is not None and want.ppn < 1:
        raise ColltuneError("--nodes and --ppn must be at least 1", "e.g. --nodes 4 --ppn 16")
    if want.nodes and want.ppn and want.nodes * want.ppn < np:
        raise ColltuneError(f"--np {np} does not fit in {want.nodes} nodes x {want.ppn} ranks",
                            "raise --nodes or --ppn, or lower --np")
    if want.nodes or want.ppn:
        nodes = want.nodes or -(-np // (want.ppn or np))
        ppn = want.ppn or -(-np // nodes)
        refuse_unavailable(nodes, hostfile, slurm_allocation(env))
        # only on this one machine can the cores be counted
        over = nodes == 1 and not hostfile and slurm_allocation(env) is None and ppn > cores()
        return Placement(np, over, hostfile, nodes, ppn, launch=want,
                         warning=f"{ppn} ranks on {cores()} cores: running oversubscribed"
                         if over else None)
    alloc = slurm_allocation(env)
    if alloc:
        if alloc.tasks and np > alloc.tasks:
            raise ColltuneError(
                f"--np {np} is more than the {alloc.tasks} tasks of Slurm job {alloc.job_id}",
                f"request more tasks (salloc -n {np}) or lower --np",
            )
        nodes = min(alloc.nodes, np)
        return Placement(np, False, hostfile, nodes, -(-np // nodes), launch=want)
    if hostfile:
        slots = hostfile_slots(hostfile)
        if np > slots:
            raise ColltuneError(f"--np {np} is more than the {slots} slots in {hostfile}",
                                "add hosts or slots to the hostfile, or lower --np")
        return Placement(np, False, hostfile, *hostfile_fill(hostfile, np), launch=want)
    n = cores()
    if np > n:
        return Placement(np, True, None, 1, np,
                         warning=f"{np} ranks on {n} cores: running oversubscribed, so timings "
                                 "include scheduling effects", launch=want)
    return Placement(np, False, None, 1, np, launch=want)

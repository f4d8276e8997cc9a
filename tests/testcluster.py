"""A small cluster on one machine, from real parts: N "nodes" as network namespaces on one
bridge, each with its own hostname and a private /tmp and /dev/shm (node-local, as on a
compute node),
the rest of the file system shared (home, work directories); munge, and a real Slurm:
slurmctld on the first node, one slurmd per node (each in its node's namespaces).

Run by hand: `python tests/testcluster.py up [NODES [1gbit|10gbit]]` prints how to enter
node 1 (the links shaped like that Ethernet: `Cluster.shape`, LINKS); `down` removes it.

Commands run "on" a node through `Cluster.on(node, argv)`: nsenter into the namespaces of
a process that holds them (a `sleep` per node)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

SUBNET = "10.78.0"
REPO = Path(__file__).resolve().parent.parent
SLURM_LIBS = Path("/usr/lib/x86_64-linux-gnu/slurm-wlm")
# an Open MPI 6 built by hand in /tmp (docs/openmpi.md; tests/test_ompi6_live.py), kept
# visible on every node where it is
OMPI6 = Path(os.environ.get("COLLTUNE_OMPI6_PREFIX", "/tmp/ompi6/install"))

# Open MPI's ranks busy-poll; across this machine's veth links a packet reaches a
# busy-polling receiver only at its CPU's next timer tick (4 ms: docs/cluster.md, "the test
# cluster's latency"). Ranks that yield when idle see it at once (13 us), as on a NIC.
NODE_ENV = {"OMPI_MCA_mpi_yield_when_idle": "1"}


@dataclass(frozen=True)
class Link:
    """How each node's port is shaped, both ways (its veth's node end and its switch end):
    a token bucket (tc's tbf: `netem` is not in this kernel, so no propagation delay) of
    `rate`, `burst` bytes at line speed, and `limit` bytes queued, a switch port's buffer,
    beyond which packets drop (TCP retransmits them, as on a real switch)."""

    name: str
    rate: str
    burst: str
    limit: int

    def qdisc(self) -> list[str]:
        return ["tbf", "rate", self.rate, "burst", self.burst, "limit", str(self.limit)]


# Named link profiles (docs/cluster.md, "Links like Ethernet"): Gigabit Ethernet as the first
# seeds' clusters had it (Open MPI's point-to-point gets about 113 MB/s over it), and 10 Gb/s
LINKS = {"1gbit": Link("1gbit", "1gbit", "32kb", 262144),
         "10gbit": Link("10gbit", "10gbit", "256kb", 2097152)}


def _run(*argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(list(argv), capture_output=True, text=True, check=False)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {r.stderr.strip() or r.stdout.strip()}")
    return r


@dataclass
class Cluster:
    tag: str
    nodes: int
    root: Path  # shared: the home and work directories, Slurm's files
    holders: dict[str, int] = field(default_factory=dict)  # node name -> holder pid
    daemons: list[subprocess.Popen[bytes]] = field(default_factory=list)
    link: Link | None = None  # how the ports are shaped now (None: memory-speed veth)
    # how this machine's cores are split among the nodes: node name -> the CPUs (taskset's
    # list) everything started on it may run on; none named: every core, the scheduler
    # sharing them (`split_cores`)
    cores: dict[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        return [f"node{i + 1}" for i in range(self.nodes)]

    def addr(self, name: str) -> str:
        return f"{SUBNET}.{self.names.index(name) + 1}"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def agent(self) -> str:
        return str(self.root / "agent")

    @property
    def slurm_conf(self) -> str:
        return str(self.root / "slurm.conf")

    def hostfile(self, ppn: int) -> str:
        path = self.root / f"hosts.{ppn}"
        path.write_text("".join(f"{self.addr(n)} slots={ppn}\n" for n in self.names))
        return str(path)

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a user on this cluster: home and caches on the shared file
        system, Slurm's configuration, Open MPI as root."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("SLURM_", "OMPI_MCA_", "PMIX_"))}
        env.update(HOME=str(self.home), XDG_CACHE_HOME=str(self.home / ".cache"),
                   SLURM_CONF=self.slurm_conf, OMPI_ALLOW_RUN_AS_ROOT="1",
                   OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", TMPDIR="/tmp", **NODE_ENV)
        env.pop("COLLTUNE_JOB_DIR", None)
        env.update(extra)
        return env

    def port(self, name: str) -> str:
        """Node `name`'s network device: its end of the veth to the switch."""
        return f"{self.tag}v{self.names.index(name) + 1}"

    @property
    def net_devices(self) -> str:
        """Every node's port, comma-separated (UCX_NET_DEVICES: each node has one of them)."""
        return ",".join(self.port(n) for n in self.names)

    def rx_bytes(self, name: str) -> int:
        """Bytes node `name` received over its link (its veth's own counter)."""
        i = self.names.index(name) + 1
        return int(_run("ip", "netns", "exec", f"{self.tag}n{i}", "cat",
                        f"/sys/class/net/{self.port(name)}/statistics/rx_bytes").stdout)

    def tcp(self, names: list[str] | None = None) -> dict[str, int]:
        """Retransmitted segments and retransmission timeouts, summed over the nodes named
        (all by default), each node a network namespace with counters of its own
        (/proc/net/netstat and snmp: a header line of names, then a line of values, per
        protocol)."""
        total = {"RetransSegs": 0, "TCPTimeouts": 0}
        for name in self.names if names is None else names:
            lines = self.on(name, ["cat", "/proc/net/netstat", "/proc/net/snmp"]
                            ).stdout.splitlines()
            for head, vals in zip(lines[::2], lines[1::2], strict=True):
                for k, v in zip(head.split()[1:], vals.split()[1:], strict=True):
                    if k in total:
                        total[k] += int(v)
        return total

    def enter(self, name: str, cwd: str | Path | None = None) -> list[str]:
        """The command prefix that runs what follows on node `name`, in `cwd` (the shared
        home by default). A `cd` inside, not nsenter's --wd: that directory would be the one
        of the mount namespace nsenter started in, and renames from it to a path opened in
        the node's fail (EXDEV)."""
        pin = ["taskset", "-c", self.cores[name]] if self.cores.get(name) else []
        return ["nsenter", "-t", str(self.holders[name]), "--net", "--mount", "--uts", *pin,
                "sh", "-c", 'cd "$0" && exec "$@"', str(cwd or self.home)]

    def split_cores(self) -> dict[str, str]:
        """Give each node cores of its own, as far as the machine has them: node i the
        (i-1)-th share of os.sched_getaffinity's cores (on 2 cores and 2 nodes, one each;
        more nodes than cores share them round-robin). Takes effect for what is started on
        a node after it (Slurm's daemons, started before, keep every core)."""
        cpus = sorted(os.sched_getaffinity(0))
        share = max(1, len(cpus) // self.nodes)
        self.cores = {n: ",".join(str(c) for c in (cpus[(i * share + k) % len(cpus)]
                                                   for k in range(share)))
                      for i, n in enumerate(self.names)}
        return self.cores

    def ports(self) -> list[tuple[str, str]]:
        """Each node's port, both ends: (namespace, device) of the node's end and of the
        switch's."""
        sw = f"{self.tag}sw"
        return [end for i in range(1, self.nodes + 1)
                for end in ((f"{self.tag}n{i}", f"{self.tag}v{i}"), (sw, f"{self.tag}p{i}"))]

    def shape(self, link: Link | None) -> None:
        """Every port shaped as `link` says, both ways (None: memory-speed veth again). A
        kernel that cannot apply it (no tc, no tbf) raises, naming what is missing: the
        tests that need it fail, never skip."""
        if link is not None and not shutil.which("tc"):
            raise RuntimeError("shaping the links needs tc (Debian: iproute2)")
        for ns, dev in self.ports():
            if link is None:
                _run("tc", "-n", ns, "qdisc", "del", "dev", dev, "root", check=False)
                continue
            r = _run("tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", *link.qdisc(),
                     check=False)
            if r.returncode != 0:
                raise RuntimeError(f"the link profile {link.name} cannot be applied to {dev} "
                                   f"(tc tbf: {r.stderr.strip()}): is the sch_tbf module "
                                   "there?")
        self.link = link

    def qdiscs(self) -> dict[str, str]:
        """What the kernel says of each port's queueing (tc -s): device -> its text."""
        return {dev: _run("tc", "-n", ns, "-s", "qdisc", "show", "dev", dev).stdout
                for ns, dev in self.ports()}

    def on(self, name: str, argv: list[str], timeout: float = 600,
           env: dict[str, str] | None = None, cwd: str | Path | None = None
           ) -> subprocess.CompletedProcess[str]:
        prefix = self.enter(name, cwd)
        return subprocess.run([*prefix, *argv], capture_output=True, text=True,
                              timeout=timeout, check=False, env=env or self.env())

    # -- building and removing -------------------------------------------------------------

    def up(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.home.mkdir(exist_ok=True)
        # the nodes' names resolve on every node, as a cluster's do (Intel MPI's proxies
        # connect back to the launching node by its name)
        hosts = Path("/etc/hosts").read_text() if Path("/etc/hosts").exists() else ""
        (self.root / "hosts").write_text(hosts + "".join(
            f"{self.addr(n)} {n}\n" for n in self.names))
        sw = f"{self.tag}sw"
        _run("ip", "netns", "add", sw)
        _run("ip", "-n", sw, "link", "add", "br0", "type", "bridge")
        _run("ip", "-n", sw, "link", "set", "br0", "up")
        for i, name in enumerate(self.names, start=1):
            ns, inner, outer = f"{self.tag}n{i}", f"{self.tag}v{i}", f"{self.tag}p{i}"
            _run("ip", "netns", "add", ns)
            _run("ip", "link", "add", inner, "type", "veth", "peer", "name", outer)
            _run("ip", "link", "set", inner, "netns", ns)
            _run("ip", "link", "set", outer, "netns", sw)
            _run("ip", "-n", sw, "link", "set", outer, "master", "br0")
            _run("ip", "-n", sw, "link", "set", outer, "up")
            _run("ip", "-n", ns, "addr", "add", f"{SUBNET}.{i}/24", "dev", inner)
            _run("ip", "-n", ns, "link", "set", inner, "up")
            _run("ip", "-n", ns, "link", "set", "lo", "up")
            holder = subprocess.Popen(
                # nsenter, not `ip netns exec`: that remounts /sys, and slurmd needs the
                # cgroup file systems mounted under it
                ["nsenter", f"--net=/run/netns/{ns}", "unshare", "--mount", "--uts",
                 "--propagation", "private", "sh", "-c", self._node_script(name)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
            assert holder.stdout is not None
            line = holder.stdout.readline().decode().strip()
            if line != "ready":
                raise RuntimeError(f"node {name} did not start: "
                                   f"{holder.stderr.read().decode() if holder.stderr else ''}")
            self.daemons.append(holder)
            # the holder's pid is the shell exec'ed into sleep: its namespaces are the node's
            self.holders[name] = holder.pid
        self._write_agent()

    @property
    def kept(self) -> list[Path]:
        """The software under test where it lives under /tmp (a CI checkout there): kept
        visible in every node's private /tmp, as a cluster's software is on a shared file
        system too."""
        return [p for p in dict.fromkeys([REPO, Path(sys.prefix).resolve(), OMPI6.resolve()])
                if Path("/tmp") in p.parents and p.exists()]

    def _node_script(self, name: str) -> str:
        """The node's start: its hostname, a private /tmp and /dev/shm, the nodes' names in
        /etc/hosts, the software kept."""
        keep = self.kept
        stash = Path(f"/run/colltune-{self.tag}")
        lines = [f"set -e; hostname {name}"]
        for i, p in enumerate(keep):
            lines += [f"mkdir -p {stash}/{name}{i}", f"mount --bind '{p}' {stash}/{name}{i}"]
        # /dev/shm too: a node's shared memory is its own (Open MPI's sm segments live there)
        lines.append("mount -t tmpfs -o mode=1777 tmpfs /tmp; "
                     "mount -t tmpfs -o mode=1777 tmpfs /dev/shm; "
                     f"mount --bind {self.root}/hosts /etc/hosts")
        # the node's own network devices under /sys/class/net, as a node's sysfs shows
        # them: nsenter keeps the machine's /sys (slurmd needs its cgroup mounts), whose
        # net class lists the machine's devices, not this namespace's. UCX keeps only the
        # devices it finds there, so it saw `lo` alone and its TCP stalled between nodes
        # (docs/ucc.md). A sysfs mounted here is this network namespace's; only its net
        # class is bound over the machine's.
        sysfs = f"{stash}/{name}-sys"
        lines += [f"mkdir -p {sysfs}", f"mount -t sysfs sysfs {sysfs}",
                  f"mount --bind {sysfs}/class/net /sys/class/net",
                  f"mount --bind {sysfs}/devices/virtual/net /sys/devices/virtual/net"]
        for i, p in enumerate(keep):
            lines += [f"mkdir -p '{p}'", f"mount --bind {stash}/{name}{i} '{p}'"]
        return "; ".join([*lines, "echo ready", "exec sleep infinity"])

    def _write_agent(self) -> None:
        """What ssh would do for mpirun: run the command line on the named host."""
        cases = "".join(f"  {self.addr(n)}|{n}) p={self.holders[n]};;\n" for n in self.names)
        exports = "".join(f"export {k}={v}\n" for k, v in NODE_ENV.items())
        agent = Path(self.agent)
        agent.write_text(
            "#!/bin/sh\nhost=$1; shift\ncase $host in\n" + cases +
            '  *) echo "agent: unknown host $host" >&2; exit 255;;\nesac\n' + exports +
            # a session of its own, as sshd gives a remote command: the launcher's
            # session on the first node does not reach into the other nodes
            'exec setsid -w nsenter -t $p --net --mount --uts '
            'sh -c "cd \'$PWD\' 2>/dev/null; $*"\n')
        agent.chmod(0o755)

    def slurm_up(self, timeout: float = 60) -> None:
        """munge (one for all nodes: its socket is a file every node sees), slurmctld on
        node 1, a slurmd per node; returns when every node is idle."""
        spool = self.root / "spool"
        spool.mkdir(exist_ok=True)
        for n in self.names:
            (spool / f"d-{n}").mkdir(exist_ok=True)
        logs = self.root / "log"
        logs.mkdir(exist_ok=True)
        run = Path("/run/munge")
        if _run("munge", "-n", check=False).returncode != 0:
            # none running (a socket left by an ended one is stale: --force replaces it)
            run.mkdir(parents=True, exist_ok=True)
            shutil.chown(run, "munge", "munge")
            _run("runuser", "-u", "munge", "--", "/usr/sbin/munged", "--force")
        first = self.names[0]
        Path(self.slurm_conf).write_text("\n".join([
            f"ClusterName={self.tag}",
            f"SlurmctldHost={first}({self.addr(first)})",
            "AuthType=auth/munge", "CredType=cred/munge", "SlurmUser=root",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_Core",
            "MpiDefault=none", "ReturnToService=2",
            f"SlurmctldPidFile={self.root}/slurmctld.pid",
            f"SlurmdPidFile={self.root}/slurmd-%n.pid",
            f"StateSaveLocation={spool}/ctld", f"SlurmdSpoolDir={spool}/d-%n",
            f"SlurmctldLogFile={logs}/slurmctld.log", f"SlurmdLogFile={logs}/slurmd-%n.log",
            "SlurmctldTimeout=30", "SlurmdTimeout=30", "InactiveLimit=0", "KillWait=5",
            "SchedulerParameters=sched_interval=1",
            # sbatch --wait polls after 2, 8, then every 32 s while a poll is under half
            # MinJobAge (300 s by default): a 10 s job was seen done after 42 s. At 4 it
            # polls every 2 s; a finished job's record still outlives two polls
            "MinJobAge=4",
            f"NodeName=node[1-{self.nodes}] NodeAddr={SUBNET}.[1-{self.nodes}] CPUs=2 "
            "RealMemory=2000 State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=FORCE:4", ""]))
        env = self.env()
        self.daemons.append(subprocess.Popen([*self.enter(first), "slurmctld", "-D", "-i"],
                                             env=env, stdout=subprocess.DEVNULL,
                                             stderr=subprocess.DEVNULL,
                                             start_new_session=True))
        for n in self.names:
            self.daemons.append(subprocess.Popen([*self.enter(n), "slurmd", "-D"], env=env,
                                                 stdout=subprocess.DEVNULL,
                                                 stderr=subprocess.DEVNULL,
                                                 start_new_session=True))
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            r = self.on(first, ["sinfo", "-h", "-N", "-o", "%N %t"], timeout=20)
            states = dict(ln.split() for ln in r.stdout.splitlines() if len(ln.split()) == 2)
            if len(states) == self.nodes and all(s in ("idle", "mix") for s in states.values()):
                return
            time.sleep(0.5)
        log = (logs / "slurmctld.log").read_text()[-2000:] if (logs / "slurmctld.log").exists() \
            else ""
        raise RuntimeError(f"Slurm's nodes did not come up in {timeout:.0f} s: {r.stdout} "
                           f"{r.stderr} {log}")

    def down(self) -> None:
        for p in reversed(self.daemons):
            try:
                os.killpg(p.pid, 15)
            except ProcessLookupError:
                pass
        for p in self.daemons:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, 9)
                p.wait()
        for i in range(1, self.nodes + 1):
            _run("ip", "netns", "del", f"{self.tag}n{i}", check=False)
        _run("ip", "netns", "del", f"{self.tag}sw", check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        shutil.rmtree(f"/run/colltune-{self.tag}", ignore_errors=True)


def why_not() -> str | None:
    """Why a test cluster cannot be built here, or None."""
    if os.geteuid() != 0:
        return "needs root for network namespaces and Slurm's daemons"
    for tool in ("ip", "unshare", "nsenter"):
        if not shutil.which(tool):
            return f"needs {tool} (iproute2, util-linux)"
    return None


def slurm_why_not() -> str | None:
    for tool in ("slurmctld", "slurmd", "srun", "munged"):
        if not shutil.which(tool) and not Path(f"/usr/sbin/{tool}").exists():
            return f"needs {tool} (Debian: slurm-wlm munge)"
    return None


def make(nodes: int = 2, slurm: bool = True) -> Cluster:
    tag = f"tc{os.getpid() % 100000}"
    c = Cluster(tag, nodes, Path(f"/home/colltune-{tag}"))
    try:
        c.up()
        if slurm:
            c.slurm_up()
    except BaseException:
        c.down()
        raise
    return c


if __name__ == "__main__":
    if sys.argv[1:2] == ["up"]:
        cl = make(int(sys.argv[2]) if len(sys.argv) > 2 else 2)
        if len(sys.argv) > 3:  # a link profile: 1gbit or 10gbit
            cl.shape(LINKS[sys.argv[3]])
        print(f"{cl.tag} up: " + " ".join(cl.enter(cl.names[0])) + " bash")
        print(f"SLURM_CONF={cl.slurm_conf}; holders {cl.holders}")
        cl.daemons = []  # leave them running

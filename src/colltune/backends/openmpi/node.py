"""The point-to-point components Open MPI selects on this node, probed once per installation
and host, so a one-node launch can name them and skip initialising the ones that fail here.

Why: the PyPI wheel of Open MPI 5.0.11 carries libfabric's components (btl ofi, and pml cm
over mtl ofi); on a node without a fabric they fail to initialise, and trying costs 1.1 s
of a 1.24 s launch. pml ob1 over self/sm/tcp runs either way, so naming what succeeded
changes nothing the library does, only how long it takes to start (docs/benchmarks.md).
Debian's Open MPI 4.1.4 opens pml cm, whose psm/psm2 transports fail to open here: 0.2 s of
a 0.38 s 4-rank launch; a pml that did not even open is excluded too.
Across nodes nothing is named: other hosts may have a fabric.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path

from colltune import jobdir, private
from colltune.core.toolchain import Toolchain
from colltune.kernel.build import build_kernel

VERBOSE = {"pml_base_verbose": "10", "btl_base_verbose": "10"}  # the selection log

_PML_FAILED = re.compile(r"select: init returned failure for component (\w+)")
_BTL_OK = re.compile(r"select: init of component (\w+) returned success")
_PML_SELECTED = re.compile(r"select: component (\w+) selected")
_PREFIX = re.compile(r"^\[([^\]]+)\]")  # [host:pid]: one process's lines
_OPENED = re.compile(r"component (\w+) open function successful")
_FOUND = re.compile(r"components_register: found loaded component (\w+)")


def _open_failures(log: str) -> set[str]:
    """The pml components that every process registered but could not open (their
    transports absent): in each process's log, the names found between the pml framework's
    registration and its opening, less those whose open succeeded (in any framework: a
    name shared with another framework is kept, the safe side)."""
    procs: dict[str, list[str]] = {}
    for line in log.splitlines():
        m = _PREFIX.match(line)
        if m:
            procs.setdefault(m.group(1), []).append(line)
    out: set[str] | None = None
    for lines in procs.values():
        names: set[str] = set()
        inside = False
        for line in lines:
            if "registering framework pml components" in line:
                inside = True
            elif inside and ("components_open" in line or "registering framework" in line):
                inside = False
            elif inside and (m := _FOUND.search(line)):
                names.add(m.group(1))
        failed = names - {m.group(1) for ln in lines if (m := _OPENED.search(ln))}
        out = failed if out is None else out & failed
    return out or set()


def parse(log: str, configured: str = "") -> dict[str, str]:
    """MCA settings from a launch's pml/btl selection log: the byte transfer layers whose
    init succeeded, and every pml whose open or init failed excluded. {} unless the log
    shows ob1 selected (with cm or ucx selected, the btls are not what carries the messages).
    `configured` is the pml value the installation's parameter files set: naming pml on
    the command line replaces it, so its exclusions are kept (Debian's 4.1 excludes ucx
    there); a list of pmls to use is theirs, and pml is not named."""
    if set(_PML_SELECTED.findall(log)) != {"ob1"}:
        return {}
    btls = sorted(set(_BTL_OK.findall(log)))
    if "self" not in btls:
        return {}
    out = {"btl": ",".join(btls)}
    if configured and not configured.startswith("^"):
        return out
    failed = set(_PML_FAILED.findall(log)) | _open_failures(log)
    if failed:
        theirs = {c for c in configured.lstrip("^").split(",") if c}
        out["pml"] = "^" + ",".join(sorted(failed | theirs))
    return out


def configured_pml(ompi_info: Path) -> str | None:
    """The pml selection the installation's parameter files set ("" if none), as its own
    ompi_info reports it; None if it cannot tell."""
    try:
        res = subprocess.run([str(ompi_info), "--parsable", "--level", "9", "--param", "pml",
                              "all"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in res.stdout.splitlines():
        if line.startswith("mca:pml:base:param:pml:value:"):
            return line.split(":", 6)[6].strip()
    return None if res.returncode else ""


def _cache(mpi: Toolchain) -> Path:
    # beside the kernel built for this installation: a new kernel or MPI probes again
    # node2: failed opens are named too; a cache written before probes again
    return build_kernel(mpi).parent / f"node2-{socket.gethostname()}.json"


def node_mca(mpi: Toolchain, ompi_info: Path, launcher: Callable[[dict[str, str]], list[str]],
             env: dict[str, str]) -> dict[str, str]:
    """What a one-node launch of `mpi` names (cached); {} where the user set OMPI_MCA_pml
    or OMPI_MCA_btl (theirs stands) or the probe could not tell. `launcher(mca)` is a
    2-rank launch command up to the executable, `env` its environment."""
    if os.environ.get("OMPI_MCA_pml") or os.environ.get("OMPI_MCA_btl"):
        return {}
    # every launch asks: once per process, not a kernel lookup (mpicc calls) and a read each
    if str(mpi.mpicc) not in _known:
        _known[str(mpi.mpicc)] = _read_or_probe(mpi, ompi_info, launcher, env)
    return _known[str(mpi.mpicc)]


_known: dict[str, dict[str, str]] = {}


def _read_or_probe(mpi: Toolchain, ompi_info: Path,
                   launcher: Callable[[dict[str, str]], list[str]],
                   env: dict[str, str]) -> dict[str, str]:
    path = _cache(mpi)
    try:
        got = json.loads(path.read_text())
        if isinstance(got, dict) and all(isinstance(v, str) for v in got.values()):
            return {str(k): v for k, v in got.items() if k in ("pml", "btl")}
    except (OSError, ValueError):
        pass
    found = probe(mpi, ompi_info, launcher, env)
    if found:
        private.write(path, json.dumps(found))
    return found


def probe(mpi: Toolchain, ompi_info: Path, launcher: Callable[[dict[str, str]], list[str]],
          env: dict[str, str]) -> dict[str, str]:
    """Start the kernel on 2 ranks with the selection log on; {} if that fails."""
    with jobdir.temporary() as tmp:
        plan = Path(tmp) / "plan"
        plan.write_text("collective barrier\n")  # MPI_Init, no points, MPI_Finalize
        try:
            res = subprocess.run([*launcher(VERBOSE), str(build_kernel(mpi)), str(plan)],
                                 capture_output=True, text=True, timeout=60, env=env,
                                 check=False)
        except (OSError, subprocess.TimeoutExpired):
            return {}
    if res.returncode or (configured := configured_pml(ompi_info)) is None:
        return {}
    return parse(res.stdout + res.stderr, configured)

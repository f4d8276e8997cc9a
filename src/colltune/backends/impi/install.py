"""Intel MPI: find an installation, read its presets from impi_info, force one preset per
launch through I_MPI_ADJUST_<OP> (or one per size band through a tuning file), launch with
its own mpiexec.hydra.

Intel MPI fixes its choice per launch (writing its MPIR_CVAR_ algorithm variables through
MPI_T reads back but changes nothing), but a tuning file selects by message size: the
sweep's launches run many presets, each at sizes of its own (`banded_env`). Preset ids
change between releases: their range is read from `impi_info`, and what each preset runs is
read from the library itself (backends/impi/proof.py), never from a table kept here."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from colltune.backends.common import tools as common_tools
from colltune.core.catalog import Catalog
from colltune.core.toolchain import HydraToolchain
from colltune.errors import ColltuneError, MPIError
from colltune.kernel.build import build_kernel

if TYPE_CHECKING:
    from colltune.slots import Placement

INSTALL_HINT = ("install it into its own venv (python3 -m venv V && V/bin/pip install impi-rt "
                "impi-devel) and point at it with --mpi V")

# Intel MPI's selection variables and tuning files: inherited from the user's session they
# would change what the library runs under colltune's measurements (and a partial binary
# tuning file with any I_MPI_ADJUST_* crashes at start-up)
_INHERITED = re.compile(r"^I_MPI_(ADJUST_\w+|TUNING\w*|ROOT)$")


def adjust_var(coll: str) -> str:
    """The variable that selects `coll`'s preset: I_MPI_ADJUST_REDUCE_SCATTER_BLOCK."""
    return "I_MPI_ADJUST_" + coll.upper()


@dataclass(frozen=True)
class IntelMPI(HydraToolchain):
    """One Intel MPI installation (a venv with impi-rt and impi-devel, or oneAPI's mpi/latest),
    identified by its real binaries."""

    version: str
    prefix: Path
    mpicc: Path
    mpirun: Path  # mpiexec.hydra: `mpirun` is a script that finds it through PATH
    impi_info: Path
    name: str = "Intel MPI"

    @property
    def key(self) -> str:
        return f"impi-{self.version}@{self.prefix}"

    def describe(self) -> str:
        return f"{self.name} {self.version} at {self.prefix} (mpiexec.hydra {self.mpirun})"

    def tool_env(self) -> dict[str, str]:
        return launch_env(self.prefix)


def launch_env(prefix: Path, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment Intel MPI's tools and jobs need: I_MPI_ROOT (or its mpicc leaves a
    placeholder unfilled) and its lib/ (or impi_info and mpitune_fast crash), without the
    inherited selection variables."""
    env = {k: v for k, v in os.environ.items() if not _INHERITED.match(k)}
    env["I_MPI_ROOT"] = str(prefix)
    libs = [str(prefix / "lib"), str(prefix / "lib" / "release")]
    env["LD_LIBRARY_PATH"] = ":".join(libs + [p for p in env.get("LD_LIBRARY_PATH", "")
                                             .split(":") if p and p not in libs])
    env.update(extra or {})
    return env


def job_env(mpi: IntelMPI, extra: dict[str, str] | None = None) -> dict[str, str]:
    """launch_env for colltune's own jobs (sweeps, launch pairs, proofs): with quickcal
    preloaded, which shortens the 0.25 s clock calibration of Intel MPI's start-up (see
    kernel/quickcal.c); the user's own LD_PRELOAD is kept after it. Never for the jobs that
    judge a file (IMB, OSU, the application): those start as users' jobs do."""
    env = launch_env(mpi.prefix, extra)
    lib = str(build_kernel(mpi, name="quickcal"))
    env["LD_PRELOAD"] = ":".join([lib, *(p for p in env.get("LD_PRELOAD", "").split(":")
                                         if p and p != lib)])
    return env


def _run(cmd: list[str], prefix: Path) -> str:
    return common_tools.ask(cmd, prefix, "Intel MPI", env=launch_env(prefix))


def find_impi(prefix: str | Path | None) -> IntelMPI:
    """The Intel MPI under --mpi PREFIX (never guessed from PATH: its `mpirun` would start
    whichever mpiexec.hydra PATH holds first, Debian's MPICH one here)."""
    if not prefix:
        raise ColltuneError("--backend impi needs --mpi PREFIX", INSTALL_HINT)
    root = Path(prefix).expanduser().resolve()
    bindir = root / "bin"
    tools = {n: bindir / n for n in ("mpiexec.hydra", "mpicc", "impi_info")}
    missing = [n for n, p in tools.items() if not (p.exists() and os.access(p, os.X_OK))]
    if missing:
        raise MPIError(f"no Intel MPI under {root} (missing {', '.join(missing)} in "
                       f"{bindir})", INSTALL_HINT)
    said = _run([str(tools["mpiexec.hydra"]), "--version"], root)
    m = re.search(r"Intel\(R\) MPI Library.*?Version (\d[\w.]*)", said)
    if not m:
        raise common_tools.not_answered(tools["mpiexec.hydra"], said, "Intel MPI", root)
    return IntelMPI(m.group(1), root, tools["mpicc"], tools["mpiexec.hydra"],
                    tools["impi_info"])


def preset_range(mpi: IntelMPI, coll: str) -> int | None:
    """The highest preset id `impi_info` gives I_MPI_ADJUST_<OP> (None: not a variable this
    release has)."""
    text = _run([str(mpi.impi_info), "-e", "-v", adjust_var(coll)], mpi.prefix)
    m = re.search(r"range:\s*0\s*-\s*(\d+)", text)
    return int(m.group(1)) if m else None


class ImpiCatalog(Catalog):
    """Presets per collective (id = the I_MPI_ADJUST_<OP> value; impi_info gives no names:
    what each runs is read from the library, impi_proof)."""


def catalog(mpi: IntelMPI, collectives: list[str]) -> ImpiCatalog:
    cat = ImpiCatalog(source="impi_info")
    for coll in collectives:
        top = preset_range(mpi, coll)
        if top:
            cat.algorithms[coll] = {i: "preset" for i in range(1, top + 1)}  # label: preset(7)
    return cat


def forcing_env(coll: str, alg: int) -> dict[str, str]:
    """One preset for the whole launch (0: the library's own choice, nothing set)."""
    return {adjust_var(coll): str(alg)} if alg else {}


def banded_env(coll: str, np: int, at: dict[int, int], folder: Path) -> dict[str, str]:
    """A tuning file (in `folder`) that runs preset at[size] at each of those sizes, and the
    variable that loads it: one launch measures several presets (tuner/bands.py). At any
    other size it runs the largest size's preset."""
    from colltune.rules.impi_tuning import Rules, render

    limits: list[tuple[int | None, int]] = sorted(at.items())
    path = folder / f"bands-{coll}.json"
    path.write_text(render({coll: {np: Rules([*limits, (None, limits[-1][1])])}}))
    return {"I_MPI_TUNING": str(path)}


def launch_command(mpi: IntelMPI, placement: Placement) -> list[str]:
    from colltune.launchers import hydra_command

    return hydra_command("Intel MPI", str(mpi.mpirun), placement.launch, placement.np,
                         placement.hostfile, placement.oversubscribe)

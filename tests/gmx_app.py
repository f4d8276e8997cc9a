"""GROMACS (Debian's gromacs: gmx_mpi linked to Open MPI 4.1.4) as the application whose
particle-mesh Ewald spends its time in all-to-all, as seed 002 ran it on Gigabit Ethernet:
a box of SPC/E water made here by GROMACS's own tools (nothing is downloaded), with a
fine PME grid so that each transpose of its 3D FFT sends 256 KiB to every rank at 4 ranks
(docs/benchmarks.md, "GROMACS on Gigabit ports")."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import missing

MDP = """integrator = md
dt = 0.002
nsteps = {steps}
cutoff-scheme = Verlet
coulombtype = PME
rcoulomb = 0.9
rvdw = 0.9
fourierspacing = {spacing}
constraints = h-bonds
tcoupl = no
nstcalcenergy = 100
nstenergy = 0
nstlog = 0
"""


def gmx_mpi() -> str:
    for tool in ("gmx", "gmx_mpi"):
        if shutil.which(tool) is None:  # CI installs it: a failure there, a skip elsewhere
            missing(f"no {tool}: needs gromacs (Debian)")
    return str(shutil.which("gmx_mpi"))


def _gmx(work: Path, *argv: str) -> None:
    r = subprocess.run(["gmx", *argv], cwd=work, capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-3000:]


def prepare(work: Path, box_nm: float = 6.0, spacing: float = 0.06, steps: int = 100) -> Path:
    """`work` with run.tpr: a cube of water `box_nm` wide (about 7,000 molecules at 6 nm),
    PME with grid `spacing` nm (0.06: a 100^3 grid, 256 KiB a rank pair in each transpose
    at 4 ranks, two transposes a step), `steps` steps; returns the .tpr's path."""
    work.mkdir(parents=True, exist_ok=True)
    _gmx(work, "solvate", "-cs", "spc216.gro", "-box", *[str(box_nm)] * 3, "-o", "water.gro")
    waters = sum(1 for line in (work / "water.gro").read_text().splitlines()
                 if line[10:15].strip() == "OW")
    (work / "topol.top").write_text(
        '#include "oplsaa.ff/forcefield.itp"\n#include "oplsaa.ff/spce.itp"\n'
        f"[ system ]\nwater\n[ molecules ]\nSOL {waters}\n")
    (work / "md.mdp").write_text(MDP.format(steps=steps, spacing=spacing))
    _gmx(work, "grompp", "-f", "md.mdp", "-c", "water.gro", "-p", "topol.top", "-o",
         "run.tpr", "-maxwarn", "2")
    return work / "run.tpr"


def mdrun(tpr: Path) -> list[str]:
    """The run as an MPI job runs it: one OpenMP thread a rank, no final coordinates."""
    return [gmx_mpi(), "mdrun", "-s", tpr.name, "-ntomp", "1", "-noconfout", "-g", "md.log"]

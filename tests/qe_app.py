"""Quantum ESPRESSO's pw.x (Debian's quantum-espresso, linked to Open MPI 4.1.4) as the
application that lives in its collectives: an 8-atom silicon cell, 2x2x2 k-points, whose
run at 4 ranks spends about half its wall time in blocking collectives (alltoall of its
parallel FFT, barrier, bcast, allreduce; docs/benchmarks.md, "The application loop").
Its pseudopotential is generated here by QE's own ld1.x (Troullier-Martins, LDA): Debian
ships none, and nothing is downloaded."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from conftest import missing

DATA = Path(__file__).parent / "data" / "qe"


def pw_x() -> str:
    for tool in ("pw.x", "ld1.x"):
        if shutil.which(tool) is None:  # CI installs it: a failure there, a skip elsewhere
            missing(f"no {tool}: needs quantum-espresso (Debian)")
    return str(shutil.which("pw.x"))


def prepare(work: Path, kpoints: str = "2 2 2") -> Path:
    """`work` with the input and its pseudopotential; the input's path. `kpoints` "1 1 1":
    the same communicators and collectives (the same profile's groups), 40% of the calls
    and of the run's time: for the test cluster's TCP links, where every call costs more."""
    work.mkdir(parents=True, exist_ok=True)
    for name in ("si.ld1.in", "si.pw.in"):
        shutil.copy(DATA / name, work / name)
    pw_in, grid = work / "si.pw.in", "2 2 2 0 0 0"
    text = pw_in.read_text()
    assert grid in text
    pw_in.write_text(text.replace(grid, f"{kpoints} 0 0 0"))
    with open(work / "si.ld1.in", "rb") as f:
        r = subprocess.run(["ld1.x"], stdin=f, cwd=work, capture_output=True, timeout=120,
                           check=False)
    assert r.returncode == 0 and (work / "Si.pz-tm.UPF").exists(), r.stdout[-2000:]
    return work / "si.pw.in"

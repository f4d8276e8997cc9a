"""Read Open MPI's pml monitoring output: who sent how much to whom inside collectives."""

from __future__ import annotations

import re
from pathlib import Path

# Rows written at MPI_Finalize with --mca pml_monitoring_enable 2, e.g.
# "I\t3\t2\t720908 bytes\t14 msgs sent".
# I = internal (collective) traffic, E = the program's own point-to-point.
_ROW = re.compile(r"^([IE])\s+(\d+)\s+(\d+)\s+(\d+) bytes\s+(\d+) msgs sent")


def monitoring_mca(directory: Path) -> dict[str, str]:
    """MCA settings that make every rank write its rows to `directory`/mon.<rank>.prof.

    Files, not stdout: mpirun 4.1 once dropped one rank's last lines at teardown (CI, stop
    18: a linear reduce missing the 1 -> 0 pair), and a missing pair reads as another
    algorithm. Output mode 3 is the one that honours the file name (1 and 2 print)."""
    return {"pml_monitoring_enable": "2", "pml_monitoring_enable_output": "3",
            "pml_monitoring_filename": str(directory / "mon")}


def read_monitoring(directory: Path, np: int) -> list[str]:
    """Every rank's rows; a rank without its file is an error, not an absent pair."""
    lines: list[str] = []
    for rank in range(np):
        f = directory / f"mon.{rank}.prof"
        if not f.is_file():
            raise FileNotFoundError(f"pml monitoring wrote no {f.name}")
        lines += f.read_text().splitlines()
    return lines

Traffic = dict[tuple[int, int], tuple[int, int]]


def internal_traffic(lines: list[str], min_bytes: int = 0) -> Traffic:
    """(src, dst) -> (bytes, messages) of collective-internal traffic.

    `min_bytes` drops pairs carrying less, such as MPI_Comm_dup's agreement."""
    out: Traffic = {}
    for line in lines:
        m = _ROW.match(line.strip())
        if m and m.group(1) == "I":
            src, dst, nbytes, msgs = (int(m.group(i)) for i in range(2, 6))
            if nbytes >= min_bytes:
                out[(src, dst)] = (nbytes, msgs)
    return out

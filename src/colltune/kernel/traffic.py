"""Read Open MPI's pml monitoring output: who sent how much to whom inside collectives."""

from __future__ import annotations

import re

# Rows printed at MPI_Finalize with --mca pml_monitoring_enable 2
# --mca pml_monitoring_enable_output 1, e.g. "I\t3\t2\t720908 bytes\t14 msgs sent".
# I = internal (collective) traffic, E = the program's own point-to-point.
_ROW = re.compile(r"^([IE])\s+(\d+)\s+(\d+)\s+(\d+) bytes\s+(\d+) msgs sent")

MONITORING_MCA = {"pml_monitoring_enable": "2", "pml_monitoring_enable_output": "1"}

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

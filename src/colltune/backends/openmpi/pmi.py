"""The Slurm PMI plugins an Open MPI installation can be started with (srun's `--mpi`),
from the PMI components it was built with."""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path


@functools.lru_cache(maxsize=8)
def _pmi_components(ompi_info: str) -> frozenset[str]:
    try:
        text = subprocess.run([ompi_info, "--parsable"], capture_output=True, text=True,
                              timeout=60, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    return frozenset(re.findall(r"^mca:pmix:([a-z0-9]+):", text, flags=re.M))


def pmi_kinds(version: tuple[int, ...], ompi_info: Path) -> tuple[str, ...]:
    """The Slurm PMI plugins the Open MPI of this version and ompi_info can use, best
    first, from the PMI components it lists (4.x: `MCA pmix: ext3x`, s2, s1; 5.x is PMIx
    throughout)."""
    if version >= (5,):
        return ("pmix",)
    comps = _pmi_components(str(ompi_info))
    kinds = [k for k, names in (("pmix", {"ext2x", "ext3x", "pmix3x", "pmix2x", "pmix4x"}),
                                ("pmi2", {"s2"}))
             if comps & names]
    return tuple(kinds) or ("pmix", "pmi2")

"""What building and checking the kernel needs from an MPI installation, whatever its
family: the compiler wrapper, how the wrapper shows its flags, and which library a built
binary must report."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol


class Toolchain(Protocol):
    @property
    def version(self) -> str: ...

    @property
    def prefix(self) -> Path: ...

    @property
    def mpicc(self) -> Path: ...

    @property
    def name(self) -> str: ...

    @property
    def key(self) -> str: ...

    # the wrapper's flag that prints what it adds (-show for MPICH's, --showme for Open MPI's)
    @property
    def wrapper_flags(self) -> tuple[str, ...]: ...

    # whether a built binary runs without the launcher (SMPI's run only under smpirun)
    @property
    def standalone(self) -> bool: ...

    def describe(self) -> str: ...

    def runs_on(self, library: str) -> bool:
        """Whether MPI_Get_library_version's `library` is this installation."""
        ...

    def tool_env(self) -> dict[str, str]:
        """The environment to run the wrapper and a built binary in."""
        ...


class Installation(Toolchain, Protocol):
    """An MPI installation measurements are taken on, whatever its family: its toolchain
    and its launcher. Each backend has its own class; generic code sees only this."""

    @property
    def mpirun(self) -> Path: ...


class HydraToolchain:
    """MPICH-derived wrappers (MPICH, MVAPICH2): `-show` prints what they add, binaries run
    standalone, MPI_Get_library_version names the version."""

    version: str
    wrapper_flags = ("-show",)
    standalone = True

    def runs_on(self, library: str) -> bool:
        return names_version(library, self.version)


def names_version(library: str, version: str) -> bool:
    """`version` appears in `library` as a whole version (4.1.4 is not 4.1.41)."""
    return re.search(rf"(?<![\w.]){re.escape(version)}(?![\w.])",
                     library.replace(f"v{version}", f" {version}")) is not None

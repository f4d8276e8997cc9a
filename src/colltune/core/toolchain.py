"""What building and checking the kernel needs from an MPI installation, whatever its
family: the compiler wrapper, how the wrapper shows its flags, and which library a built
binary must report."""

from __future__ import annotations

import re
from collections.abc import Sequence
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


# an MPI library by its file name or soname: libmpi.so.40 (Open MPI), libmpi.so.12 and
# libmpich.so.12 (MPICH, Intel MPI, MVAPICH), MPICH 5's libmpi_abi.so (the standard ABI)
_MPI_LIBRARY = re.compile(r"^lib(mpi|mpich|mpi_abi)\.so(\.\d+)*$")


def is_mpi_library(name: str) -> bool:
    """Whether a library file's name (or soname) is an MPI library's, whichever family's."""
    return _MPI_LIBRARY.match(name) is not None


def names_version(library: str, version: str) -> bool:
    """`version` appears in `library` as a whole version (4.1.4 is not 4.1.41)."""
    return re.search(rf"(?<![\w.]){re.escape(version)}(?![\w.])",
                     library.replace(f"v{version}", f" {version}")) is not None


def library_problem(mpi: Toolchain, library: str, library_file: str = "",
                    objects: Sequence[str] = ()) -> str | None:
    """How ranks that report `library` (MPI_Get_library_version's words), loaded the
    libmpi file `library_file` ("": the loader could not say) and the MPI-named objects
    `objects` (kernel/common/mpiobjects.h: every loaded file named as an MPI library) did
    not run on `mpi`, as a phrase ("runs on ..."); None when they did. The version string
    alone cannot tell two builds of one version apart, nor see an inherited
    LD_LIBRARY_PATH win over the prefix's own library; the file defining MPI_Init alone
    cannot see a libmpi.so.40 that loads the real one by path and runs its own code: each
    file must lie inside the installation's prefix."""
    if not mpi.runs_on(library):
        at = f" ({library_file})" if library_file else ""
        return f"runs on '{library}'{at}, not on {mpi.describe()}"
    for f in (library_file, *objects) if library_file else objects:
        try:
            Path(f).resolve().relative_to(Path(mpi.prefix).resolve())
        except (OSError, ValueError):
            return (f"loaded {f}, outside {mpi.prefix} ({mpi.describe()}): "
                    "LD_LIBRARY_PATH or LD_PRELOAD gave it another library")
    return None

"""Compile the kernels (collbench, modelbench, collstep), the application profiler
(collprof, a shared library preloaded into an application's ranks) and Intel MPI's
shortened start-up (quickcal, preloaded into colltune's own jobs) with the target MPI's
mpicc, cached per MPI installation."""

from __future__ import annotations

import hashlib
import os
import subprocess
import tempfile
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from colltune import private
from colltune.core.toolchain import Toolchain, is_mpi_library
from colltune.errors import MPIError
from colltune.host import cache_root

CFLAGS = ["-std=c99", "-O2", "-Wall", "-Wextra"]


def cache_dir() -> Path:
    return cache_root() / "kernels"


KERNELS = ("collbench", "modelbench", "collstep")
# built as lib<name>.so, preloaded, never run alone: PMPI wrappers (collprof; collonline,
# tune online's layer); Intel MPI's
# start-up clock calibration shortened in colltune's own jobs (quickcal)
SHARED = ("collprof", "quickcal", "collonline")
# quickcal calls nothing of MPI's: not linked to it, so preloading it into the launcher (and
# gdb, in Intel MPI's proofs) loads no MPI there
# collonline finds Open MPI's own variable API by dlsym (libdl before glibc 2.34)
LDFLAGS = {"quickcal": ["-Wl,--as-needed", "-ldl"], "collonline": ["-ldl"]}


# a program split by concern: its main file first, then the files it is built from. Each
# program's group is a folder (bench/: the benchmark and the step program, which shares its
# collectives; prof/: the profiler; online/: tune online's layer); common/ holds what the
# profiler and the layer share
SOURCES = {"collbench": ("bench/collbench.c", "bench/bench.h", "common/mpiobjects.h",
                         "bench/bench_plan.c",
                         "bench/bench_sync.c", "bench/bench_mpit.c", "bench/bench_colls.c",
                         "bench/bench_measure.c", "bench/bench_loop.c"),
           "collstep": ("bench/collstep.c", "bench/bench.h", "bench/bench_sync.c",
                        "bench/bench_colls.c"),
           "collprof": ("prof/collprof.c", "prof/prof.h", "common/fnext.h",
                        "common/mpiobjects.h", "common/preload.h", "prof/prof_c.c",
                        "prof/prof_fortran.c", "prof/prof_arrival.c"),
           "collonline": ("online/collonline.c", "online/online.h", "common/fnext.h",
                          "common/mpiobjects.h", "common/preload.h",
                          "online/online_state.c", "online/online_halving.c",
                          "online/online_c.c", "online/online_fortran.c",
                          "online/online_mpit.c", "online/online_check.c",
                          "online/online_files.c", "online/online_plan.c")}


def source_files(name: str) -> tuple[str, ...]:
    return SOURCES.get(name, (f"{name}.c",))


def kernel_source(name: str = "collbench") -> bytes:
    """Every source file of `name`, in order: what its cached build is keyed by."""
    pkg = resources.files("colltune.kernel")
    return b"".join(pkg.joinpath(f).read_bytes() for f in source_files(name))


_identities: dict[tuple[str, str, tuple[str, ...]], str] = {}  # asked once a process


def _compiler_identity(mpi: Toolchain) -> str:
    """What the binary depends on: wrapper path, wrapper flags and version (the wrapper is
    run once a process: a tune asks for its kernels a hundred times)."""
    key = (str(mpi.mpicc), mpi.version, tuple(mpi.wrapper_flags))
    if key not in _identities:
        _identities[key] = _ask_identity(mpi)
    return _identities[key]


def _ask_identity(mpi: Toolchain) -> str:
    env = mpi.tool_env()
    parts = [str(mpi.mpicc.resolve()), mpi.version]
    for flag in mpi.wrapper_flags:
        try:
            out = subprocess.run([str(mpi.mpicc), flag], capture_output=True, text=True,
                                 timeout=30, env=env, check=False)
            parts.append(out.stdout.strip())
        except (OSError, subprocess.TimeoutExpired):
            parts.append("?")
    return "\n".join(parts)


def kernel_path(mpi: Toolchain, name: str = "collbench") -> Path:
    h = hashlib.sha256(kernel_source(name) + _compiler_identity(mpi).encode()).hexdigest()[:16]
    return cache_dir() / h / (f"lib{name}.so" if name in SHARED else name)


def kernel_library(exe: Path, env: dict[str, str]) -> str:
    """The MPI library `exe` loads in the launch environment, in that library's words."""
    try:
        res = subprocess.run([str(exe), "--library"], capture_output=True, text=True,
                             timeout=60, env=env, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"unusable: {e}"
    return res.stdout.strip() if res.returncode == 0 else f"unusable: exit {res.returncode}"


def loaded_libraries(exe: Path, env: dict[str, str]) -> dict[str, Path]:
    """Every shared library the dynamic loader gives `exe` in `env`, soname -> file (empty
    when ldd sees none: a script, a static program)."""
    try:
        res = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, timeout=60,
                             env=env, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return {}
    found = {}
    for line in res.stdout.splitlines():
        name, _, where = line.strip().partition(" => ")
        if where.startswith("/"):
            found[name] = Path(where.split(" (")[0])
    return found


def mpi_sonames(libs: dict[str, Path]) -> dict[str, Path]:
    """The MPI libraries among `libs`, by soname (the ABI: libmpi.so.40 Open MPI's,
    libmpi.so.12 and libmpich.so.12 MPICH's, which Intel MPI shares, libmpi_abi.so the
    standard ABI's)."""
    return {n: p for n, p in libs.items() if is_mpi_library(n)}


def library_matches(mpi: Toolchain, library: str) -> bool:
    return mpi.runs_on(library)


_verified: dict[Path, tuple[int, int, int]] = {}  # binaries checked in this process


def _stamp(exe: Path) -> tuple[int, int, int]:
    st = exe.stat()
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def build_kernel(mpi: Toolchain, force: bool = False,
                 on_rebuild: Callable[[str], None] | None = None, name: str = "collbench"
                 ) -> Path:
    """Path to kernel `name` built for `mpi`, compiling it on first use. A cached binary
    that loads another MPI's library (copied caches, a changed installation) is rebuilt,
    and so is one another user could have made or changed: every caller runs or preloads
    what this returns, so its directory is proven private here, each time."""
    exe = kernel_path(mpi, name)
    private.cache(*exe.parent.relative_to(cache_root()).parts)
    untrusted = private.file_problem(exe)
    if untrusted is not None:
        if on_rebuild:
            on_rebuild(f"warning: the cached kernel {exe} cannot be trusted ({untrusted}); "
                       "rebuilding it")
        os.unlink(exe)
    # an SMPI binary runs only under smpirun: its library is checked at each launch; a
    # shared library does not run at all (what loaded it is checked where it ran)
    standalone = mpi.standalone and name not in SHARED
    if exe.exists() and not force and not standalone:
        return exe
    if exe.exists() and not force:
        stamp = _stamp(exe)
        if _verified.get(exe) == stamp:
            return exe
        lib = kernel_library(exe, mpi.tool_env())
        if library_matches(mpi, lib):
            _verified[exe] = stamp
            return exe
        if on_rebuild:
            on_rebuild(f"warning: the cached kernel {exe} runs on '{lib}', not on "
                       f"{mpi.describe()}; rebuilding it")
    with tempfile.TemporaryDirectory(dir=exe.parent) as tmp:
        pkg = resources.files("colltune.kernel")
        for f in source_files(name):
            (Path(tmp) / f).parent.mkdir(exist_ok=True)  # the group's folder, as in the package
            (Path(tmp) / f).write_bytes(pkg.joinpath(f).read_bytes())
        out = Path(tmp) / exe.name
        shared = ["-fPIC", "-shared"] if name in SHARED else []
        cmd = [str(mpi.mpicc), *CFLAGS, *shared, "-o", str(out),
               *(str(Path(tmp) / f) for f in source_files(name) if f.endswith(".c")),
               *LDFLAGS.get(name, []), "-lm"]
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=300,
                                 env=mpi.tool_env(), check=False)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise MPIError(f"cannot run {mpi.mpicc}: {e}",
                                "check that the MPI's compiler wrapper works") from None
        if res.returncode != 0 or not out.exists():
            msg = (res.stderr or res.stdout).strip().splitlines()
            first = next((ln for ln in msg if "error" in ln), msg[0] if msg else "no output")
            raise MPIError(
                f"compiling the benchmark kernel with {mpi.mpicc} failed: {first}",
                "check that the MPI's development files and a C compiler are installed "
                "(Debian: libopenmpi-dev or libmpich-dev, and gcc)",
            )
        lib = kernel_library(out, mpi.tool_env()) if standalone else ""
        if standalone and not library_matches(mpi, lib):
            raise MPIError(
                f"the kernel built with {mpi.mpicc} runs on '{lib}', not on {mpi.describe()}",
                "check LD_LIBRARY_PATH: it may load another MPI's libraries")
        os.chmod(out, 0o700)  # the linker gives 0777 minus the umask: 0775 under 002
        os.replace(out, exe)  # atomic: concurrent tuners never see half a binary
    private.write(exe.parent / "identity.txt", _compiler_identity(mpi) + "\n")
    _verified[exe] = _stamp(exe)
    return exe

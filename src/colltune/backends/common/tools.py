"""Run an installation's own tools, and say why one did not answer: missing, crashed, or
answering as another library, with the inherited variable that likely made it so.

On a cluster `module load` sets LD_LIBRARY_PATH, and MPIs share sonames (libmpi.so.12:
MPICH, Intel MPI, MVAPICH; libmpi.so.40: Open MPI 4.1 and 5.0): a prefix's tool or kernel
then loads another MPI's library, crashes or answers in that library's words. colltune
refuses such an environment before it runs anything of the prefix (--keep-env accepts it,
and each launch still proves which library its ranks loaded)."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from colltune.core.toolchain import is_mpi_library
from colltune.errors import MPIError
from colltune.sinks import printable

# set by `tune --keep-env` (an environment variable, so jobs colltune submits inherit it)
KEEP_ENV = "COLLTUNE_KEEP_ENV"
# the variables through which an inherited environment changes what the loader gives
LOADER_VARIABLES = ("LD_PRELOAD", "LD_LIBRARY_PATH")


class ToolFailed(MPIError):
    """A prefix's tool that is there and did not answer as its family's, or an environment
    that would make it load another MPI: never taken for "no installation here" (family
    detection stops instead of falling through to the next family at the prefix)."""


def _inside(path: Path, prefix: Path) -> bool:
    try:
        path.resolve().relative_to(prefix.resolve())
    except (OSError, ValueError):
        return False
    return True


def foreign_libraries(prefix: Path, env: dict[str, str] | None = None
                      ) -> list[tuple[str, Path]]:
    """(variable, file) for each MPI library an LD_PRELOAD or LD_LIBRARY_PATH entry of `env`
    (default: colltune's own) offers the loader from outside `prefix`."""
    env = dict(os.environ) if env is None else env
    found: list[tuple[str, Path]] = []
    for entry in (e for e in env.get("LD_PRELOAD", "").replace(" ", ":").split(":") if e):
        if is_mpi_library(Path(entry).name) and not _inside(Path(entry), prefix):
            found.append(("LD_PRELOAD", Path(entry)))
    for entry in env.get("LD_LIBRARY_PATH", "").split(":") if env.get("LD_LIBRARY_PATH") \
            else []:
        # an empty entry (`X:$LD_LIBRARY_PATH` where it was unset) is the working directory
        # to the loader, and a relative one is relative to it: judged as those directories
        d = Path(os.path.abspath(entry or "."))
        if not d.is_dir() or _inside(d, prefix):
            continue
        try:
            # the soname the loader asks for (libmpi.so.40) before the link and the file
            libs = sorted((p for p in d.iterdir() if is_mpi_library(p.name)),
                          key=lambda p: (p.name.count(".") != 2, p.name))
        except OSError:
            continue
        found.extend(("LD_LIBRARY_PATH", p) for p in libs[:1])
    return found


def _cause(prefix: Path) -> str:
    """The inherited entry that likely made a prefix's tool fail ("" when none is seen)."""
    foreign = foreign_libraries(prefix)
    if not foreign:
        return ""
    var, lib = foreign[0]
    return f"; {var} holds {printable(lib)}, another MPI's library, which it likely loaded"


def guard(prefix: Path, what: str) -> None:
    """ToolFailed where colltune's environment offers another MPI's library to the tools and
    programs of `prefix` (`what`: the installation, as it can be named so far), unless the
    user kept it knowingly (--keep-env)."""
    if os.environ.get(KEEP_ENV):
        return
    foreign = foreign_libraries(prefix)
    if foreign:
        var, lib = foreign[0]
        raise ToolFailed(
            f"{var} holds {printable(lib)}, another MPI's library than {what}'s at "
            f"{printable(prefix)}: its tools and colltune's kernel would load it",
            f"`module unload` the MPI it belongs to (or remove it from {var}), or pass "
            "`tune --keep-env ...` to run with it knowingly (each launch still proves "
            "which library its ranks loaded)")


def ask(args: list[str], prefix: Path, what: str, env: dict[str, str] | None = None,
        timeout: float = 60) -> str:
    """The output (stdout, then stderr) of the tool args[0] of the installation `what` at
    `prefix`, after guard(). ToolFailed when it crashed (a signal), naming the likely cause;
    MPIError when it cannot be run."""
    guard(prefix, what)
    try:
        res = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env,
                             check=False, errors="replace")
    except (OSError, subprocess.TimeoutExpired) as e:
        raise MPIError(f"cannot run {args[0]}: {e}", "check the installation at "
                       f"{prefix}") from None
    if res.returncode < 0:
        try:
            sig = signal.Signals(-res.returncode).name
        except ValueError:
            sig = "an unknown signal"
        raise ToolFailed(f"{args[0]} is there but crashed (signal {-res.returncode}, {sig})"
                         + _cause(prefix),
                         "run it by hand to see why; `module unload` another MPI whose "
                         "libraries the environment holds")
    return res.stdout + res.stderr


def not_answered(tool: Path, text: str, family: str, prefix: Path) -> MPIError:
    """The error for a tool that ran and does not name `family`: what it said instead (its
    first line), and, where the environment offers another MPI's library, that cause
    (then ToolFailed: detection stops rather than take the prefix for another family)."""
    said = next((ln.strip() for ln in text.splitlines() if ln.strip()), "nothing")
    message = (f"{tool} is there but answers as {printable(said)[:120]!r}, not as "
               f"{family}")
    cause = _cause(prefix)
    if cause:
        return ToolFailed(message + cause, "`module unload` the MPI it belongs to")
    return MPIError(message, f"check the {family} installation at {prefix}")

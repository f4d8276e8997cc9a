"""Output files that are whole or absent: atomic replacement and an early writability check.

A destination is a regular file or nothing: a symbolic link is refused (writing through it
would replace whatever it points at, and a chmod would follow it), and so are devices,
FIFOs and directories (as root, replacing /dev/null breaks the machine). A new file gets
0666 minus the umask, like any file a user creates; a rewritten file keeps its mode, so an
installed rules file other users' jobs read stays readable."""

from __future__ import annotations

import os
import re
import stat
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from colltune.errors import ColltuneError


@dataclass(frozen=True)
class Planned:
    """A file to be written (by `tune export`), with its text; nothing is written yet."""

    path: Path
    text: str | bytes  # bytes: a binary file (Intel MPI's tuning table)
    what: str  # one line for the user
    # a user's own parameter file (~/.openmpi/mca-params.conf, ~/.mvapich2.conf): only the
    # keys written here are replaced, every other line stays, the old file is kept beside
    merge: bool = False
    # what the library will do with it that the installer must hear (said, not refused)
    warnings: tuple[str, ...] = ()


def beside(out: Path, layout: str) -> Path:
    """The file of one layout beside an output (tune --layouts, tune export --layouts):
    rules.conf -> rules.2x2.conf."""
    return out.with_name(f"{out.stem}.{layout}{out.suffix}")


def destination(path: Path) -> Path:
    """Absolute, with its directory resolved but not the file itself: a symbolic link at
    the destination is then seen (and refused), never followed."""
    return path.parent.resolve() / path.name


_TEMP = re.compile(r"^\.(?P<name>.+)\.(?P<pid>\d+)\.tmp\w*$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _sweep_stale(path: Path) -> None:
    """Remove temporaries left by writers of `path` that were killed (their pid is gone)."""
    try:
        entries = list(path.parent.iterdir())
    except OSError:
        return
    for e in entries:
        m = _TEMP.match(e.name)
        if m and m["name"] == path.name and not _alive(int(m["pid"])):
            try:
                e.unlink()
            except OSError:
                pass


def check_destination(path: str | Path, what: str = "output") -> int | None:
    """The mode of the regular file at `path`, None where nothing is there; anything else
    (a symbolic link, even a dangling one; a device, FIFO, socket or directory) is
    refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise ColltuneError(f"cannot inspect {what} {path}: {e.strerror or e}",
                            "choose another path") from None
    if stat.S_ISLNK(st.st_mode):
        raise ColltuneError(f"{what} {path} is a symbolic link: colltune never writes "
                            "through one", "name the real file, or remove the link")
    if not stat.S_ISREG(st.st_mode):
        raise ColltuneError(f"{what} {path} is not a regular file (a device, FIFO, socket "
                            "or directory)", "name a regular file")
    return stat.S_IMODE(st.st_mode)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


class Staged:
    """A file written in full beside its destination (same directory, so the rename is
    atomic), not yet in place: `commit` renames it in, `discard` removes it."""

    def __init__(self, path: Path, tmp: str) -> None:
        self.path, self.tmp = path, tmp

    def commit(self) -> None:
        os.replace(self.tmp, self.path)  # replaces the name itself; a link made since too
        parent = self.path.parent if str(self.path.parent) else Path(".")
        try:  # make the rename itself durable
            dfd = os.open(str(parent), os.O_RDONLY)
            try:
                os.fsync(dfd)
            finally:
                os.close(dfd)
        except OSError:
            pass

    def discard(self) -> None:
        try:
            os.unlink(self.tmp)
        except OSError:
            pass


def stage(path: str | Path, text: str | bytes, mode: int | None = None) -> Staged:
    """Write `text` through a temporary file beside `path` and fsync it; nothing at `path`
    changes until `commit`. The mode is `mode`, else the existing file's, else 0666 minus
    the umask; it is set on the open file, never through the path."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    old_mode = check_destination(path)
    if mode is None:
        mode = old_mode if old_mode is not None else 0o666 & ~_umask()
    _sweep_stale(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.tmp", dir=str(parent))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode() if isinstance(text, str) else text)
            f.flush()
            os.fchmod(f.fileno(), mode)
            os.fsync(f.fileno())
    except BaseException:
        Staged(path, tmp).discard()
        raise
    return Staged(path, tmp)


def is_stdout(path: str | Path | None) -> bool:
    """`-` names standard output (for --json, --summary-json), as in the tools users know;
    never /dev/stdout, which as a destination is a link (refused), not a file."""
    return path is not None and str(path) == "-"


def write_atomic(path: str | Path, text: str | bytes, mode: int | None = None) -> None:
    """Write through a temporary file in the same directory, fsync, then rename: readers and
    a killed writer leave either the old file or the new one, never a mix. `-`: standard
    output."""
    if is_stdout(path):
        if isinstance(text, bytes):
            sys.stdout.buffer.write(text)
        else:
            sys.stdout.write(text)
        sys.stdout.flush()
        return
    staged = stage(path, text, mode)
    try:
        staged.commit()
    except BaseException:
        staged.discard()
        raise


def ensure_writable(path: str | Path, option: str) -> None:
    """Fail before hours of measuring if `path` cannot be written later."""
    if is_stdout(path):
        return
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir() and not path.is_symlink():
        raise ColltuneError(f"{option} {path} is a directory", f"give a file name to {option}")
    check_destination(path, option)
    if not parent.is_dir():
        raise ColltuneError(f"the directory of {option} {path} does not exist",
                            f"create {parent} first, or choose another {option}")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.tmp", dir=str(parent))
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        raise ColltuneError(f"cannot write {option} {path}: {e.strerror or e}",
                            f"choose a writable {option}") from None

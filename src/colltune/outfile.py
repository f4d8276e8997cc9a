"""Output files that are whole or absent: atomic replacement and an early writability check."""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path

from colltune.errors import ColltuneError

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


def write_atomic(path: str | Path, text: str) -> None:
    """Write through a temporary file in the same directory, fsync, then rename: readers and
    a killed writer leave either the old file or the new one, never a mix."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    _sweep_stale(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.{os.getpid()}.tmp", dir=str(parent))
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable
        dfd = os.open(str(parent), os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)
    except OSError:
        pass


def ensure_writable(path: str | Path, option: str) -> None:
    """Fail before hours of measuring if `path` cannot be written later."""
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise ColltuneError(f"{option} {path} is a directory", f"give a file name to {option}")
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

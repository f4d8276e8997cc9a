"""User-facing failures: ColltuneError (what, and what to do) and FormatError (where)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO


class ColltuneError(Exception):
    """A user-facing failure: `message` says what went wrong, `hint` what to do next. The
    exit code tells scripts the class of failure (docs: README, "Exit codes"): this one is
    a usage error, 2: what was asked cannot be done as asked."""

    exit_code = 2

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class NotApplied(ColltuneError):
    """The library did not run what colltune set (its own read-back says so): the verdict
    of a gate against its input (exit 1), like a regression."""

    exit_code = 1


class MPIError(ColltuneError):
    """The MPI installation, its tools, or a job launched on it failed (exit 3)."""

    exit_code = 3


class TimedOut(MPIError):
    """A launch ran past the timeout it was given, and was stopped (exit 3)."""


class StoreError(ColltuneError):
    """The measurement store is locked, unreadable, damaged or cannot be written (exit 4)."""

    exit_code = 4


def shown(reason: str, limit: int = 200) -> str:
    """A reason as one short line: it may quote the file (a 300 KB token, a line break), and
    a terminal shows one line of it."""
    one = reason.replace("\r", "\\r").replace("\n", "\\n")
    return one if len(one) <= limit else f"{one[:limit]}... ({len(one)} characters)"


class FormatError(Exception):
    """A file colltune cannot accept, located: `line` is 1-based (0 = the whole file)."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        reason = shown(reason)
        super().__init__(f"{path}:{line}: {reason}" if line else f"{path}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


MAX_TEXT_BYTES = 16 * 2**20


def open_regular(path: str | Path) -> BinaryIO:
    """`path` opened for reading if it is a regular file; a FIFO (which would block until a
    writer comes), a device (/dev/zero never ends) or a directory is a FormatError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO's open would wait
    except OSError as e:
        raise FormatError(str(path), 0, f"cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise FormatError(str(path), 0, "not a regular file (a device, FIFO or directory)")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def read_text(path: str | Path) -> str:
    """A UTF-8 text file no larger than any file colltune reads (rules files and profiles
    are kilobytes), or a FormatError that says where it is not one."""
    data = read_bytes(path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(str(path), data.count(b"\n", 0, e.start) + 1,
                          "not UTF-8 text") from None


def read_bytes(path: str | Path) -> bytes:
    """A regular file no larger than any file colltune reads, or a FormatError."""
    with open_regular(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > MAX_TEXT_BYTES:
            raise FormatError(str(path), 0, f"{size} bytes: larger than any file colltune "
                              f"reads ({MAX_TEXT_BYTES // 2**20} MiB)")
        try:
            data = f.read(MAX_TEXT_BYTES + 1)
        except OSError as e:
            raise FormatError(str(path), 0, f"cannot read: {e.strerror or e}") from None
    return data


def _no_constant(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_json(text: str, object_pairs_hook: Callable[[list[tuple[str, Any]]], Any] | None
               = None) -> object:
    """JSON as colltune reads it from files others may write: NaN and Infinity are refused
    (a NaN compares false with every threshold), and so is nesting deeper than Python's
    parser goes; either is a ValueError, like any malformed JSON. `object_pairs_hook`: as
    json.loads's (a reader that decides which of two equal keys counts)."""
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=object_pairs_hook)
    except RecursionError:
        raise ValueError("nested too deeply") from None

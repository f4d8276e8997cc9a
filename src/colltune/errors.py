"""User-facing failures: ColltuneError (what, and what to do) and FormatError (where)."""

from __future__ import annotations

from pathlib import Path


class ColltuneError(Exception):
    """A user-facing failure: `message` says what went wrong, `hint` what to do next."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class FormatError(Exception):
    """A file colltune cannot accept, located: `line` is 1-based (0 = the whole file)."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: {reason}" if line else f"{path}: {reason}")
        self.path = path
        self.line = line
        self.reason = reason


def read_text(path: str | Path) -> str:
    """A UTF-8 text file, or a FormatError that says where it is not one."""
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise FormatError(str(path), 0, f"cannot read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise FormatError(str(path), data.count(b"\n", 0, e.start) + 1,
                          "not UTF-8 text") from None

"""The one exception type the CLI turns into a one-line error plus what to do next."""

from __future__ import annotations


class ColltuneError(Exception):
    """A user-facing failure: `message` says what went wrong, `hint` what to do next."""

    def __init__(self, message: str, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def __str__(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message

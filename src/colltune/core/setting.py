"""An option declared once: its flag, default, bound and help on the request object's own
field (`setting(...)`), so the CLI's option, the request's default, the refusal of a value
out of range and its message all come from one place. The CLI turns a field into its typer
option (cli/common.declared); `check` refuses what is out of bounds, naming the flag and
the default."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from colltune.errors import ColltuneError


@dataclass(frozen=True)
class Declared:
    """A request field's option: its flag(s), help, and bounds (`lo`/`hi`: None, none;
    `open_lo`/`open_hi`: the bound itself is out; `words`: what the bound means, for the
    refusal)."""

    flags: tuple[str, ...]
    help: str
    lo: float | None = None
    hi: float | None = None
    open_lo: bool = False
    open_hi: bool = False
    words: str = ""

    def holds(self, value: float) -> bool:
        if self.lo is not None and (value < self.lo or (self.open_lo and value == self.lo)):
            return False
        return not (self.hi is not None and (value > self.hi
                                             or (self.open_hi and value == self.hi)))

    def range_text(self) -> str:
        lo = "" if self.lo is None else f"{self.lo:g} {'<' if self.open_lo else '<='} "
        hi = "" if self.hi is None else f" {'<' if self.open_hi else '<='} {self.hi:g}"
        return f"{lo}{self.flags[0]}{hi}"


def setting(default: Any, *flags: str, help: str, lo: float | None = None,  # noqa: A002
            hi: float | None = None, open_lo: bool = False, open_hi: bool = False,
            words: str = "") -> Any:
    """A dataclass field whose default is `default`, declared as the option `flags`."""
    return dataclasses.field(default=default, metadata={"option": Declared(
        tuple(flags), help, lo, hi, open_lo, open_hi, words)})


def declared(cls: type, name: str) -> tuple[Any, Declared]:
    """The default and the declaration of `cls`'s field `name`."""
    f = next(f for f in dataclasses.fields(cls) if f.name == name)
    return f.default, f.metadata["option"]


def check(request: Any) -> None:
    """Refuse, in one line naming the flag and the default, the first declared field of
    `request` whose value is out of its bounds (None: not given, nothing to check)."""
    for f in dataclasses.fields(request):
        d = f.metadata.get("option")
        value = getattr(request, f.name)
        if d is None or value is None or isinstance(value, bool) \
                or not isinstance(value, (int, float)) or d.holds(value):
            continue
        raise ColltuneError(f"{d.flags[0]} {value}: " + (d.words or
                            f"needs {d.range_text()}"), f"the default is {f.default}")

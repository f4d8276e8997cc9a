"""Where a tune's wall time goes, stage by stage (the sweep, fresh launch pairs, locating
switches), so a site weighs what confirmation costs against what it saves."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

SWEEP, PAIRS, SWITCHES = "sweep", "fresh launch pairs", "locating switches"
PROOF = "proving what ran"  # launches under a debugger or read-back, where a family needs them
_spent: ContextVar[dict[str, float] | None] = ContextVar("colltune_spent", default=None)
_inside: ContextVar[str | None] = ContextVar("colltune_stage", default=None)


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Count the time inside towards `name` in the tune being clocked (none: nothing); a
    stage inside another (a proof launch inside the launch pairs) counts once, as its own."""
    spent, outer, t = _spent.get(), _inside.get(), time.monotonic()
    token = _inside.set(name)
    try:
        yield
    finally:
        _inside.reset(token)
        if spent is not None:
            took = time.monotonic() - t
            spent[name] = spent.get(name, 0.0) + took
            if outer is not None:
                spent[outer] = spent.get(outer, 0.0) - took


def so_far() -> dict[str, float]:
    """Seconds per stage of the tune being clocked, until now (none: empty)."""
    spent = _spent.get()
    return {k: v for k, v in (spent or {}).items() if k != "total" and v > 0}


def current() -> str | None:
    """The stage the caller runs in (None: outside every stage)."""
    return _inside.get()


@contextmanager
def clocked() -> Iterator[dict[str, float]]:
    """Seconds per stage inside, and "total" once it ends."""
    spent: dict[str, float] = {}
    token, t = _spent.set(spent), time.monotonic()
    try:
        yield spent
    finally:
        spent["total"] = time.monotonic() - t
        _spent.reset(token)


def describe(spent: dict[str, float]) -> str:
    """'97 s: sweep 19 s, fresh launch pairs 60 s, ..., the rest 4 s'."""
    parts = [(k, v) for k, v in spent.items() if k != "total" and v >= 0.5]
    rest = spent.get("total", 0.0) - sum(spent[k] for k in spent if k != "total")
    return f"{spent.get('total', 0.0):.0f} s" + (": " + ", ".join(
        [f"{k} {v:.0f} s" for k, v in parts] + [f"the rest {max(rest, 0.0):.0f} s"])
        if parts else "")

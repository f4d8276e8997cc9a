"""Replaying a store recorded from a real MPI library that CI cannot install (MVAPICH2 is
built by hand; tomorrow any such family): `tune --from-db` decides, confirms from the
stored fresh-launch verdicts and writes the family's output with no launch at all.

Two things stand in for the machine the store was recorded on, and nothing else: the
host name (a store's contexts are per host) and the installation's detection (its
binaries are not here). The installation is rebuilt from the stored context, so its key
matches the recorded measurements; the backend, the decisions, the confirmation and the
writer are the real ones."""

from __future__ import annotations

import shutil
import socket
from collections.abc import Callable
from pathlib import Path

import pytest

from colltune.store import Context, Store


def recorded_context(store: Path, backend: str, collective: str, np: int) -> Context:
    """The one context of `collective` at `np` ranks the store holds for `backend`."""
    s = Store(store, readonly=True)
    try:
        found = [c for c in s.contexts() if c.backend == backend and c.collective ==
                 collective and c.np == np]
    finally:
        s.close()
    assert len(found) == 1, f"{store}: {len(found)} contexts of {backend} {collective} np={np}"
    return found[0]


def replaying(monkeypatch: pytest.MonkeyPatch, tmp: Path, recorded: Path, ctx: Context,
              finder: tuple[object, str], installation: Callable[[Context], object]) -> Path:
    """A writable copy of `recorded`, with the host name and the detection (`finder`: the
    module and the name of its find function) answering as on the recording machine."""
    db = tmp / recorded.name
    shutil.copyfile(recorded, db)
    monkeypatch.setattr(socket, "gethostname", lambda: ctx.host)
    module, name = finder
    monkeypatch.setattr(module, name, lambda prefix, *a: installation(ctx))
    return db

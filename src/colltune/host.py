"""This machine: the cores this process may use and colltune's cache directory."""

from __future__ import annotations

import os
from pathlib import Path


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def cache_root() -> Path:
    """Where built kernels, proofs and generated host lists are kept (XDG cache)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "colltune"

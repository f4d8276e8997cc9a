"""How every bench script starts colltune's CLI: this venv's Python running `colltune.cli`
(not whatever `tune` PATH holds), with its wall time."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

TUNE = (sys.executable, "-m", "colltune.cli")  # the command line's first words


def tune(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
         timeout: float | None = None) -> tuple[subprocess.CompletedProcess[str], float]:
    """`tune ARGS...`, its output captured as text, and the seconds it took."""
    t = time.monotonic()
    r = subprocess.run([*TUNE, *args], cwd=cwd, env=env, timeout=timeout,
                       capture_output=True, text=True)
    return r, time.monotonic() - t

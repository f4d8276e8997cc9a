"""Helpers the tests share: the CLI as a user runs it, and the process table."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def tune_cli(*args: str, env: dict[str, str] | None = None, timeout: float = 600
             ) -> subprocess.CompletedProcess[str]:
    """Runs `tune ...` in a fresh process, exactly as a user would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run([sys.executable, "-m", "colltune.cli", *args], capture_output=True,
                          text=True, timeout=timeout, env=full_env, check=False)


def collbench_pids() -> list[int]:
    """Kernel processes of this test session (its kernels live under the session's own
    XDG_CACHE_HOME), so other jobs running a kernel on the machine do not count."""
    mine = os.environ.get("XDG_CACHE_HOME", "").encode()
    out = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes()
            except OSError:
                continue
            if b"collbench" in cmd and b"pytest" not in cmd and mine in cmd:
                out.append(int(d))
    return out


def rx_bytes(ns: str, dev: str) -> int:
    """Bytes the device received (its sysfs counter, read inside its namespace)."""
    return int(subprocess.run(["ip", "netns", "exec", ns, "cat",
                               f"/sys/class/net/{dev}/statistics/rx_bytes"],
                              capture_output=True, text=True, check=True).stdout)

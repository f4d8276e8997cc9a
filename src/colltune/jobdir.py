"""Where the files of colltune's jobs live (plans, rules files the ranks read, profile
records, probes): a directory every node of a job sees, since /tmp is node-local on a
cluster. docs/cluster.md says which path that is and how to move it."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from colltune import private
from colltune.errors import ColltuneError
from colltune.host import cache_root

# file systems that live in one node's memory: never shared between nodes
_MEMORY_FS = {"tmpfs", "ramfs", "devtmpfs"}


def job_root() -> Path:
    """COLLTUNE_JOB_DIR, else `jobs/` in colltune's cache (under $HOME unless
    XDG_CACHE_HOME moves it): home is shared on a cluster, /tmp is not."""
    given = os.environ.get("COLLTUNE_JOB_DIR")
    return Path(given) if given else cache_root() / "jobs"


def _root() -> str:
    """The job directory, made 0700 where missing and proven private (colltune.private)
    each time a job starts: the kernel reads its plan and the ranks their rules file
    from here, so a directory another user can write would let them decide what runs."""
    given = os.environ.get("COLLTUNE_JOB_DIR")
    if given:
        root = private.ensure_dir(Path(given), "the job directory (COLLTUNE_JOB_DIR)",
                                  "set COLLTUNE_JOB_DIR to a directory only you can write "
                                  "(or one with the sticky bit, as /tmp), or unset it")
    else:
        root = private.cache("jobs")
    return str(root)


def temporary(prefix: str = "colltune-") -> tempfile.TemporaryDirectory[str]:
    """A fresh private directory (0700) for one job's files, removed after it."""
    return tempfile.TemporaryDirectory(prefix=prefix, dir=_root())


def temporary_file(suffix: str) -> tempfile._TemporaryFileWrapper[str]:
    """A fresh file (0600) for one job, kept until the caller removes it, in the caller's
    own private directory inside the job directory (which may be shared, as /tmp is)."""
    mine = private.ensure_dir(Path(_root()) / f"files-{os.geteuid()}",
                              "the job directory's private part",
                              "remove it if you did not make it, or set COLLTUNE_JOB_DIR "
                              "to a directory only you can write")
    return tempfile.NamedTemporaryFile("w", suffix=suffix, delete=False, dir=mine)


def _fs_type(path: Path) -> str:
    """The type of the file system holding `path` (the longest mount point above it)."""
    best, kind = "", ""
    try:
        with open("/proc/self/mounts", encoding="utf-8", errors="replace") as f:
            for line in f:
                parts = line.split()
                if len(parts) < 3:
                    continue
                point = parts[1].replace("\\040", " ")
                if (str(path) == point or str(path).startswith(point.rstrip("/") + "/")) \
                        and len(point) >= len(best):
                    best, kind = point, parts[2]
    except OSError:
        return ""
    return kind


def node_local(path: Path) -> str | None:
    """Why `path` cannot be seen from other nodes, or None when nothing says so: under
    /tmp, TMPDIR or /dev/shm, or on a file system in one node's memory."""
    p = Path(os.path.abspath(path))
    tmpdirs = {"/tmp", "/var/tmp", "/dev/shm", os.environ.get("TMPDIR") or "/tmp"}
    for t in sorted(tmpdirs):
        if p == Path(t) or Path(t) in p.parents:
            return f"it is under {t}, which is node-local on a cluster"
    kind = _fs_type(p)
    if kind in _MEMORY_FS:
        return f"it is on {kind}, which lives in one node's memory"
    return None


def require_shared(nodes: int) -> None:
    """Refuse a job across `nodes` > 1 nodes whose files (colltune's cache, where the
    kernels are built, and the job directory) would be on node-local storage."""
    if nodes <= 1:
        return
    for what, path, fix in (
            ("the job directory", job_root(), "set COLLTUNE_JOB_DIR to a directory in your home "
             "or work file system"),
            ("colltune's cache (the built kernels)", cache_root(),
             "set XDG_CACHE_HOME to a directory in your home or work file system")):
        why = node_local(path)
        if why is not None:
            raise ColltuneError(f"{what} {path} must be seen by all {nodes} nodes, but {why}",
                                fix)

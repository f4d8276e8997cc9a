"""Directories and files only the caller can change: what colltune runs, preloads or reads
back as its own (built kernels, the profiler, job plans) is kept where no other user can
replace it, and proven so immediately before use.

A path is private when every directory from / down to it is owned by the caller or root
and writable by nobody else, except a sticky directory (/tmp), where others cannot rename
or remove what the caller owns; a file in it must be the caller's, regular and not
writable by others. Directories colltune makes are made 0700 whatever the umask (a umask
of 002 would make them group-writable: anyone in the caller's group could then replace
a kernel the caller runs)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from colltune.errors import ColltuneError
from colltune.outfile import write_atomic

_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def _owner(uid: int) -> str:
    try:
        import pwd
        return f"user {pwd.getpwuid(uid).pw_name}"
    except (KeyError, ImportError):
        return f"uid {uid}"


def _make(path: Path) -> None:
    """Create each missing level of `path` 0700 (os.makedirs would give the levels above
    the last the umask's mode)."""
    missing = []
    p = path
    while not os.path.lexists(p):
        missing.append(p)
        if p.parent == p:
            break
        p = p.parent
    for level in reversed(missing):
        try:
            os.mkdir(level, 0o700)
        except FileExistsError:
            pass  # made meanwhile by a concurrent tune: the check below judges it
        except OSError as e:
            raise ColltuneError(f"cannot create {level}: {e.strerror or e}",
                                "choose a directory you can write") from None


def _problem(level: Path, st: os.stat_result, own_below: Path | None) -> str | None:
    """Why directory `level` lets another user replace what is under it, or None. Levels
    at or below `own_below` (colltune's own cache) that the caller owns are tightened to
    0700 instead: earlier versions made them under the umask."""
    me = os.geteuid()
    if st.st_uid not in (me, 0):
        return f"{level} is owned by {_owner(st.st_uid)}"
    if not st.st_mode & _OTHERS_WRITE or st.st_mode & stat.S_ISVTX:
        return None
    if st.st_uid == me and own_below is not None and \
            (level == own_below or own_below in level.parents):
        try:
            os.chmod(level, 0o700)
            return None
        except OSError:
            pass
    who = "every user" if st.st_mode & stat.S_IWOTH else "its group"
    return f"{level} can be written by {who}"


def check_dir(path: Path, what: str, fix: str, own_below: Path | None = None) -> Path:
    """Refuse (one line naming the directory at fault) unless `path` is private; the
    resolved path otherwise. Links above are followed (a home under /data is common), and
    each directory they reach is judged."""
    real = Path(os.path.realpath(path))
    own = Path(os.path.realpath(own_below)) if own_below is not None else None
    for level in (*reversed(real.parents), real):
        try:
            st = os.lstat(level)
        except OSError as e:
            raise ColltuneError(f"cannot inspect {level} ({what}): {e.strerror or e}",
                                fix) from None
        if not stat.S_ISDIR(st.st_mode):
            raise ColltuneError(f"{level} ({what}) is not a directory", fix)
        why = _problem(level, st, own)
        if why is not None:
            raise ColltuneError(f"{what} {path} is not private: {why}, who could replace "
                                "what colltune runs or reads there", fix)
    return real


def ensure_dir(path: Path, what: str, fix: str, own_below: Path | None = None) -> Path:
    """`path`, created 0700 where missing, proven private (check_dir)."""
    _make(Path(os.path.abspath(path)))
    check_dir(path, what, fix, own_below)
    return path


def file_problem(path: Path) -> str | None:
    """Why the file at `path` (in a private directory) cannot be trusted, or None; a
    missing file is no problem (it is built)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if not stat.S_ISREG(st.st_mode):
        return "it is not a regular file"
    if st.st_uid != os.geteuid():
        return f"it is owned by {_owner(st.st_uid)}"
    if st.st_mode & _OTHERS_WRITE:
        return "others can write it"
    return None


def write(path: Path, text: str | bytes, mode: int = 0o600) -> None:
    """Write a file of colltune's own in a private directory, whole or not at all; whatever
    stands at its name (a link, even) is replaced, never written through."""
    if os.path.islink(path):
        os.unlink(path)
    write_atomic(path, text, mode)


CACHE_FIX = ("remove write access for others on the directory named (chmod go-w), or set "
             "XDG_CACHE_HOME to a directory only you can write")


def cache(*parts: str) -> Path:
    """A directory in colltune's cache, made and proven private."""
    from colltune.host import cache_root
    root = cache_root()
    return ensure_dir(root.joinpath(*parts), "colltune's cache", CACHE_FIX, own_below=root)


def output_dir(path: Path, option: str) -> Path:
    """A directory a user names for colltune's output (`--evidence DIR`): never a symbolic
    link (a link planted in a shared project directory would send the files wherever it
    points), the caller's own where it exists, made 0700 with each missing level where it
    does not. Checked before the run and again right before anything is written in it."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        _make(Path(os.path.abspath(path)))
        st = os.lstat(path)
    except OSError as e:
        raise ColltuneError(f"cannot inspect {option} {path}: {e.strerror or e}",
                            f"choose another {option}") from None
    if stat.S_ISLNK(st.st_mode):
        raise ColltuneError(f"{option} {path} is a symbolic link: colltune never writes "
                            "through one", "name the real directory, or remove the link")
    if not stat.S_ISDIR(st.st_mode):
        raise ColltuneError(f"{option} {path} is not a directory", f"name a directory for "
                            f"{option}")
    if st.st_uid != os.geteuid():
        raise ColltuneError(f"{option} {path} is owned by {_owner(st.st_uid)}",
                            f"name a directory of your own for {option}")
    return path

"""What colltune runs, preloads or reads back as its own comes from directories only the
caller can write (issue 73, findings 1-5): a kernel another user planted in the cache is
never run, the cache is 0700 under any umask, files in it are never written through a
link, and a job directory another user can write is refused. Another user is uid 65534
(nobody): the ownership cases need root, which CI is."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from colltune import jobdir, private
from colltune.backends.openmpi.install import find_openmpi
from colltune.errors import ColltuneError
from colltune.host import cache_root
from colltune.kernel.build import build_kernel, kernel_library, kernel_path
from helpers import tune_cli

NOBODY = 65534
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="making another user's files needs "
                             "root (CI runs as root)")


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh cache of colltune's own, under a private directory."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.delenv("COLLTUNE_JOB_DIR", raising=False)
    yield cache_root()


def _modes(top: Path, below: Path) -> dict[str, int]:
    """Mode of every directory from `top` down to `below`, and of `below`."""
    got = {}
    p = below
    while True:
        got[str(p)] = stat.S_IMODE(os.lstat(p).st_mode)
        if p == top:
            return got
        p = p.parent


@pytest.mark.mpi
def test_the_cache_is_private_under_a_group_umask(cache: Path) -> None:
    ompi = find_openmpi("/usr")
    old = os.umask(0o002)
    try:
        lib = build_kernel(ompi, name="quickcal")
    finally:
        os.umask(old)
    modes = _modes(cache.parent, lib)
    # ~/.cache, colltune/, kernels/, the build's directory and the library itself
    assert len(modes) == 5
    assert all(m & 0o022 == 0 for m in modes.values()), modes
    assert stat.S_IMODE(os.lstat(lib.parent / "identity.txt").st_mode) == 0o600


@pytest.mark.mpi
def test_a_group_writable_cache_left_by_an_earlier_version_is_tightened(cache: Path) -> None:
    ompi = find_openmpi("/usr")
    lib = build_kernel(ompi, name="quickcal")
    for d in (cache, lib.parent.parent, lib.parent):
        d.chmod(0o775)
    os.chmod(lib, 0o775)  # writable by the group: whatever is in it now is not trusted
    # the old file held open: a file system reuses a freed inode's number at once, so
    # without it a replaced file could show the same number
    with lib.open("rb") as old:
        notes: list[str] = []
        again = build_kernel(ompi, name="quickcal", on_rebuild=notes.append)
        assert again == lib and lib.stat().st_ino != os.fstat(old.fileno()).st_ino
    assert "cannot be trusted (others can write it)" in notes[0]
    assert all(m & 0o077 == 0 for m in _modes(cache, lib.parent).values())


@pytest.mark.mpi
@as_root
def test_a_kernel_planted_by_another_user_is_never_run(cache: Path, tmp_path: Path) -> None:
    ompi = find_openmpi("/usr")
    exe = kernel_path(ompi)
    build_kernel(ompi)
    ran = tmp_path / "planted-ran"
    exe.unlink()
    exe.write_text(f"#!/bin/sh\ntouch {ran}\necho 'Open MPI v4.1.4'\n")
    os.chmod(exe, 0o755)
    os.chown(exe, NOBODY, NOBODY)
    notes: list[str] = []
    got = build_kernel(ompi, on_rebuild=notes.append)
    assert "owned by" in notes[0]
    assert os.lstat(got).st_uid == os.geteuid()
    # what is there now is the real kernel, on the real library, and the plant never ran
    assert ompi.runs_on(kernel_library(got, ompi.tool_env()))
    assert not ran.exists()


@pytest.mark.mpi
@as_root
def test_a_cache_directory_of_another_user_is_refused(cache: Path) -> None:
    ompi = find_openmpi("/usr")
    exe = kernel_path(ompi, "quickcal")
    exe.parent.mkdir(parents=True)
    os.chown(exe.parent.parent, NOBODY, NOBODY)
    with pytest.raises(ColltuneError) as e:
        build_kernel(ompi, name="quickcal")
    assert f"{exe.parent.parent} is owned by user nobody" in e.value.message
    assert "XDG_CACHE_HOME" in e.value.hint


def test_a_writable_directory_above_the_cache_is_refused(cache: Path) -> None:
    # ~/.cache writable by the group: a member could rename colltune/ and put theirs
    cache.parent.mkdir(mode=0o700)
    cache.parent.chmod(0o775)
    with pytest.raises(ColltuneError) as e:
        private.cache("kernels")
    assert f"{cache.parent} can be written by its group" in e.value.message
    assert oct(cache.parent.stat().st_mode)[-3:] == "775"  # the user's, left as it is


def test_files_in_the_cache_replace_a_link_and_never_write_through_it(cache: Path,
                                                                       tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_text("mine\n")
    d = private.cache("kernels", "x")
    (d / "identity.txt").symlink_to(victim)
    private.write(d / "identity.txt", "new\n")
    assert victim.read_text() == "mine\n"
    assert not (d / "identity.txt").is_symlink() and (d / "identity.txt").read_text() == "new\n"


@pytest.mark.parametrize("mode,refused", [(0o777, "can be written by every user"),
                                          (0o770, "can be written by its group"),
                                          (0o1777, None), (0o700, None)])
def test_a_job_directory_others_can_write_is_refused(cache: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     mode: int, refused: str | None) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    jobs.chmod(mode)
    monkeypatch.setenv("COLLTUNE_JOB_DIR", str(jobs))
    if refused is None:
        with jobdir.temporary() as d:
            assert Path(d).parent == jobs
        return
    with pytest.raises(ColltuneError) as e:
        jobdir.temporary_file(".plan")
    assert f"{jobs} can be written by" in e.value.message and refused in e.value.message
    assert "COLLTUNE_JOB_DIR" in e.value.message and "COLLTUNE_JOB_DIR" in e.value.hint
    assert list(jobs.iterdir()) == []  # no plan was written there


@pytest.mark.mpi
@as_root
def test_a_job_directory_of_another_user_is_refused_by_the_command(
        cache: Path, tmp_path: Path) -> None:
    jobs = tmp_path / "jobs"
    jobs.mkdir(mode=0o700)
    os.chown(jobs, NOBODY, NOBODY)
    r = tune_cli("reduce", "--mpi", "/usr", "--np", "2", "--sizes", "1k", "--out",
                 str(tmp_path / "rules.conf"), env={"COLLTUNE_JOB_DIR": str(jobs)})
    assert r.returncode != 0 and "Traceback" not in r.stderr, r.stderr
    assert f"{jobs} is owned by user nobody" in r.stderr
    assert not (tmp_path / "rules.conf").exists()


@as_root
def test_plans_in_a_shared_sticky_job_directory_go_into_a_private_one(
        cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A sticky job directory others can write (as /tmp): a plan goes into the caller's own
    0700 directory there; one another user made first under that name is refused."""
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    jobs.chmod(0o1777)
    monkeypatch.setenv("COLLTUNE_JOB_DIR", str(jobs))
    with jobdir.temporary_file(".plan") as f:
        plan = Path(f.name)
    assert plan.parent == jobs / f"files-{os.geteuid()}"
    assert stat.S_IMODE(plan.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE(plan.stat().st_mode) == 0o600
    plan.unlink()
    other = tmp_path / "other"
    other.mkdir()
    other.chmod(0o1777)
    monkeypatch.setenv("COLLTUNE_JOB_DIR", str(other))
    (other / f"files-{os.geteuid()}").mkdir(mode=0o777)
    os.chown(other / f"files-{os.geteuid()}", NOBODY, NOBODY)
    with pytest.raises(ColltuneError) as e:
        jobdir.temporary_file(".plan")
    assert "is owned by user nobody" in e.value.message

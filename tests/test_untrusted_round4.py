"""Files from others, round four (issue 86): the online layer inside the application, the
library each rank really ran, and the profiles a replay trusts. Each test reproduces a
finding as the review found it (a colleague on the same machine, a project directory the
group shares) and fails without its fix."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from colltune.backends.openmpi.install import OpenMPI
from helpers import tune_cli
from test_online import _build


def _online(ompi41: OpenMPI, tmp_path: Path, *opts: str, exe: Path | None = None,
            steps: str = "80") -> subprocess.CompletedProcess[str]:
    exe = exe or _build(ompi41, tmp_path)
    return tune_cli("online", "-o", str(tmp_path / "r.conf"), "--mpi", str(ompi41.prefix),
                    "--db", str(tmp_path / "s.sqlite"), "--timeout", "120", *opts, "--",
                    str(ompi41.mpirun), "-np", "2", "--oversubscribe", str(exe), steps, "0",
                    env=ompi41.tool_env())


@pytest.mark.mpi
def test_summary_json_is_checked_before_the_run_and_never_written_through_a_link(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    """Finding 1: a link proj/summary.json -> the victim's notes was overwritten after the
    whole run; a missing directory was a traceback after it, a FIFO hung it, and `-` was a
    file named `-`. Now each is refused before anything runs (no rules file), and `-` is
    standard output holding the JSON alone."""
    exe = _build(ompi41, tmp_path)
    proj, notes = tmp_path / "proj", tmp_path / "victim-notes.txt"
    proj.mkdir()
    notes.write_text("the victim's notes\n")
    (proj / "summary.json").symlink_to(notes)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, why in ((proj / "summary.json", "symbolic link"),
                      (tmp_path / "no" / "such" / "s.json", "does not exist"),
                      (fifo, "not a regular file")):
        r = _online(ompi41, tmp_path, "--summary-json", str(path), exe=exe)
        said = r.stdout + r.stderr
        assert r.returncode == 2 and why in said and "Traceback" not in said, (path, said)
        assert not (tmp_path / "r.conf").exists(), "refused before the run"
    assert notes.read_text() == "the victim's notes\n"
    # `-`: the JSON alone on standard output, the table and the application's own output
    # on standard error
    r = _online(ompi41, tmp_path, "--summary-json", "-", exe=exe)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["groups"] and not (Path.cwd() / "-").exists()
    assert "checksum" in r.stderr


@pytest.mark.mpi
def test_evidence_dir_is_never_a_link_and_is_made_private(ompi41: OpenMPI,
                                                          tmp_path: Path) -> None:
    """Finding 9: --evidence DIR followed a link planted at DIR (the schedules landed in
    another user's directory), and a new DIR got the umask's mode. Now a link is refused
    before the run, a new DIR is 0700 under any umask."""
    exe = _build(ompi41, tmp_path)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (tmp_path / "ev").symlink_to(theirs)
    r = _online(ompi41, tmp_path, "--evidence", str(tmp_path / "ev"), exe=exe)
    said = r.stdout + r.stderr
    assert r.returncode == 2 and "symbolic link" in said, said
    assert list(theirs.iterdir()) == [] and not (tmp_path / "r.conf").exists()
    # a new directory (and the missing level above it) made private whatever the umask
    old = os.umask(0o002)
    try:
        r = _online(ompi41, tmp_path, "--evidence", str(tmp_path / "new" / "ev"), exe=exe)
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stdout + r.stderr
    for d in (tmp_path / "new", tmp_path / "new" / "ev"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, oct(d.stat().st_mode)
    assert any(f.name.startswith("schedule.") for f in (tmp_path / "new" / "ev").iterdir())

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


ZERO = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    double in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
    MPI_Init(&argc, &argv);
    for (int i = 0; i < 2000; i++) {
        MPI_Allreduce(in, out, 0, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(in, out, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}
"""


def _compile(mpi: OpenMPI, where: Path, name: str, text: str) -> Path:
    src, exe = where / f"{name}.c", where / name
    src.write_text(text)
    r = subprocess.run([str(mpi.mpicc), "-std=c99", "-Wall", "-Werror", "-o", str(exe),
                        str(src)], capture_output=True, text=True, env=mpi.tool_env(),
                       check=False)
    assert r.returncode == 0, r.stderr
    return exe


@pytest.mark.mpi
def test_zero_byte_calls_leave_their_group_out_and_the_file_is_written(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    """Finding 7: 2,000 allreduces of count 0 were explored, then the decision failed
    ("sizes must be 1 B to 2 GiB"), no file was written, and every later run failed alike.
    Now that group is left out with a note, and the 64 B group's file is written, twice."""
    exe = _compile(ompi41, tmp_path, "zero", ZERO)
    for _ in range(2):
        r = _online(ompi41, tmp_path, "--summary-json", str(tmp_path / "s.json"), exe=exe)
        said = " ".join((r.stdout + r.stderr).split())
        assert r.returncode == 0, said
        assert "allreduce of 0 B on 2 ranks: left out of the file" in said, said
        assert (tmp_path / "r.conf").is_file()
        sizes = {g["size"] for g in json.loads((tmp_path / "s.json").read_text())["groups"]}
        assert {0, 64} <= sizes, sizes

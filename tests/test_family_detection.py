"""Issue 64: the family comes from the prefix. `tune COLL --mpi PREFIX` drives the MPI
installed there, as `tune --version --mpi PREFIX` names it, with no --backend or --format;
--backend is needed only where a prefix holds two families (Debian's /usr: Open MPI and
MPICH), and the note says which was taken and how to take the other."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from colltune.backends import registry
from conftest import IMPI_PREFIX, MPICH_PREFIXES, get_mpi, missing
from helpers import tune_cli

FAST = ["--sizes", "8", "--point-time", "0.02", "--min-reps", "5", "--max-reps", "20",
        "--confirm-rounds", "0", "--boundaries", "midpoint", "--quiet"]


def _named(prefix: str) -> str:
    r = tune_cli("--version", "--mpi", prefix)
    assert r.returncode == 0, r.stderr
    return r.stdout


def test_every_installation_here_is_named_by_its_prefix() -> None:
    o5 = get_mpi("ompi50")
    assert "Open MPI 5.0" in _named(str(o5.prefix)) and "(--backend openmpi)" in _named(
        str(o5.prefix))
    usr = _named("/usr")
    assert "Open MPI 4.1.4" in usr and "(--backend openmpi)" in usr
    # Debian's /usr holds MPICH 4.0.2 too: the note names it and the option that takes it
    assert "note: /usr holds Open MPI 4.1.4 and MPICH 4.0.2 (--backend mpich)" in usr
    for prefix, family, backend in ((MPICH_PREFIXES["mpich50"], "MPICH 5.0", "mpich"),
                                    (IMPI_PREFIX, "Intel MPI 2021", "impi")):
        if prefix is None or not Path(prefix).is_dir():
            missing(f"{family} is not installed here (.ci/run installs it)")
        text = _named(prefix)
        assert family in text and f"(--backend {backend})" in text, text


def _stand_in_mvapich2(root: Path) -> Path:
    """What MVAPICH2 2.3.7 installs that detection reads (CI cannot build it: issue 37):
    mpiname -a, and an mpichversion that says MVAPICH2 (so MPICH's reader passes it by)."""
    bindir = root / "mv2" / "bin"
    bindir.mkdir(parents=True)
    tools = {"mpiname": "echo 'MVAPICH2 2.3.7 Wed March 02 22:00:00 EST 2022 ch3:mrail'",
             "mpichversion": "echo 'MVAPICH2 Version:     \t2.3.7'",
             "mpicc": "exit 0", "mpiexec": "exit 0"}
    for name, body in tools.items():
        (bindir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bindir / name).chmod(0o755)
    return bindir.parent


def test_mvapich2_is_named_by_its_prefix_not_taken_for_mpich(tmp_path: Path) -> None:
    prefix = _stand_in_mvapich2(tmp_path)
    name, note = registry.resolve(None, None, str(prefix))
    assert (name, note) == ("mvapich2", None)
    assert "MVAPICH2 2.3.7" in _named(str(prefix)) and "(--backend mvapich2)" in _named(
        str(prefix))


def test_a_prefix_with_no_mpi_says_what_was_looked_for(tmp_path: Path) -> None:
    r = tune_cli("reduce", "--np", "2", "--mpi", str(tmp_path), "--out",
                 str(tmp_path / "r.conf"))
    assert r.returncode == 3 and "Traceback" not in r.stderr
    first = r.stderr.splitlines()[0]
    assert first.startswith(f"error: no MPI colltune drives at {tmp_path}")
    for tool in ("ompi_info", "mpichversion", "mpiname", "impi_info"):
        assert tool in first, first
    assert "what to do:" in r.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("which", ["mpich50"])
def test_tune_drives_the_family_installed_at_the_prefix(tmp_path: Path, which: str) -> None:
    """No --backend, no --format: MPICH 5.0.2's prefix gives MPICH's tuning file, as its
    reader reads it. (Intel MPI's prefix goes the same way through registry.resolve, named
    above; its tune with no --format is tests/test_impi_replay.py's table test: 17 s more
    here bought nothing the two do not show.)"""
    prefix = MPICH_PREFIXES["mpich50"] if which == "mpich50" else IMPI_PREFIX
    if prefix is None or not Path(prefix).is_dir():
        missing(f"{which} is not installed here (.ci/run installs it)")
    out = tmp_path / "t.json"
    coll = "bcast" if which == "impi" else "reduce"
    r = tune_cli(coll, "--np", "2", "--mpi", prefix, "--db", str(tmp_path / "db.sqlite"),
                 "--out", str(out), *FAST)
    assert r.returncode == 0, r.stderr[-3000:]
    wanted = "impi" if which == "impi" else "mpich"
    # the store records which family measured (a tune with no confirmed win may write no
    # tuning file: Intel MPI's JSON file names a collective only where it changes it)
    con = sqlite3.connect(tmp_path / "db.sqlite")
    assert {b for (b,) in con.execute("SELECT DISTINCT backend FROM measurements")} == {
        wanted}
    con.close()
    for written in (out, out.with_suffix(".dat")):  # the table, where only it carries wins
        if written.exists():
            assert registry.for_file(written).name == wanted
            chk = tune_cli("check", str(written), "--mpi", prefix)
            assert chk.returncode == 0, chk.stdout + chk.stderr


def test_a_family_asked_for_where_another_is_installed_names_what_is_there(
        tmp_path: Path) -> None:
    """--format or --backend naming another family than the prefix holds: the error says
    what the prefix does hold, and how to tune it."""
    prefix = _stand_in_mvapich2(tmp_path)
    for how in (["--format", "mpich"], ["--backend", "impi"]):
        r = tune_cli("reduce", "--np", "2", "--mpi", str(prefix), *how, "--out",
                     str(tmp_path / "x.json"))
        assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
        assert f"{prefix} holds MVAPICH2 2.3.7 (--backend mvapich2)" in r.stderr, r.stderr
        assert "leave --backend and --format out" in r.stderr



def test_compare_takes_a_prefix_alone(tmp_path: Path) -> None:
    """`tune compare --lib PREFIX[=FILE]`: the family installed there, as tune takes it
    (an arm named by its family, as before, is left as it is)."""
    from colltune.cli.compare import _with_family

    prefix = str(_stand_in_mvapich2(tmp_path))
    assert _with_family(prefix) == f"mvapich2:{prefix}"
    assert _with_family(f"{prefix}=p.conf") == f"mvapich2:{prefix}=p.conf"
    assert _with_family("openmpi:/usr") == "openmpi:/usr"

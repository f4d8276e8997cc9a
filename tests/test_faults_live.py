"""Faults against real Open MPI: a wrong answer is never chosen, a hung or crashing
configuration is killed with all its ranks and excluded, and a killed tuner resumes
without repeating or losing measurements."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from colltune.backends.openmpi import OpenMPI
from colltune.rules import ompi_classic as rules
from helpers import collbench_pids, tune_cli

pytestmark = pytest.mark.mpi

FAST = ["--point-time", "0.05", "--min-reps", "5", "--quiet"]


def _tune(ompi: OpenMPI, tmp: Path, *extra: str, fault: str | None = None
          ) -> tuple[subprocess.CompletedProcess[str], dict]:
    summary = tmp / "summary.json"
    env = {"COLLTUNE_TEST_FAULT": fault} if fault else {}
    r = tune_cli("reduce", "--np", "4", "--mpi", str(ompi.prefix), "--db", str(tmp / "db.sqlite"),
                 "--out", str(tmp / "rules.conf"), "--summary-json", str(summary), *FAST, *extra,
                 env=env)
    assert r.returncode == 0, r.stderr
    return r, json.loads(summary.read_text())


def _rows(db: Path, where: str = "") -> list[tuple]:
    with sqlite3.connect(db) as c:
        return c.execute("SELECT config_key, size, status, samples, created FROM measurements "
                         + where + " ORDER BY config_key, size").fetchall()


def test_wrong_result_is_recorded_invalid_and_never_chosen(ompi41: OpenMPI, tmp_path: Path
                                                           ) -> None:
    # linear is among the fastest reduces at small sizes here; make it return wrong sums
    _, doc = _tune(ompi41, tmp_path, "--sizes", "8,64,512",
                   fault="wrong:coll_tuned_reduce_algorithm=1")
    bad = _rows(tmp_path / "db.sqlite", "WHERE algorithm=1")
    assert bad and all(status == "invalid" for _, _, status, _, _ in bad)
    assert sum("invalid" in f for f in doc["failures"]) == len(bad)
    for d in doc["collectives"]["reduce"]["4"]:
        assert d["chosen"]["algorithm"] != 1 and (d["best"] or {}).get("algorithm") != 1
    rf = rules.read(tmp_path / "rules.conf")
    assert all(r.alg != 1 for s in rf.collectives[11] for r in s.rules)


@pytest.mark.parametrize("kind,status", [("hang", "timeout"), ("crash", "crashed")])
def test_hung_or_crashing_configuration_is_killed_and_excluded(
        ompi: OpenMPI, tmp_path: Path, kind: str, status: str) -> None:
    before = set(collbench_pids())
    t0 = time.monotonic()
    _, doc = _tune(ompi, tmp_path, "--sizes", "8,4K", "--timeout", "8",
                   fault=f"{kind}:coll_tuned_reduce_algorithm=7")
    assert time.monotonic() - t0 < 180
    rows = _rows(tmp_path / "db.sqlite", "WHERE algorithm=7")
    assert sorted(r[2] for r in rows) == sorted([status, "skipped"])
    assert any(status in f for f in doc["failures"])
    if kind == "crash":
        msg = [f for f in doc["failures"] if status in f][0]
        assert "exit status" in msg  # the library's own words travel with the record
    # everything else was measured; the run finished and wrote valid rules
    ok = _rows(tmp_path / "db.sqlite", "WHERE status='ok'")
    assert len(ok) > 10
    rules.read(tmp_path / "rules.conf")
    time.sleep(1)
    assert set(collbench_pids()) - before == set(), "ranks of the killed job are still alive"


def test_killed_tuner_resumes_without_repeating_or_losing(ompi41: OpenMPI, tmp_path: Path
                                                          ) -> None:
    db = tmp_path / "db.sqlite"
    args = ["reduce", "--np", "4", "--mpi", str(ompi41.prefix), "--db", str(db), "--out",
            str(tmp_path / "rules.conf"), "--sizes", "8,512,4K,64K", *FAST]
    before = set(collbench_pids())
    proc = subprocess.Popen([sys.executable, "-m", "colltune.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if db.exists() and len(_rows(db)) >= 25:
                break
        except sqlite3.OperationalError:
            pass  # the tuner has not created its tables yet
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    first = _rows(db)
    assert 25 <= len(first), "the tuner was killed before measuring"
    time.sleep(1)
    assert set(collbench_pids()) - before == set(), "killing the tuner left ranks running"
    assert not (tmp_path / "rules.conf").exists()

    r = tune_cli(*args, "--summary-json", str(tmp_path / "s.json"))
    assert r.returncode == 0, r.stderr
    final = _rows(db)
    keys = [(k, s) for k, s, *_ in final]
    assert len(keys) == len(set(keys)), "a measurement was stored twice"
    assert set(first) <= set(final), "a finished measurement was repeated or changed"
    assert len(final) > len(first)

    # a full run of the same plan into a fresh store has exactly the same points
    r2 = tune_cli(*[a if a != str(db) else str(tmp_path / "fresh.sqlite") for a in args],
                  "--out", str(tmp_path / "fresh.conf"))
    assert r2.returncode == 0, r2.stderr
    assert sorted(keys) == sorted((k, s) for k, s, *_ in _rows(tmp_path / "fresh.sqlite"))

    # re-deciding from the store gives the same rules as the resumed run
    again = tmp_path / "again.conf"
    r3 = tune_cli(*[a if a != str(tmp_path / "rules.conf") else str(again) for a in args],
                  "--from-db")
    assert r3.returncode == 0, r3.stderr
    strip = [ln for ln in (tmp_path / "rules.conf").read_text().splitlines()
             if not ln.startswith("#")]
    assert strip == [ln for ln in again.read_text().splitlines() if not ln.startswith("#")]

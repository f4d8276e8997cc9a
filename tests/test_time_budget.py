"""`--time-budget` (issue 84, item 3): a tune that fits its allocation stops in time with a
valid file, says what it left to the library, and a run with more budget resumes there."""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import pytest

from colltune.errors import ColltuneError
from colltune.tuner.budget import parse_duration
from conftest import get_mpi
from helpers import rows_per_collective, tune_cli


@pytest.mark.parametrize("text,seconds", [("90", 90), ("90s", 90), ("5m", 300),
                                          ("1h30m", 5400), ("01:30:00", 5400),
                                          ("2:30", 150), ("0.5m", 30)])
def test_durations_as_a_site_writes_them(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "soon", "5x", "0", "-5m", "99d", "5m soon"])
def test_a_duration_that_is_not_one_is_refused(text: str) -> None:
    with pytest.raises(ColltuneError, match="--time-budget"):
        parse_duration(text)


@pytest.mark.mpi
def test_a_budget_too_small_for_anything_is_refused_saying_what_works(tmp_path: Path
                                                                      ) -> None:
    mpi = get_mpi("ompi41")
    r = tune_cli("reduce", "--np", "4", "--mpi", str(mpi.prefix), "--db",
                 str(tmp_path / "s.db"), "--out", str(tmp_path / "r.conf"),
                 "--time-budget", "2s")
    assert r.returncode == 2 and "give at least --time-budget" in r.stderr, r.stderr[-600:]
    assert not (tmp_path / "r.conf").exists()
    con = sqlite3.connect(tmp_path / "s.db")  # opened, nothing measured
    assert con.execute("SELECT COUNT(*) FROM measurements").fetchone() == (0,)
    con.close()


@pytest.mark.mpi
def test_tune_all_stops_within_its_budget_and_a_larger_one_resumes(tmp_path: Path) -> None:
    """Open MPI 4.1 at 4 ranks, every collective: 25 s measure what fits (a valid file,
    the rest left to the library and said so); a second run with 10 minutes measures only
    what the first left out and writes the whole file."""
    mpi = get_mpi("ompi41")
    db, out, summ = tmp_path / "s.db", tmp_path / "r.conf", tmp_path / "s.json"
    args = ["all", "--np", "4", "--mpi", str(mpi.prefix), "--sizes", "8,64K",
            "--point-time", "0.05", "--boundaries", "midpoint",
            "--db", str(db), "--out", str(out), "--summary-json", str(summ)]
    t0 = time.monotonic()
    r = tune_cli(*args, "--confirm-rounds", "2", "--time-budget", "25s")
    took = time.monotonic() - t0
    assert r.returncode == 0, r.stderr[-2000:]
    assert took < 25 + 10, took  # the budget, and starting Python and the kernel's build
    first = json.loads(summ.read_text())
    left = first["budget"]["left_out"]
    assert left and all("left to the library" in x for x in left), left
    assert "not measured within --time-budget" in r.stderr
    measured = rows_per_collective(db)
    assert measured and tune_cli("check", str(out), "--mpi", str(mpi.prefix)).returncode == 0

    # what is left, measured without launch pairs: their budget was the first run's test
    r = tune_cli(*args, "--confirm-rounds", "0", "--time-budget", "10m")
    assert r.returncode == 0, r.stderr[-2000:]
    again = rows_per_collective(db)
    assert json.loads(summ.read_text())["budget"]["left_out"] == []
    assert len(again) > len(measured)
    # what the first run measured was kept, not measured again
    assert all(again[c] == n for c, n in measured.items()), (measured, again)


def test_the_budget_confirms_the_most_gain_per_second_first() -> None:
    """Issue 84, item 3: targets with nothing to confirm come first (no launch pairs),
    then the largest expected gain per second of pairs; a cheap large win goes before an
    expensive small one, a tie keeps the plan's order."""
    from colltune.tuner.budgeted import by_gain_per_second

    rows = [("bcast: small win, dear", {65536: 0.05}, 100.0),
            ("reduce: nothing won", {}, 0.0),
            ("allreduce: two wins, cheap", {8: 0.3, 1024: 0.2}, 20.0),
            ("alltoall: one win", {4096: 0.5}, 20.0),
            ("gather: nothing won", {}, 0.0)]
    assert by_gain_per_second(rows) == [
        "reduce: nothing won", "gather: nothing won", "allreduce: two wins, cheap",
        "alltoall: one win", "bcast: small win, dear"]

"""`--strategy bayes` and `--strategy race` against real Open MPI: within the budget, the
default measured at every size, a rules file Open MPI accepts, and a killed search that
resumes without measuring anything twice."""

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

from colltune.backends.openmpi.install import OpenMPI
from colltune.core.catalog import MAXREQ
from helpers import collbench_pids, ranks_left, tune_cli

pytestmark = pytest.mark.mpi

SIZES = "8,4K,64K,1M"


def _rows(db: Path) -> dict[tuple[str, int], tuple[str, list[float]]]:
    con = sqlite3.connect(db)
    try:
        return {(k, s): (st, json.loads(sm)) for k, s, st, sm in con.execute(
            "SELECT config_key, size, status, samples FROM measurements")}
    finally:
        con.close()


def test_bayes_stays_within_its_budget_and_writes_valid_rules(ompi41: OpenMPI, tmp_path: Path
                                                             ) -> None:
    db, out, summ = tmp_path / "db.sqlite", tmp_path / "rules.conf", tmp_path / "s.json"
    args = ["reduce", "--boundaries", "midpoint",
            "--np", "4", "--mpi", str(ompi41.prefix), "--db", str(db), "--sizes",
            SIZES, "--strategy", "bayes", "--budget", "20", "--out", str(out),
            "--summary-json", str(summ), "--confirm-rounds", "2"]
    r = tune_cli(*args)
    assert r.returncode == 0, r.stderr
    assert "bayes measured" in r.stderr
    rows = _rows(db)
    assert len(rows) <= 20, "more (configuration, size) points measured than the budget"
    assert all(rows[("a0", s)][0] == "ok" for s in (8, 4096, 65536, 1048576))
    # fixed repetitions per point (10), 30 more for each size's leaders and the default
    assert {len(xs) for st, xs in rows.values() if st == "ok"} <= {10, 40}
    assert tune_cli("check", str(out), "--mpi", str(ompi41.prefix)).returncode == 0
    doc = json.loads(summ.read_text())
    search = doc["searches"]["reduce np=4"]
    assert doc["strategy"] == "bayes" and search["points"] == len(rows) <= 20
    assert search["repetitions"] == sum(len(xs) for st, xs in rows.values() if st == "ok")
    assert [d["size"] for d in doc["collectives"]["reduce"]["4"]] == [8, 4096, 65536, 1048576]
    assert all("default_ci" in d for d in doc["collectives"]["reduce"]["4"])  # the evidence
    # where the time went: the sweep's share counted, no stage beyond the whole
    spent = doc["seconds"]
    assert spent["sweep"] > 0 and sum(v for k, v in spent.items() if k != "total") \
        <= spent["total"] + 0.05, spent
    assert f"took {spent['total']:.0f} s: sweep" in r.stderr, r.stderr[-500:]
    # what the allocation held (issue 84): one node for the tune's whole wall time, split
    # by stage as the clock split it, start-up and the two largest sizes inside it
    held = doc["allocation"]
    assert held["nodes"] == 1 and held["launches"] >= 2, held
    assert 0.9 * spent["total"] - 1 <= held["node_seconds"] <= spent["total"] + 0.01, held
    assert held["stages"]["sweep"] > 0 and set(held["stages"]) - {"the rest"} <= set(spent)
    assert sum(held["stages"].values()) == pytest.approx(held["node_seconds"], abs=0.01)
    assert 0 < held["startup"] < held["node_seconds"], held
    assert held["largest"] == [65536, 1048576] and 0 < held["largest_sizes"], held
    assert "allocation: " in r.stderr and "node(s)" in r.stderr, r.stderr[-800:]
    shown = json.loads(tune_cli("show", "--db", str(db), "--json", "-").stdout)
    assert shown["allocations"][0]["node_seconds"] == held["node_seconds"]

    # a rerun replays the stored answers: the same search, nothing measured again
    text = out.read_text()
    r2 = tune_cli(*args)
    assert r2.returncode == 0, r2.stderr
    assert _rows(db) == rows
    strip = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert strip == [ln for ln in out.read_text().splitlines() if not ln.startswith("#")]


def test_killed_race_resumes_and_stays_within_its_budget(ompi41: OpenMPI, tmp_path: Path
                                                        ) -> None:
    db, out, summ = tmp_path / "db.sqlite", tmp_path / "rules.conf", tmp_path / "s.json"
    args = ["reduce", "--boundaries", "midpoint",
            "--np", "4", "--mpi", str(ompi41.prefix), "--db", str(db), "--sizes",
            SIZES, "--strategy", "race", "--budget", "1500", "--out", str(out),
            "--confirm-rounds", "0"]
    before = set(collbench_pids())
    # kill -9 cannot clean up: its launch's plan file goes where the test's own files go
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "colltune.cli", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            env={**os.environ, "TMPDIR": str(tmp)})
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:  # kill it in the middle of the race
        time.sleep(0.3)
        try:
            if db.exists() and sum(len(xs) for _, xs in _rows(db).values()) > 300:
                break
        except sqlite3.OperationalError:
            continue  # the store's file is made before its tables: not there yet
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    first = _rows(db)
    assert first, "the race stored nothing before it was killed"
    assert ranks_left(before) == set(), "killing the tuner left ranks running"

    r = tune_cli(*args, "--summary-json", str(summ))
    assert r.returncode == 0, r.stderr
    final = _rows(db)
    for key, (_st, xs) in first.items():  # what was stored survives, samples only appended
        assert final[key][1][: len(xs)] == xs
    search = json.loads(summ.read_text())["searches"]["reduce np=4"]
    used = sum(len(xs) for st, xs in final.values() if st == "ok")
    # every stored repetition was used by the resumed race, none measured twice
    assert search["repetitions"] == used <= 1500
    assert all(final[("a0", s)][0] == "ok" for s in (8, 4096, 65536, 1048576))
    assert tune_cli("check", str(out), "--mpi", str(ompi41.prefix)).returncode == 0


def test_model_strategy_races_the_model_shortlist_and_the_default(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    from colltune.backends.openmpi.install import read_catalog
    from colltune.collectives import get_collective
    from colltune.core.config import Config
    from colltune.core.space import configurations, useful_at
    from colltune.models.predict import load_models, predict
    from colltune.store import Store
    from colltune.tuner.guided import shortlist

    db = tmp_path / "db.sqlite"
    args = ["reduce", "--boundaries", "midpoint",
            "--np", "4", "--mpi", str(ompi41.prefix), "--db", str(db), "--sizes",
            "8,64K", "--strategy", "model", "--top-k", "2", "--confirm-rounds", "0",
            "--out", str(tmp_path / "r.conf"), "--summary-json", str(tmp_path / "s.json")]
    r = tune_cli(*args)
    assert r.returncode == 2 and "tune model fit" in r.stderr  # no model yet: says what to do
    assert tune_cli("model", "fit", "--np", "2", "--mpi", str(ompi41.prefix), "--db", str(db),
                    "--reps", "10").returncode == 0
    r = tune_cli(*args)
    assert r.returncode == 0, r.stderr
    rows = _rows(db)
    store = Store(db)
    models = load_models(store, ompi41)
    store.close()
    coll, cat = get_collective("reduce"), read_catalog(ompi41)
    for size in (8, 65536):
        # 4.1.4 reads classic rules only: the tuner plans without max_requests
        cands = [c for c in configurations(coll, cat, 4, {MAXREQ: [0]})
                 if useful_at(c, size, cat)]
        ranked = predict(models, coll, cat, 4, size, cands)
        short = {c.key for c in shortlist(ranked, 2)}
        assert {p.config.key for p in ranked[:2]} <= short
        assert {p.config.algorithm for p in ranked} == {Config.from_key(k).algorithm
                                                        for k in short}
        assert len(short) < len(cands)  # segment sizes were pruned
        assert {k for k, s in rows if s == size} == short | {"a0"}
    search = json.loads((tmp_path / "s.json").read_text())["searches"]["reduce np=4"]
    used = sum(len(xs) for st, xs in rows.values() if st == "ok")
    assert search["shortlisted"] == len(rows) and search["top_k"] == 2
    assert search["repetitions"] == used  # a race: rows hold what it measured, no more


def test_predict_writes_rules_for_a_size_that_was_not_run(ompi41: OpenMPI, tmp_path: Path
                                                         ) -> None:
    from colltune.rules import ompi_classic as rules

    out, summ = tmp_path / "r.conf", tmp_path / "s.json"
    r = tune_cli("reduce", "--boundaries", "midpoint", "--np", "64", "--predict",
                 "--fit-np", "2,3", "--mpi",
                 str(ompi41.prefix), "--db", str(tmp_path / "db.sqlite"), "--sizes", "8,64K",
                 "--out", str(out), "--summary-json", str(summ), "--confirm-rounds", "0")
    assert r.returncode == 0, r.stderr
    rows = _rows(tmp_path / "db.sqlite")
    assert rows  # measured at 2 and 3 ranks only (the store keys carry no np: check below)
    con = sqlite3.connect(tmp_path / "db.sqlite")
    assert {n for (n,) in con.execute("SELECT DISTINCT np FROM measurements")} == {2, 3}
    con.close()
    rf = rules.read(out)
    # only the predicted section, after the one that keeps smaller communicators' default
    assert [s.comsize for s in rf.collectives[11]] == [1, 64]
    assert [r.alg for r in rf.collectives[11][0].rules] == [0]
    assert "PREDICTED, NOT MEASURED at 64 ranks" in out.read_text()
    assert tune_cli("check", str(out), "--mpi", str(ompi41.prefix)).returncode == 0
    doc = json.loads(summ.read_text())
    assert "np=2,3" in doc["predicted"]["reduce np=64"]
    assert all(d["predicted"] for d in doc["collectives"]["reduce"]["64"])

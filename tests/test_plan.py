"""`tune ... --dry-run` (issue 84, item 2): the allocation a tune would hold, said before it
runs, from the plan the tune itself builds and the account of earlier tunes; refused where
the tune would be refused; nothing launched or written."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from colltune.core.clock import PAIRS, SWEEP
from colltune.options import TuneOptions
from colltune.store import Store
from colltune.tuner import forecast
from conftest import get_mpi
from helpers import tune_cli


def test_a_plan_for_nodes_the_hostfile_or_allocation_lacks_is_refused(tmp_path: Path
                                                                      ) -> None:
    hosts = tmp_path / "hosts"
    hosts.write_text("node1 slots=4\n")
    for extra, env, said in (
            (["--hostfile", str(hosts)], {}, f"--nodes 4: {hosts} has 1 node(s)"),
            ([], {"SLURM_JOB_ID": "7", "SLURM_JOB_NUM_NODES": "2", "SLURM_NTASKS": "8"},
             "--nodes 4: Slurm job 7 has 2 node(s)")):
        for mode in (["--dry-run"], ["--out", str(tmp_path / "r.conf")]):  # as tune refuses
            r = tune_cli("reduce", "--np", "8", "--nodes", "4", "--ppn", "2", "--mpi", "/usr",
                         "--db", str(tmp_path / "s.db"), *extra, *mode, env=env)
            assert r.returncode == 2 and said in r.stderr, r.stderr[-600:]
            assert "Traceback" not in r.stderr
    assert not (tmp_path / "s.db").exists() and not (tmp_path / "r.conf").exists()


def test_earlier_tunes_price_the_plan(tmp_path: Path) -> None:
    """The store's accounts of this installation on as many nodes set the prices: each
    size's point, a launch's start-up and the stages after the sweep as its shares; the
    plan says where its prices came from. An account of another layout does not."""
    db = tmp_path / "s.db"
    store = Store(db)
    for nodes, sweep_s in ((1, 10.0), (1, 20.0), (2, 99.0)):
        store.add_allocation("k", "h", (["reduce"], [4]), False, {
            "nodes": nodes, "node_hours": 0.0, "node_seconds": 2 * sweep_s,
            "stages": {SWEEP: sweep_s, PAIRS: sweep_s / 2, "the rest": sweep_s / 4},
            "startup": 1.0, "largest_sizes": 0.0, "largest": [], "launches": 2,
            "launches_by_stage": {SWEEP: 1}, "startup_each": sweep_s / 10,
            "per_point": {"reduce/8": sweep_s / 100}, "counted": "the wall time"})
    store.close()
    opts = TuneOptions(["reduce"], [4], db=db)
    pr = forecast.prices(db, "k", 1, False, opts)
    assert pr.startup == pytest.approx(1.5) and pr.at("reduce", 8) == pytest.approx(0.15)
    assert pr.at("bcast", 8) == pytest.approx(0.15)  # another collective: at that size
    assert pr.shares[PAIRS] == pytest.approx(0.5) and pr.shares["the rest"] == 0.25
    assert pr.at("reduce", 1024) == pytest.approx(0.15)  # beyond its sizes: the nearest
    assert pr.at("gather", 1024) == pytest.approx(opts.settings.point_time * forecast.POINT_SHARE)
    assert "2 earlier tune(s)" in pr.source
    assert "defaults" in forecast.prices(db, "other", 1, False, opts).source


def test_a_size_between_the_priced_ones_is_priced_from_its_collectives_neighbours() -> None:
    """A size no earlier tune measured, between two its collective's tunes did: in log
    size between them, not the other collectives' price at that size."""
    pr = forecast.Prices(0.0, {("allreduce", 1024): 0.2, ("allreduce", 4096): 0.4,
                               ("bcast", 2048): 0.01}, 0.1, {}, "")
    assert pr.at("allreduce", 2048) == pytest.approx(0.3)
    assert pr.at("allreduce", 64) == pytest.approx(0.2)  # below them all: the nearest
    assert pr.at("bcast", 2048) == pytest.approx(0.01)
    assert pr.at("reduce", 2048) == pytest.approx(0.01)  # no own prices: others' there


def test_a_collective_tuned_before_prices_its_own_pairs(tmp_path: Path) -> None:
    """The stages after the sweep as the share of it they took in earlier tunes of that
    collective alone (how many sizes a win had to be confirmed at is the collective's);
    a collective tuned only with others, or never, takes the share of every earlier tune,
    and a plan of several collectives adds each one's own."""
    db = tmp_path / "s.db"
    store = Store(db)
    for colls, pairs in ((["reduce"], 0.5), (["bcast"], 6.0), (["reduce", "bcast"], 2.0),
                         (["bcast"], 5.0)):
        store.add_allocation("k", "h", (colls, [4]), False, {
            "nodes": 1, "node_hours": 0.0, "node_seconds": 10.0 * (1 + pairs),
            "stages": {SWEEP: 10.0, PAIRS: 10.0 * pairs}, "startup": 1.0,
            "largest_sizes": 0.0, "largest": [], "launches": 2, "launches_by_stage": {},
            "startup_each": 0.0, "per_point": {"reduce/8": 1.0, "bcast/8": 1.0},
            "counted": "the wall time"})
    store.close()
    pr = forecast.prices(db, "k", 1, False, TuneOptions(["reduce"], [4], db=db))
    assert pr.shares_of({"reduce"})[PAIRS] == pytest.approx(0.5)
    assert "of bcast, reduce from their own earlier tunes" in pr.source
    assert pr.shares_of({"bcast"})[PAIRS] == pytest.approx(5.5)
    assert pr.shares_of({"allreduce"})[PAIRS] == pytest.approx(3.5)  # every tune's median
    assert pr.shares_of({"reduce", "bcast"})[PAIRS] == pytest.approx(3.5)
    held = forecast.stage_seconds(pr, 0, [("bcast", 8)] * 2)
    assert (held[SWEEP], held[PAIRS]) == (pytest.approx(2.0), pytest.approx(11.0))


@pytest.mark.mpi
def test_the_plan_counts_the_launches_and_points_the_tune_then_runs(tmp_path: Path) -> None:
    """Open MPI 4.1 at 4 ranks: the dry run writes nothing, then the tune runs the sweep
    launches and measures the points the plan said; a second plan is priced from it and,
    as a resumed tune would, leaves out what the store holds."""
    mpi = get_mpi("ompi41")
    db, out, plan_json, summ = (tmp_path / n for n in ("s.db", "r.conf", "p.json", "s.json"))
    args = ["reduce", "--np", "4", "--mpi", str(mpi.prefix), "--sizes", "8,64K",
            "--db", str(db), "--out", str(out), "--confirm-rounds", "2",
            "--point-time", "0.05"]
    r = tune_cli(*args, "--dry-run", "--summary-json", str(plan_json))
    assert r.returncode == 0, r.stderr
    assert not db.exists() and not out.exists()
    plan = json.loads(plan_json.read_text())
    assert "priced from defaults" in r.stderr and plan["nodes"] == 1
    assert set(plan["stages"]) >= {SWEEP, PAIRS} and plan["node_seconds"] > 0
    # what no plan can know, stated as a bound beside it: the default measured again with
    # its two suspects at each size where it stalls (8 times the point's 0.05 s each)
    stall = plan["if_the_default_stalls"]
    assert stall["sizes"] == 2 and stall["node_seconds_per_size"] == pytest.approx(1.2), stall
    assert stall["node_seconds_at_most"] > 2 * 1.2, stall
    assert "not in the plan: where the default stalls" in r.stderr, r.stderr

    r = tune_cli(*args, "--summary-json", str(summ))
    assert r.returncode == 0, r.stderr
    held = json.loads(summ.read_text())["allocation"]
    con = sqlite3.connect(db)
    (points,) = con.execute("SELECT COUNT(*) FROM measurements").fetchone()
    con.close()
    assert (plan["sweep_launches"], plan["points"]) == (held["launches_by_stage"][SWEEP],
                                                        points), (plan, held)
    again = tune_cli(*args, "--dry-run", "--summary-json", str(plan_json))
    assert again.returncode == 0, again.stderr
    later = json.loads(plan_json.read_text())
    assert "the store's 1 earlier tune(s)" in later["priced_from"]
    assert later["points"] == later["sweep_launches"] == 0  # all stored: nothing to measure

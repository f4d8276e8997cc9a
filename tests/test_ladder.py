"""A ladder of communicator sizes in one launch (`--comm-sizes`): the kernel measures on
groups of consecutive ranks that all run at once, every group gets the right answer, the
library runs inside each group what was asked, and the file written from one launch has a
section per size that Open MPI obeys at that size."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from colltune.backends.openmpi.applied import forced, traffic, under_rules
from colltune.backends.openmpi.install import OpenMPI, dynamic_env, forcing_vars, read_catalog
from colltune.backends.registry import of
from colltune.collectives import get_collective
from colltune.core.catalog import FAN, MAXREQ, SEG
from colltune.core.config import Config
from colltune.errors import ColltuneError
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.rules import ompi_classic as rules
from colltune.rules.ompi_classic import COLLTYPE
from colltune.slots import Placement, ladder, place
from colltune.store import Store
from helpers import tune_cli

REDUCE = get_collective("reduce")


def test_rungs_share_the_launch_and_record_its_layout() -> None:
    top = Placement(512, False, None, 16, 32)
    rungs = ladder(top, [2, 64, 512])
    assert [(p.np, p.nodes, p.ppn, p.group) for p in rungs] == [
        (2, 1, 32, 2), (64, 2, 32, 64), (512, 16, 32, 0)]
    assert all(p.launched is top for p in rungs)
    assert rungs[-1] is top  # the launch's own size is an ordinary measurement
    for bad in ([1, 4], [2, 1024]):
        with pytest.raises(ColltuneError, match="--comm-sizes"):
            ladder(top, bad)
    plan = KernelPlan("reduce", [KernelConfig(3, {"x": 1}, 2), KernelConfig(4)], [(3, 8)])
    assert "config 3 1 x 1 group 2\n" in plan.render()
    assert "config 4 0\n" in plan.render()


@pytest.mark.mpi
def test_groups_run_at_once_and_are_checked(ompi41: OpenMPI) -> None:
    """Groups of 2 and of 3 (one rank idle) inside 4 ranks: every collective's answer is
    checked inside its group; a forced linear reduce sends to each group's root only."""
    exe = build_kernel(ompi41)
    be = of(ompi41)
    names = ["bcast", "reduce", "allreduce", "allgather", "alltoall", "gather", "scatter",
             "reduce_scatter_block", "scan"]
    for name in names:
        plan = KernelPlan(name, [KernelConfig(0, {}, 2), KernelConfig(1, {}, 3),
                                 KernelConfig(2)], [(c, 4096) for c in range(3)],
                          Repetitions(min_reps=2, max_reps=2))
        cmd, env = be.launch(ompi41, place(4, env={}), name, 0, None)
        out = run_kernel(cmd, exe, plan, env, point_timeout=60)
        assert out.status == "ok", (name, out.message, out.stderr[-500:])
        assert sorted((r.cid, r.status) for r in out.results) == [
            (0, "ok"), (1, "ok"), (2, "ok")], (name, [r.message for r in out.results])
    cat = read_catalog(ompi41)
    linear = forcing_vars("reduce", 1, 0, 0, 0, cat)
    size = 65536

    def big(t: dict[tuple[int, int], tuple[int, int]]) -> set[tuple[int, int]]:
        return {pair for pair, (nbytes, _) in t.items() if nbytes >= size}

    assert big(traffic(ompi41, REDUCE, 4, size, dynamic_env(), linear, group=2)) == {
        (1, 0), (3, 2)}
    assert big(traffic(ompi41, REDUCE, 4, size, dynamic_env(), linear)) == {
        (1, 0), (2, 0), (3, 0)}


@pytest.mark.mpi
def test_one_launch_writes_a_section_per_size_that_open_mpi_obeys(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    out, db, summary = tmp_path / "r.conf", tmp_path / "s.sqlite", tmp_path / "s.json"
    r = tune_cli("reduce", "--np", "4", "--comm-sizes", "2:4", "--mpi", str(ompi41.prefix),
                 "--sizes", "64K,256K", "--boundaries", "midpoint", "--point-time", "0.02",
                 "--confirm-rounds", "1", "--out", str(out), "--db", str(db),
                 "--summary-json", str(summary))
    assert r.returncode == 0, r.stderr
    assert "measuring communicator sizes 2, 4 in one launch of 4 ranks" in r.stderr
    doc = json.loads(summary.read_text())
    assert set(doc["collectives"]["reduce"]) == {"2", "4"}
    store = Store(db)
    try:
        # the rung of 2 is recorded as what it was: 2-rank communicators, 4 ranks per node
        layouts = sorted((c.np, c.ppn, c.nodes) for c in store.contexts())
    finally:
        store.close()
    assert layouts == [(2, 4, 1), (4, 4, 1)]
    text = out.read_text()
    assert "measured on groups of 2 consecutive ranks inside one 4-rank launch" in text
    rf = rules.read(out)
    secs = rf.collectives[COLLTYPE[REDUCE.name]]
    # 3 ranks, measured at neither: what 2's and 4's sections agree on (rules.agreed)
    assert [s.comsize for s in secs] == [2, 3, 4]
    def rows(sec: rules.CommRule) -> list[tuple[int, ...]]:
        return [(r.msgsize, r.alg, r.faninout, r.segsize) for r in sec.rules]
    assert rows(secs[1]) == rows(rules.agreed(secs[0], secs[2], 3))
    cat = read_catalog(ompi41)
    for sec in (secs[0], secs[2]):
        np = sec.comsize
        for i, rule in enumerate(sec.rules):
            nxt = sec.rules[i + 1].msgsize if i + 1 < len(sec.rules) else 1 << 20
            size = max(65536, (rule.msgsize + nxt) // 2 // 8 * 8)
            cfg = Config.of(rule.alg, {SEG: rule.segsize, FAN: rule.faninout,
                                       MAXREQ: rule.maxreq or 0})
            want = forced(ompi41, REDUCE, np, size, cfg, cat)
            assert under_rules(ompi41, REDUCE, np, size, out) == want, (np, size, cfg)
            # the comparison can fail: another configuration leaves other traffic here (at 2
            # ranks every reduce sends rank 1's data to 0: the segments tell them apart)
            others = [o for o in (Config(1), Config.of(3, {SEG: 1024}),
                                  Config.of(5, {SEG: 4096})) if o != cfg]
            assert any(forced(ompi41, REDUCE, np, size, o, cat) != want for o in others)


@pytest.mark.mpi
def test_ladder_of_64_simulated_ranks(tmp_path: Path) -> None:
    """SMPI at 64 ranks: 2, 8 and 64 in one launch per configuration (SMPI picks an
    algorithm per launch), one section each, each rung stored at its own size."""
    from test_smpi import FLAT, need_smpi

    need_smpi()
    out, db = tmp_path / "r.conf", tmp_path / "s.sqlite"
    r = tune_cli("bcast", "--np", "64", "--comm-sizes", "2,8,64", "--backend", "smpi",
                 "--platform", str(FLAT), "--sizes", "64,64K", "--boundaries", "midpoint",
                 "--out", str(out), "--db", str(db), "--quiet", timeout=300)
    assert r.returncode == 0, r.stderr
    rf = rules.read(out, allow_v2=False)
    # and a section each for the sizes between, measured at neither (rules.agreed)
    assert [s.comsize for s in rf.collectives[COLLTYPE["bcast"]]] == [2, 3, 8, 9, 64]
    store = Store(db)
    try:
        ctxs = {c.np: c for c in store.contexts()}
        assert sorted(ctxs) == [2, 8, 64]
        times = {np: {(m.config.algorithm, m.size): m.samples[0]
                      for m in store.measurements(ctxs[np])} for np in ctxs}
    finally:
        store.close()
    # every rung measured every algorithm, and a bcast among 64 takes longer than among 2
    assert {k for k in times[2]} == {k for k in times[64]}
    assert all(times[64][k] > times[2][k] for k in times[2]), times

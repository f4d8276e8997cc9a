"""Measured boundaries (issue 21): where neighbouring measured sizes decide differently,
tune measures between them until the switch is located within 1.25x, and the written file
switches there. Simulated (SMPI: deterministic times), so where the switch lies is a fact
of the platform, not of the noise."""

from __future__ import annotations

from pathlib import Path

import pytest

from colltune.backends.openmpi.install import OpenMPI
from colltune.collectives import get_collective
from colltune.core.catalog import FAN, MAXREQ, SEG
from colltune.core.config import Config
from colltune.core.records import Decision
from colltune.options import TuneOptions
from colltune.rules import ompi_classic as rules
from colltune.rules.ompi_classic import COLLTYPE
from colltune.tuner.boundaries import FACTOR, between
from colltune.tuner.run import tune
from test_smpi import FLAT, need_smpi


def test_the_default_grid_is_every_power_of_two_from_4_bytes_to_1_mib() -> None:
    from colltune.core.space import sizes_for

    assert sizes_for(get_collective("bcast"), 4) == [1 << k for k in range(2, 21)]
    assert sizes_for(get_collective("reduce"), 4) == [1 << k for k in range(3, 21)]  # doubles


def test_between_is_the_middle_in_log_size_on_the_granularity() -> None:
    assert between(1024, 1 << 20, 8) == 32768
    assert between(64, 512, 1) == 181 and between(64, 512, 8) == 184
    assert between(8, 16, 8) is None  # nothing strictly between on the granularity
    assert between(1000, 1001, 1) is None


def ranges_are_measured(rf: rules.RulesFile, coll_name: str, np: int,
                        ds: list[Decision]) -> list[str]:
    """What is wrong with the written section of `np`: a rule range without a measured
    size deciding its configuration, or a switch between configurations whose two nearest
    measured sizes are more than FACTOR apart. One helper for every test's output."""
    coll = get_collective(coll_name)
    sec = next(s for s in rf.collectives[COLLTYPE[coll.name]] if s.comsize == np)
    measured = sorted((d.lookup_size, d.size, d.chosen) for d in ds if d.size >= 0)
    problems = []
    starts = [r.msgsize for r in sec.rules] + [None]
    for r, end in zip(sec.rules, starts[1:], strict=True):
        cfg = Config.of(r.alg, {SEG: r.segsize, FAN: r.faninout, MAXREQ: r.maxreq or 0})
        inside = [c for lk, _, c in measured if lk >= r.msgsize and (end is None or lk < end)]
        if cfg not in inside:
            problems.append(f"rule from {r.msgsize}: no measured size decides {cfg.key}")
    for (_, sa, ca), (_, sb, cb) in zip(measured, measured[1:], strict=False):
        if ca != cb and sb > sa * FACTOR:
            problems.append(f"switch {ca.key}->{cb.key} between {sa} and {sb} B not located")
    return problems


@pytest.mark.mpi
def test_the_switch_is_measured_and_written_where_it_is(tmp_path: Path) -> None:
    need_smpi()
    out = {}
    for how in ("midpoint", "measure"):
        opts = TuneOptions(["bcast"], [16], backend="smpi", platform=FLAT, boundaries=how,
                           db=tmp_path / f"{how}.sqlite", out=tmp_path / f"{how}.conf",
                           sizes=[64, 65536, 1 << 20])
        out[how] = tune(opts)
    coarse = out["midpoint"].decisions["bcast"][16]
    fine = out["measure"].decisions["bcast"][16]
    assert [d.size for d in coarse] == [64, 65536, 1 << 20]
    switches = [(a.size, b.size) for a, b in zip(coarse, coarse[1:], strict=False)
                if a.chosen != b.chosen]
    assert switches, "the platform has no switch between these sizes: pick others"
    for lo, hi in switches:  # the search measured between every switch of the coarse grid
        assert any(lo < d.size < hi for d in fine), (lo, hi, [d.size for d in fine])
    assert ranges_are_measured(rules.read(tmp_path / "measure.conf"), "bcast", 16, fine) == []
    # without the search the coarse file switches at a midpoint it never measured
    assert ranges_are_measured(rules.read(tmp_path / "midpoint.conf"), "bcast", 16, coarse)


def test_open_mpi_file_switches_only_between_measured_neighbours(ompi41: OpenMPI,
                                                                 tmp_path: Path) -> None:
    """On the real library (noise and all): whatever tune decides, every range of the file
    it writes has a measured size deciding its configuration, and every switch lies between
    two measured sizes at most 1.25x apart."""
    import json

    from helpers import tune_cli

    out, summ = tmp_path / "r.conf", tmp_path / "s.json"
    r = tune_cli("allreduce", "--np", "4", "--mpi", str(ompi41.prefix), "--db",
                 str(tmp_path / "s.db"),
                 "--sizes", "512,64K", "--point-time", "0.02", "--max-reps", "20",
                 "--timing", "isolated", "--confirm-rounds", "0", "--out", str(out),
                 "--summary-json", str(summ))
    assert r.returncode == 0, r.stderr
    from colltune.core.config import Config as C

    raw = json.loads(summ.read_text())["collectives"]["allreduce"]["4"]
    ds = [Decision(d["size"], d["lookup_size"],
                   C.from_key(d["chosen"]["key"]),
                   None, None, None, None, False) for d in raw]
    assert ranges_are_measured(rules.read(out), "allreduce", 4, ds) == []


@pytest.mark.parametrize("fresh", ["same", "faster"])
def test_a_switch_fresh_launches_refute_costs_no_boundary_round(ompi41: OpenMPI,
                                                                 tmp_path: Path,
                                                                 fresh: str) -> None:
    """A store holding a sweep whose choice switches between 512 B and 2 KiB
    (recursive_doubling at 512 B, the default at 2 KiB) and the fresh-launch verdict on
    that choice. Refuted ("same"), the switch is not located: Open MPI is launched for
    nothing and the store gains no point. Confirmed ("faster"), tune measures between.
    (Two sizes 4x apart: three passes of measuring and confirming locate it within 1.25x,
    where 512 B and 64 KiB took five, 67 s of the suite.)"""
    import random

    from colltune.backends.openmpi.install import read_catalog
    from colltune.core.config import DEFAULT
    from colltune.core.records import PointResult, Verdict
    from colltune.core.space import configurations, useful_at
    from colltune.options import MeasureSettings
    from colltune.slots import place
    from colltune.store import Store
    from colltune.tuner.measure import context_for

    coll = get_collective("allreduce")
    opts = TuneOptions(["allreduce"], [4], mpi=str(ompi41.prefix), db=tmp_path / "s.db",
                       out=tmp_path / "r.conf", sizes=[512, 2048], segsizes=[0],
                       confirm_rounds=1, settings=MeasureSettings(timing="isolated",
                                                                  point_time=0.02,
                                                                  max_reps=20))
    ctx = context_for(ompi41, coll, place(4))
    rd = Config(3)  # recursive_doubling
    rng = random.Random(7)
    store = Store(tmp_path / "s.db")
    # times far below what 4 ranks on 2 cores really take: a point tune measured itself
    # could not win, and the store's count shows whether it measured any
    want = {512: {rd: 1e-6, DEFAULT: 2e-6}, 2048: {DEFAULT: 1e-5, rd: 3e-5}}
    cat = read_catalog(ompi41)
    for cfg in configurations(coll, cat, 4, {SEG: [0]}):
        for size, times in want.items():
            if useful_at(cfg, size, cat):
                mu = times.get(cfg, 3 * max(times.values()))
                xs = sorted(mu * rng.uniform(0.97, 1.03) for _ in range(20))
                store.add(ctx, cfg, PointResult(0, size, "ok", 20, xs[10], samples=xs), "mpit")
    speedup = 2.0 if fresh == "faster" else 1.0
    store.add_confirmation(ctx, rd.key, Verdict(512, 2e-6, 2e-6 / speedup, 0.001, 0.9, 1, 1,
                                                fresh, speedup))
    before = len(store.measurements(ctx))
    store.close()
    res = tune(opts)
    ds = res.decisions["allreduce"][4]
    store = Store(tmp_path / "s.db")
    added = sorted({m.size for m in store.measurements(ctx)} - {512, 2048})
    if fresh == "same":
        assert len(store.measurements(ctx)) == before, "tune measured, though nothing was open"
        assert [d.chosen for d in ds] == [DEFAULT, DEFAULT]
    else:
        assert added and all(512 < s < 2048 for s in added), added
        assert ds[0].chosen == rd
    assert ranges_are_measured(rules.read(tmp_path / "r.conf"), "allreduce", 4, ds) == []


def test_one_round_asks_what_later_rounds_would_where_a_launch_costs_more() -> None:
    """Locating a switch between 1 and 2 KiB takes two rounds of bisection (x1.41, then
    x1.19 or x1.68). Where a launch's start-up costs more than the extra points (a
    simulated 512-rank launch on 32 nodes: seconds of every node, a point milliseconds)
    one round asks all three sizes; where points cost more (a real launch on one node),
    a round asks the middle only, as before."""
    from colltune.backends.smpi.install import catalog
    from colltune.core.config import DEFAULT
    from colltune.tuner.boundaries import bisection, next_round, rounds_to_locate
    from colltune.tuner.forecast import Prices

    assert rounds_to_locate(1024, 2048) == 2 and rounds_to_locate(512, 2048) == 3
    coll = get_collective("bcast")
    # what the recorded grids hold between two powers of two (bench/record_smpi_grids.py)
    assert bisection(1024, 2048, coll.granularity, 2) == [1218, 1448, 1722]
    ds = [Decision(1024, 1024, Config(3), None, None, None, None, False),
          Decision(2048, 2048, Config(6), None, None, None, None, False)]

    def prices(startup: float, point: float) -> Prices:
        return Prices(startup, {}, point, {}, "stated here")

    todo, at_once = next_round(coll, 512, ds, catalog(), set(), prices(1.95, 0.001))
    assert at_once and {s for _, s in todo} == {1218, 1448, 1722}, todo
    assert {c for c, _ in todo} == {DEFAULT, Config(3), Config(6)}
    todo, at_once = next_round(coll, 4, ds, catalog(), set(), prices(0.3, 0.1))
    assert not at_once and {s for _, s in todo} == {1448}, todo
    # the middle held already (a resumed run): nothing asked at once without it
    held = {(c.key, 1448) for c in (DEFAULT, Config(3), Config(6))}
    todo, _ = next_round(coll, 512, ds, catalog(), held, prices(1.95, 0.001))
    assert todo == set(), todo


def test_a_switch_with_a_large_stake_is_located_finer() -> None:
    """Where one side of a switch runs many times faster than the default, the range left
    to the library between the two closest measured sizes may lose all of it: it is
    located finer. Flat reduce at 512 ranks: Rabenseifner's 10.4x faster than SMPI's
    default at 741456 B, the default best at 881744 B (x1.19 apart, located by FACTOR)."""
    from colltune.backends.smpi.install import catalog
    from colltune.core.config import DEFAULT
    from colltune.tuner.boundaries import next_round, within
    from colltune.tuner.forecast import Prices

    coll = get_collective("reduce")
    pr = Prices(0.3, {}, 0.1, {}, "stated here")

    def at(size: int, cfg: Config, speedup: float) -> Decision:
        return Decision(size, size, cfg, cfg, 1.0, speedup, None, True)

    def asked(lo: Decision, hi: Decision) -> set[int]:
        todo, _ = next_round(coll, 512, [lo, hi], catalog(), set(), pr)
        return {s for _, s in todo}

    hi = at(881744, DEFAULT, 1.0)
    assert within(at(741456, Config(7), 3.9), hi) == FACTOR
    assert asked(at(741456, Config(7), 3.9), hi) == set()  # located as before
    assert within(at(741456, Config(7), 10.4), hi) < 881744 / 741456
    assert asked(at(741456, Config(7), 10.4), hi) == {808560}
    # the stake of either side counts; the default's own side stakes nothing
    assert asked(at(741456, DEFAULT, 1.0), at(881744, Config(7), 10.4)) == {808560}

"""Timing modes in decisions: a win must hold isolated and back to back (the allreduce
512 KiB case of the measurement issue), in the sweep, in fresh launches and in the store."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path

from colltune.backends.openmpi.tuned_rules import section
from colltune.collectives import get_collective
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision, PointResult
from colltune.store import Context, Store
from colltune.store.schema import SCHEMA
from colltune.tuner.confirm import ABSamples
from colltune.tuner.decide import decide
from judges import judge

NONOVERLAPPING = Config(2)
SIZES = (262144, 524288, 1048576)
# what the issue measured at 4 ranks on Open MPI 4.1.4: one call after a barrier says the
# rule is faster at 512 KiB (0.83), calls back to back say 2.2x slower
FACTORS = {"isolated": {262144: 0.78, 524288: 0.83, 1048576: 1.3},
           "back-to-back": {262144: 0.80, 524288: 2.2, 1048576: 1.4}}


def _series(rng: random.Random, mu: float, n: int = 30) -> list[float]:
    return [mu * rng.lognormvariate(0, 0.05) for _ in range(n)]


def _result(rng: random.Random, size: int, factors: dict[str, float]) -> PointResult:
    base = max(size, 4096) * 4e-10  # barrier: size 0, still a time
    series = {m: {"completion": _series(rng, base * f), "mean": _series(rng, base * f * 0.9),
                  "root": _series(rng, base * f * 0.8)} for m, f in factors.items()}
    iso = series["isolated"]["completion"]
    return PointResult(0, size, "ok", len(iso), sorted(iso)[len(iso) // 2], samples=iso,
                       series=series)


def _ctx() -> Context:
    return Context("openmpi-test", "Open MPI", "4.1.4", "/usr", "host", 4, 4, 1, "allreduce")


def _store_with_the_512k_case(path: Path) -> Store:
    rng = random.Random(7)
    store = Store(path)
    for size in SIZES:
        store.add(_ctx(), DEFAULT, _result(rng, size, {"isolated": 1.0, "back-to-back": 1.0}),
                  "mpit")
        store.add(_ctx(), NONOVERLAPPING,
                  _result(rng, size, {m: FACTORS[m][size] for m in FACTORS}), "mpit")
    return store


def test_isolated_win_that_loses_back_to_back_keeps_the_default(tmp_path: Path) -> None:
    store = _store_with_the_512k_case(tmp_path / "s.db")
    ms = store.measurements(_ctx())
    assert {m.timing for m in ms} == {"both"} and {m.objective for m in ms} == {"completion"}
    assert all(set(m.series) == {"isolated", "back-to-back"} for m in ms)
    by_size = {d.size: d for d in decide(get_collective("allreduce"), 4, ms)}
    # wins in both modes: tuned
    assert by_size[262144].chosen == NONOVERLAPPING
    assert "every timing mode" in by_size[262144].reason
    # faster isolated, 2.2x slower back to back: the library's choice stays
    assert by_size[524288].chosen == DEFAULT
    assert "back-to-back" in by_size[524288].reason
    assert by_size[1048576].chosen == DEFAULT
    # the section written from them: nonoverlapping ends before 512 KiB
    rules = section(4, list(by_size.values())).rules
    assert [(r.alg, r.msgsize <= 524288) for r in rules] == [(2, True), (0, True)]
    store.close()


def test_isolated_only_the_same_store_would_have_taken_the_rule(tmp_path: Path) -> None:
    """The regression this guards against: without the back-to-back series (an older
    store, or --timing isolated) the same isolated samples win at 512 KiB."""
    store = _store_with_the_512k_case(tmp_path / "s.db")
    ms = store.measurements(_ctx())
    for m in ms:
        m.series = {}
    by_size = {d.size: d for d in decide(get_collective("allreduce"), 4, ms)}
    assert by_size[524288].chosen == NONOVERLAPPING
    store.close()


def test_fresh_launches_must_agree_in_every_mode() -> None:
    rng = random.Random(3)
    ab = ABSamples(rounds=4)
    for mode, f in (("isolated", 0.8), ("back-to-back", 2.2)):
        arms = ab.modes.setdefault(mode, {"default": {}, "tuned": {}})
        for _ in range(4):
            arms["default"].setdefault(524288, []).append(_series(rng, 1.0))
            arms["tuned"].setdefault(524288, []).append(_series(rng, f))
    ab.samples = ab.modes["isolated"]
    v = judge(ab)[524288]
    assert v.modes["isolated"]["verdict"] == "faster"
    assert v.modes["back-to-back"]["verdict"] == "slower"
    assert v.verdict == "slower"
    # both modes faster: faster
    for arms in ab.modes.values():
        arms["tuned"][524288] = [_series(rng, 0.7) for _ in range(4)]
    assert judge(ab)[524288].verdict == "faster"


def test_an_older_store_reads_as_isolated_completion(tmp_path: Path) -> None:
    """A store written before timing modes existed: its rows get the mode they were
    measured with, and confirmations no per-mode verdicts."""
    old = SCHEMA
    for line in ("    timing TEXT NOT NULL DEFAULT 'isolated',\n",
                 "    objective TEXT NOT NULL DEFAULT 'completion',\n",
                 "    series TEXT NOT NULL DEFAULT '{}',\n",
                 "    modes TEXT NOT NULL DEFAULT '{}',\n"):
        assert line in old
        old = old.replace(line, "")
    path = tmp_path / "old.db"
    con = sqlite3.connect(path)
    con.executescript(old)
    con.execute(
        "INSERT INTO measurements (mpi_key, mpi_name, mpi_version, mpi_path, host, np, ppn, "
        "nodes, collective, config_key, algorithm, size, "
        "status, n, median, samples, message, sweep, created) VALUES "
        "('openmpi-test','Open MPI','4.1.4','/usr','host',4,4,1,'allreduce','a0',0,"
        "64,'ok',3,1.0,?,'','mpit','2026-01-01T00:00:00+00:00')",
        (json.dumps([1.0, 1.0, 1.0]),))
    con.commit()
    con.close()
    store = Store(path)
    [m] = store.measurements(_ctx())
    assert (m.timing, m.objective, m.series, m.samples) == ("isolated", "completion", {},
                                                            [1.0, 1.0, 1.0])
    store.close()


def test_extend_merges_every_series(tmp_path: Path) -> None:
    rng = random.Random(1)
    store = Store(tmp_path / "s.db")
    a = _result(rng, 64, {"isolated": 1.0, "back-to-back": 1.0})
    b = _result(rng, 64, {"isolated": 1.0, "back-to-back": 1.0})
    store.extend(_ctx(), DEFAULT, a, "mpit")
    store.extend(_ctx(), DEFAULT, b, "mpit")
    [m] = store.measurements(_ctx())
    assert m.samples == a.samples + b.samples
    assert m.series["back-to-back"] == (a.series["back-to-back"]["completion"]
                                        + b.series["back-to-back"]["completion"])
    store.close()


def _decision(default_us: float, best_us: float) -> Decision:
    return Decision(64, 64, Config(3), Config(3), best_us * 1e-6, default_us * 1e-6, 1e-9,
                    True)


def test_huge_oversubscribed_speedups_carry_their_cause() -> None:
    from colltune.backends.registry import waiting_cause
    from colltune.tuner import artifacts

    # MPICH 5.0.2 at 4 ranks on 2 cores (the issue): default 10 ms, forced 19 us
    ds = [_decision(10_000, 19), _decision(30, 20)]
    artifacts.flag(ds, ppn=4, cores=2, cause=waiting_cause("MPICH"))
    assert "526x over the default with 4 ranks on 2 cores" in ds[0].warning
    assert "scheduling artifact" in ds[0].warning and "busy-poll" in ds[0].warning
    assert ds[1].warning == ""  # 1.5x: an algorithm, not a scheduler
    # a core per rank, or cores unknown: still suspect, said more mildly
    ds = [_decision(10_000, 19)]
    artifacts.flag(ds, ppn=2, cores=2, cause="")
    assert ds[0].warning.startswith("526x over the default is rarely a better algorithm")
    assert waiting_cause("SimGrid SMPI") == ""


def test_show_prints_the_warning_for_an_mpich_store(tmp_path: Path) -> None:
    import os

    from helpers import tune_cli

    rng = random.Random(2)
    ctx = Context("mpich-5.0.2@/opt/mpich", "MPICH", "5.0.2", "/opt/mpich", "elsewhere", 4, 4,
                  1, "reduce")
    store = Store(tmp_path / "s.db")
    for cfg, mu in ((DEFAULT, 0.02), (Config(2), 20e-6)):
        xs = _series(rng, mu)
        store.add(ctx, cfg, PointResult(0, 65536, "ok", len(xs), sorted(xs)[15], samples=xs),
                  "mpit")
    store.close()
    res = tune_cli("show", "--db", str(tmp_path / "s.db"), env={"COLUMNS": "200",
                                                               **os.environ})
    assert res.returncode == 0, res.stderr
    assert "!" in res.stdout
    assert "over the default is rarely a better algorithm" in res.stdout
    assert "MPICH's ranks busy-poll" in res.stdout


def test_size_independent_decisions_need_every_mode_too(tmp_path: Path) -> None:
    """barrier (one rule for every call): an isolated win that loses back to back at every
    size keeps the default; a win in both modes is taken."""
    rng = random.Random(5)
    for b2b, want in ((2.0, DEFAULT), (0.6, Config(3))):
        store = Store(tmp_path / f"b{b2b}.db")
        ctx = Context("openmpi-test", "Open MPI", "4.1.4", "/usr", "host", 4, 4, 1, "barrier")
        store.add(ctx, DEFAULT, _result(rng, 0, {"isolated": 1.0, "back-to-back": 1.0}),
                  "mpit")
        store.add(ctx, Config(3), _result(rng, 0, {"isolated": 0.6, "back-to-back": b2b}),
                  "mpit")
        [d] = decide(get_collective("barrier"), 4, store.measurements(ctx))
        assert d.chosen == want, d.reason
        store.close()

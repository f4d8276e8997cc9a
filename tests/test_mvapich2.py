"""MVAPICH2 backend: catalog, forcing and launch environment, decisions -> profile, and (where
an MVAPICH2 is found) proof from MVAPICH2's own counters that a launch runs what was forced
and what `tune --format mvapich2` wrote.

Every generated profile is also read by `_mv2_select`, a reader written after MVAPICH2
2.3.7's own (regex per entry, entries in order, only each entry's max compared, the last
entry taken when none matches), not by colltune's reader."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from colltune.backends.mpich import install as mb
from colltune.backends.mvapich2 import install as m2
from colltune.backends.mvapich2 import ranges as mvapich2_rules
from colltune.backends.mvapich2.backend import MVAPICH2Backend, MVAPICH2Session
from colltune.backends.mvapich2.install import MVAPICH2
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision, Verdict
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.launchers import Launch
from colltune.options import TuneOptions
from colltune.rules import mvapich2 as mv
from colltune.rules.mvapich2 import Range
from colltune.slots import place
from colltune.store import Context, Measurement, Store
from helpers import tune_cli

_ENTRY = re.compile(r"([0-9]+):([0-9]+)-([0-9]+|\+)")


def _mv2_select(value: str, nbytes: int) -> int:
    """The algorithm number MVAPICH2 2.3.7 picks for `nbytes` from a tuning variable."""
    if "," not in value:  # one entry: MVAPICH2 takes atoi() of the whole string
        m = re.match(r"[0-9]+", value)
        assert m, value
        return int(m.group(0))
    table = []
    for part in value.split(","):
        m = _ENTRY.search(part)
        assert m, part  # MVAPICH2 prints "failed to match" and gives up
        table.append((int(m.group(1)), -1 if m.group(3) == "+" else int(m.group(3))))
    i = 0
    while i < len(table) - 1 and nbytes > table[i][1] and table[i][1] != -1:
        i += 1
    return table[i][0]


# ---------------------------------------------------------------------------
# offline
# ---------------------------------------------------------------------------


def test_catalog_forcing_and_launch_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    cat = m2.catalog(["reduce", "alltoall", "bcast"])
    assert cat.algorithms["reduce"] == {1: "binomial", 2: "knomial", 5: "redscat_gather"}
    # alltoall counts from 0 in MVAPICH2: ids are shifted so 0 stays "the library's choice"
    assert cat.value["alltoall"] == {1: 0, 3: 2, 4: 3}
    assert "bcast" not in cat.algorithms  # its forcing could not be confirmed (docs)
    assert m2.forcing_env(cat, "alltoall", 1) == {
        "MV2_ALLTOALL_TUNING": "0", "MV2_USE_INDEXED_TUNING": "0",
        "MV2_USE_INDEXED_ALLTOALL_TUNING": "0"}
    assert m2.forcing_env(cat, "reduce", 0) == {}
    assert cat.ran("reduce", {"mv2_coll_reduce_knomial": 12, "mv2_coll_reduce_shmem": 3}) == 2
    assert cat.ran("reduce", {"mv2_coll_bcast_binomial": 5}) is None
    monkeypatch.setenv("MV2_INTER_REDUCE_TUNING", "8")
    monkeypatch.setenv("MV2_USE_INDEXED_TUNING", "1")
    monkeypatch.setenv("MV2_SHOW_ENV_INFO", "1")
    env = m2.launch_env({"MV2_INTER_BCAST_TUNING": "1"}, oversubscribed=True)
    assert "MV2_INTER_REDUCE_TUNING" not in env and "MV2_USE_INDEXED_TUNING" not in env
    assert env["MV2_INTER_BCAST_TUNING"] == "1" and env["MV2_ENABLE_AFFINITY"] == "0"
    assert env["MV2_SHOW_ENV_INFO"] == "1"  # not a selection: left alone
    assert m2.parse_mpiname("MVAPICH2 2.3.7 Wed March 02 22:00:00 EST 2022 ch3:mrail\n") == (
        "2.3.7", "ch3:mrail")


def test_launch_goes_through_hydra_like_mpich(tmp_path: Path) -> None:
    """MVAPICH2's launch line is the one MPICH's live tests run (Hydra's mpiexec)."""
    fake = MVAPICH2("2.3.7", tmp_path, tmp_path / "mpicc", tmp_path / "bin/mpiexec",
                    tmp_path / "mpiname", "ch3:mrail")
    p = place(4, None, launch=Launch("mpiexec"))
    mpich = mb.MPICH("5.0.2", tmp_path, tmp_path / "mpicc", tmp_path / "bin/mpiexec",
                     tmp_path / "mpichversion")
    assert m2.launch_command(fake, p) == mb.launch_command(mpich, p)
    with pytest.raises(Exception, match="mpiexec"):
        m2.launch_command(fake, place(4, None, launch=Launch("mpirun")))


def _d(size: int, alg: int) -> Decision:
    c = Config(alg) if alg else DEFAULT
    return Decision(size, size, c, c, 1.0, 1.0, 0.01, bool(alg))


def test_decisions_to_profile_and_back() -> None:
    cat = m2.catalog(["reduce", "alltoall"])
    sizes = [1024, 16384, 262144, 1 << 20]
    # default kept at 1 KiB (its counters said binomial) and at 1 MiB (knomial)
    counters = {(DEFAULT.key, 1024): {"mv2_coll_reduce_binomial": 9},
                (DEFAULT.key, 1 << 20): {"mv2_coll_reduce_knomial": 9,
                                         "mv2_coll_reduce_shmem": 1}}
    ds = [_d(1024, 0), _d(16384, 2), _d(262144, 5), _d(1 << 20, 0)]
    prof, notes = mvapich2_rules.profile({"reduce": {4: ds}}, cat, {"reduce": counters}, 4,
                                         ["t"])
    assert notes == []
    text = mv.render(prof)
    back = mv.parse(text)
    value = back.settings["MV2_INTER_REDUCE_TUNING"]
    assert back.settings["MV2_USE_INDEXED_REDUCE_TUNING"] == "0"
    want = {1024: 1, 16384: 2, 262144: 5, 1 << 20: 2}
    for s in sizes:  # MVAPICH2's way and ours agree at every measured size
        assert _mv2_select(value, s) == want[s] == mv.lookup(back, "MV2_INTER_REDUCE_TUNING", s)
    # range ends: the geometric midpoints between measured sizes
    assert value == "1:0-4096,2:4097-65536,5:65537-524288,2:524289-+"
    # alltoall: one algorithm everywhere, written 0-based
    prof, _ = mvapich2_rules.profile({"alltoall": {4: [_d(64, 4), _d(4096, 4)]}}, cat, {}, 4,
                                     [])
    assert prof.settings["MV2_ALLTOALL_TUNING"] == "3:0-+"
    assert _mv2_select(prof.settings["MV2_ALLTOALL_TUNING"], 10) == 3


def test_profile_edge_cases() -> None:
    cat = m2.catalog(["reduce"])
    # the library's choice everywhere: nothing set
    prof, _ = mvapich2_rules.profile({"reduce": {4: [_d(1024, 0), _d(65536, 0)]}}, cat, {}, 4,
                                     [])
    assert prof.settings == {}
    # a default whose counters are unknown: its neighbour's choice is written there only
    # where it was measured as a tie with the default; else reduce is left to MVAPICH2
    def ms(size: int, default: list[float], five: list[float]) -> list[Measurement]:
        return [Measurement(c, size, "ok", len(t), sorted(t)[len(t) // 2], None, None, t, "")
                for c, t in ((DEFAULT, default), (Config(5), five))]

    unknown = {"reduce": {4: [_d(1024, 0), _d(65536, 5)]}}
    prof, notes = mvapich2_rules.profile(unknown, cat, {}, 4, [])
    assert prof.settings == {} and "reduce left to MVAPICH2: at 1024 B" in notes[-1]
    slower = mvapich2_rules.ties_in(ms(1024, [1.0, 1.1, 1.0, 1.05, 0.98],
                                       [1.5, 1.6, 1.55, 1.5, 1.62]), 0.03, 0.01)
    prof, notes = mvapich2_rules.profile(unknown, cat, {}, 4, [], {"reduce": slower})
    assert prof.settings == {}, notes
    tied = mvapich2_rules.ties_in(ms(1024, [1.0, 1.1, 1.0, 1.05, 0.98],
                                     [1.01, 1.0, 1.08, 0.99, 1.02]), 0.03, 0.01)
    prof, notes = mvapich2_rules.profile(unknown, cat, {}, 4, [], {"reduce": tied})
    assert prof.settings["MV2_INTER_REDUCE_TUNING"] == "5:0-+"
    assert "did not say" in notes[0] and "1024 B: algorithm 5 measured there at" in notes[1]
    # a default that ran reduce via allreduce (8): fine alone, not inside a range string
    ran8 = {(DEFAULT.key, 1 << 20): {"mv2_coll_reduce_allreduce": 8}}
    tied8 = mvapich2_rules.ties_in(ms(1 << 20, [2.0, 2.1, 2.0], [2.0, 2.05, 1.98]), 0.03, 0.01)
    prof, notes = mvapich2_rules.profile(
        {"reduce": {4: [_d(65536, 5), _d(1 << 20, 0)]}}, cat, {"reduce": ran8}, 4, [],
        {"reduce": tied8})
    assert prof.settings["MV2_INTER_REDUCE_TUNING"] == "5:0-+"
    assert "cannot name" in notes[0]
    mv.parse(mv.render(prof))
    # a single measured size, and several comm sizes: only the one asked for is written
    per_np = {2: [_d(4096, 1)], 4: [_d(4096, 2)]}
    for np, alg in ((2, 1), (4, 2)):
        prof, _ = mvapich2_rules.profile({"reduce": per_np}, cat, {}, np, [])
        assert _mv2_select(prof.settings["MV2_INTER_REDUCE_TUNING"], 4096) == alg
        mv.parse(mv.render(prof))


def test_the_shared_memory_default_is_kept_in_the_first_range_and_8_is_traded() -> None:
    """MVAPICH2 2.3.7 at 2 ranks (issue 37): its default ran the shared-memory reduce at
    1 KiB and reduce via allreduce at 1 MiB (8: not inside a range string); redscat_gather
    won at 64 KiB. The shared-memory path can be named in the first range only (2.3.7 marks
    entry 0 of a user table two-level, with MV2_INTRA_REDUCE_TUNING's algorithm inside the
    node); 8 cannot: without --trade-off reduce is left to MVAPICH2 and the note says why;
    with it, the fastest nameable algorithm measured at 1 MiB is written, its cost noted."""
    cat = m2.catalog(["reduce"])
    counters = {(DEFAULT.key, 1024): {"mv2_coll_reduce_shmem": 9,
                                      "mv2_coll_reduce_two_level_helper": 9,
                                      "mv2_coll_reduce_binomial": 1},
                (DEFAULT.key, 65536): {"mv2_coll_reduce_binomial": 9},
                (DEFAULT.key, 1 << 20): {"mv2_coll_reduce_allreduce": 9}}
    ds = [_d(1024, 0), _d(65536, 5), _d(1 << 20, 0)]

    def m(size: int, alg: int, t: float) -> Measurement:
        c = Config(alg) if alg else DEFAULT
        return Measurement(c, size, "ok", 3, t, None, None, [t, t * 1.01, t * 0.99], "")

    ms = [m(1024, 0, 1.0), m(1024, 1, 1.3), m(1024, 2, 1.5), m(1024, 5, 2.0),
          m(65536, 0, 20.0), m(65536, 5, 15.0), m(1 << 20, 0, 100.0),
          m(1 << 20, 1, 160.0), m(1 << 20, 5, 140.0)]
    prof, notes = mvapich2_rules.profile({"reduce": {2: ds}}, cat, {"reduce": counters}, 2, [])
    assert prof.settings == {}
    assert "1048576 B: MVAPICH2's default ran algorithm 8" in notes[0], notes
    assert "--trade-off" in notes[-1]
    trades = {"reduce": mvapich2_rules.trades_in(ms, cat, "reduce")}
    prof, notes = mvapich2_rules.profile({"reduce": {2: ds}}, cat, {"reduce": counters}, 2, [],
                                         None, trades)
    value = prof.settings["MV2_INTER_REDUCE_TUNING"]
    assert value == "1:0-8192,5:8193-+"
    # the first range is the default's own path: two-level, shared memory inside the node
    assert prof.settings["MV2_INTER_REDUCE_TUNING_TWO_LEVEL"] == "1"
    assert prof.settings["MV2_INTRA_REDUCE_TUNING"] == "4"
    given_up = [n for n in notes if "given up" in n]
    assert len(given_up) == 1 and "1048576 B" in given_up[0] and "at 1.40x" in given_up[0]
    assert any("up to 8192 B: MVAPICH2's default kept (its shared-memory path)" in n
               for n in notes), notes
    mv.parse(mv.render(prof))
    # after a tuned size the shared-memory path is not the first range: not nameable there
    later = [_d(512, 5), _d(1024, 0), _d(65536, 5)]
    prof, notes = mvapich2_rules.profile({"reduce": {2: later}}, cat, {"reduce": counters}, 2,
                                         [], None, trades)
    assert "MV2_INTER_REDUCE_TUNING_TWO_LEVEL" not in prof.settings
    assert "1024 B: MVAPICH2's default ran its shared-memory reduce" in notes[0], notes
    assert "1024 B: MVAPICH2's default given up (--trade-off): algorithm 1, binomial, " \
        "measured there at 1.30x" in notes[1], notes


def test_a_trade_names_what_mvapich2_ran_where_the_forced_algorithm_fell_back() -> None:
    """reduce-scatter+gather at a count below the ranks runs binomial (MVAPICH2's counters
    said so while it was measured): --trade-off writes binomial, and says why."""
    cat = m2.catalog(["reduce"])
    fast = Measurement(Config(5), 8, "ok", 3, 0.5, None, None, [0.5, 0.5, 0.5], "")
    dflt = Measurement(DEFAULT, 8, "ok", 3, 0.4, None, None, [0.4, 0.4, 0.4], "")
    counted = {(Config(5).key, 8): {"mv2_coll_reduce_binomial": 7}}
    trade = mvapich2_rules.trades_in([fast, dflt], cat, "reduce", counted)(8)
    assert trade is not None and trade[0] == 1
    assert trade[1].startswith("binomial (forced as redscat_gather: MVAPICH2 ran binomial")
    plain = mvapich2_rules.trades_in([fast, dflt], cat, "reduce")(8)
    assert plain is not None and plain[0] == 5


def test_a_fill_in_stands_only_where_fresh_launches_do_not_find_it_slower(tmp_path: Path
                                                                        ) -> None:
    """reduce kept the default at 1 KiB (MVAPICH2's counters said nothing) and chose
    redscat_gather at 64 KiB: the range string must name 5 at 1 KiB too. The session asks
    for that size to be put to fresh launch pairs; their stored verdict decides whether the
    profile says it (same) or leaves reduce to MVAPICH2 (slower)."""
    fake = MVAPICH2("2.3.7", tmp_path, tmp_path / "mpicc", tmp_path / "bin/mpiexec",
                    tmp_path / "mpiname", "ch3:mrail")
    out = tmp_path / "mv2.conf"
    opts = TuneOptions(["reduce"], [4], out=out)
    p = place(4, None, launch=Launch("mpiexec"))
    sess = MVAPICH2Session(MVAPICH2Backend(), fake,
                                          m2.catalog(["reduce"]), [p], opts)
    store = Store(tmp_path / "s.sqlite")
    ctx = Context("mvapich2-2.3.7", "MVAPICH2", "2.3.7", str(tmp_path), "h", 4, 4, 1, "reduce",
                  "mvapich2")
    t = [1.0, 1.1, 1.0, 1.05, 0.98]
    tied = [Measurement(c, 1024, "ok", 5, sorted(t)[2], None, None, t, "")
            for c in (DEFAULT, Config(5))]
    ds = [_d(1024, 0), _d(65536, 5)]
    sess.decided("reduce", p, ds, tied, store, ctx)
    assert sess.fills("reduce", p, ds) == [(1024, Config(5))]

    def written(verdict: str) -> tuple[dict[str, str], list[str]]:
        store.add_confirmation(ctx, Config(5).key, Verdict(1024, 1.0, 1.0, 0.5, 0.5, 2, 4,
                                                           verdict, 0.8 if verdict ==
                                                           "slower" else 0.99))
        mv2 = sess.write({"reduce": {4: ds}}, {}).record["mvapich2"]
        assert isinstance(mv2, dict)
        return mv.read(out).settings, mv2["notes"]

    settings, notes = written("slower")
    assert "MV2_INTER_REDUCE_TUNING" not in settings
    assert "reduce left to MVAPICH2: at 1024 B" in notes[-1]
    assert sess.fills("reduce", p, ds) == []  # refuted: nothing left to confirm
    settings, notes = written("same")
    assert settings["MV2_INTER_REDUCE_TUNING"] == "5:0-+"
    assert "over 4 fresh launch pairs (same)" in notes[-1], notes


def test_confirmation_never_compares_the_default_with_itself(tmp_path: Path) -> None:
    """Issue 37: when the range string cannot carry reduce (at 1 KiB the default was kept
    and nothing says what a string could name there), the profile's arm is MVAPICH2's
    default, the same launch as the other arm. Generic code must not launch the default
    against itself and call the win "refuted": it says the win cannot be expressed, and
    why. The fake installation has no mpiexec: a launch would fail the test."""
    from colltune.collectives import get_collective
    from colltune.tuner.confirm import confirm_decisions
    from colltune.tuner.context import Run, Target
    from colltune.tuner.measure import Reporter

    fake = MVAPICH2("2.3.7", tmp_path, tmp_path / "mpicc", tmp_path / "bin/mpiexec",
                    tmp_path / "mpiname", "ch3:mrail")
    opts = TuneOptions(["reduce"], [2], out=tmp_path / "mv2.conf", confirm_rounds=4)
    p = place(2, None, launch=Launch("mpiexec"))
    sess = MVAPICH2Session(MVAPICH2Backend(), fake,
                                          m2.catalog(["reduce"]), [p], opts)
    coll = get_collective("reduce")
    ds = [_d(1024, 0), _d(65536, 5)]
    arms = sess.arms(coll, p, ds, tmp_path / "unused")
    assert arms["default"] == arms["tuned"] == {}

    class Notes(Reporter):
        said: list[str] = []

        def note(self, text: str) -> None:
            self.said.append(text)

    rep = Notes()
    store = Store(tmp_path / "s.sqlite")
    confirm_decisions(Run.start(opts, sess, store, rep), Target(coll, p), ds)
    win = ds[1]
    assert win.chosen == DEFAULT and win.verdict == "unexpressed" and not win.confirmations
    assert win.reason.startswith("cannot be expressed in an MVAPICH2 profile: reduce left to "
                                 "MVAPICH2: at 1024 B"), win.reason
    assert "refuted" not in win.reason and "no launch pairs" in rep.said[-1]


def test_no_switch_is_located_once_the_file_cannot_carry_the_decisions(tmp_path: Path
                                                                        ) -> None:
    """Fresh launches confirmed redscat_gather at 64 KiB, and at 1 KiB the default was kept
    with nothing a range string could name there: the collective is left to MVAPICH2, and
    measuring between 1 and 64 KiB cannot change that (a kept size stays kept). Locating
    that switch would launch; the fake installation has no mpiexec, so it would fail."""
    import random

    from colltune.collectives import get_collective
    from colltune.kernel.launch import PointResult
    from colltune.tuner.context import Run, Target
    from colltune.tuner.measure import Reporter, context_for
    from colltune.tuner.run import locate_confirmed

    fake = MVAPICH2("2.3.7", tmp_path, tmp_path / "mpicc", tmp_path / "bin/mpiexec",
                    tmp_path / "mpiname", "ch3:mrail")
    opts = TuneOptions(["reduce"], [2], out=tmp_path / "mv2.conf", confirm_rounds=4)
    p = place(2, None, launch=Launch("mpiexec"))
    sess = MVAPICH2Session(MVAPICH2Backend(), fake, m2.catalog(["reduce"]), [p], opts)
    coll = get_collective("reduce")
    ctx = context_for(fake, coll, p)
    store = Store(tmp_path / "s.sqlite")
    rng = random.Random(3)
    for size, times in {1024: {DEFAULT: 1e-6, Config(5): 1e-6},
                        65536: {DEFAULT: 4e-5, Config(5): 1e-5}}.items():
        for cfg, mu in times.items():
            xs = sorted(mu * rng.uniform(0.97, 1.03) for _ in range(20))
            store.add(ctx, cfg, PointResult(0, size, "ok", 20, xs[10], samples=xs), "mpit")
    store.add_confirmation(ctx, Config(5).key, Verdict(65536, 4e-5, 1e-5, 0.001, 0.9, 4, 4,
                                                       "faster", 4.0))

    class Notes(Reporter):
        said: list[str] = []

        def note(self, text: str) -> None:
            self.said.append(text)

    rep, ds = Notes(), [_d(1024, 0), _d(65536, 5)]
    before = len(store.measurements(ctx))
    out = locate_confirmed(Run.start(opts, sess, store, rep), Target(coll, p), ds)
    assert out == ds and len(store.measurements(ctx)) == before
    assert rep.said[-1].startswith("reduce np=2: switches not located (reduce left to "
                                   "MVAPICH2: at 1024 B"), rep.said


# ---------------------------------------------------------------------------
# live: MVAPICH2 built by hand (COLLTUNE_MVAPICH2_PREFIX)
# ---------------------------------------------------------------------------


def _counts(mpi: MVAPICH2, tmp: Path, sizes: list[int], env: dict[str, str],
            reps: int = 3, coll: str = "reduce") -> dict[int, dict[str, int]]:
    """Per size, how much MVAPICH2's mv2_coll_ counters grew on rank 0 (4 ranks)."""
    exe = build_kernel(mpi)
    plan = KernelPlan(coll, [KernelConfig(0)], [(0, s) for s in sizes],
                      Repetitions(0, reps, reps, 0.01, 1e6, 1), pvars=m2.PVAR_PREFIX)
    p = place(4, None, launch=Launch("mpiexec"))
    out = run_kernel(m2.launch_command(mpi, p), exe, plan,
                     m2.launch_env(env, p.oversubscribe), point_timeout=120)
    assert out.status == "ok", out.message
    return {r.size: r.pvars for r in out.results if r.status == "ok"}


@pytest.mark.mpi
def test_forced_algorithms_are_what_mvapich2_counts(mvapich2: MVAPICH2, tmp_path: Path
                                                    ) -> None:
    cat = m2.catalog(list(m2.ALGORITHMS))
    for coll, algs in cat.algorithms.items():
        for alg, name in algs.items():
            got = _counts(mvapich2, tmp_path, [4096], m2.forcing_env(cat, coll, alg),
                          coll=coll)[4096]
            assert cat.ran(coll, got) == alg, (coll, name, got)
            counter = cat.counter[coll][alg]
            assert counter and got[counter] >= 3, (coll, name, got)  # every call, rank 0


@pytest.mark.mpi
def test_exported_profile_is_obeyed_at_each_range(mvapich2: MVAPICH2, tmp_path: Path) -> None:
    """A profile with three ranges, installed by `tune export --site`, read by MVAPICH2
    through MV2_USER_CONFIG: its counters name the range's algorithm at a size inside each."""
    p = mv.Profile(comments=["three ranges"])
    p.set_ranges("MV2_INTER_REDUCE_TUNING",
                 [Range(1, 0, 4096), Range(2, 4097, 131072), Range(5, 131073, None)])
    src = tmp_path / "mv2.conf"
    src.write_text(mv.render(p, "env"))
    site = tmp_path / "site"
    r = tune_cli("export", "--from", str(src), "--site", str(site))
    assert r.returncode == 0, r.stderr
    conf = site / "mvapich2.conf"
    cat = m2.catalog(["reduce"])
    sizes = [1024, 65536, 1 << 20]
    got = _counts(mvapich2, tmp_path, sizes, {"MV2_USER_CONFIG": str(conf)})
    value = mv.read(conf).settings["MV2_INTER_REDUCE_TUNING"]
    for s in sizes:
        assert cat.ran_value("reduce", got[s]) == _mv2_select(value, s), (s, got[s])
    # and without the file MVAPICH2 runs something else at some size (the test can fail)
    plain = _counts(mvapich2, tmp_path, sizes, {})
    assert any(cat.ran_value("reduce", plain[s]) != _mv2_select(value, s) for s in sizes), plain


@pytest.mark.mpi
def test_tune_writes_a_profile_mvapich2_obeys(mvapich2: MVAPICH2, tmp_path: Path) -> None:
    out = tmp_path / "mv2.conf"
    sizes = [1024, 65536, 1 << 20]
    r = tune_cli("reduce", "--np", "4", "--mpi", str(mvapich2.prefix), "--format", "mvapich2",
                 "--sizes", "1K,64K,1M", "--min-reps", "5", "--max-reps", "9",
                 "--point-time", "0.05", "--confirm-rounds", "2", "--out", str(out),
                 "--db", str(tmp_path / "s.sqlite"), "--summary-json", str(tmp_path / "s.json"))
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    decided = {d["size"]: d["chosen"]["algorithm"] for d in summary["collectives"]["reduce"]["4"]}
    assert sorted(decided) == sizes
    prof = mv.read(out)
    cat = m2.catalog(["reduce"])
    default = _counts(mvapich2, tmp_path, sizes, {})
    under = _counts(mvapich2, tmp_path, sizes, {"MV2_USER_CONFIG": str(out)})
    for s in sizes:
        # what the profile should make MVAPICH2 run: the chosen algorithm, or where the
        # default was kept, what the default runs
        want = cat.value["reduce"][decided[s]] if decided[s] else \
            cat.ran_value("reduce", default[s])
        if want is None and default[s].get("mv2_coll_reduce_shmem"):
            # the default's shared-memory path, kept by the profile's two-level first range
            assert under[s].get("mv2_coll_reduce_shmem"), (s, under[s], default[s])
            continue
        assert cat.ran_value("reduce", under[s]) == want, (s, decided, under[s], default[s])
        if "MV2_INTER_REDUCE_TUNING" in prof.settings:
            assert _mv2_select(prof.settings["MV2_INTER_REDUCE_TUNING"], s) == want


@pytest.mark.mpi
def test_the_first_range_can_run_the_shared_memory_reduce(mvapich2: MVAPICH2, tmp_path: Path
                                                          ) -> None:
    """What the profile writes for a first range where MVAPICH2's default ran its
    shared-memory reduce: the two-level switch and the intra-node algorithm 4 make 2.3.7
    run it there (its counters: reduce_shmem inside reduce_two_level_helper), the next
    range still runs its own algorithm; the range alone runs binomial there. MVAPICH2 builds
    its node-level communicators only after 16 calls on a communicator
    (MV2_TWO_LEVEL_COMM_THRESHOLD), and runs flat binomial until then: 40 calls a point."""
    base = {"MV2_USE_INDEXED_TUNING": "0", "MV2_USE_INDEXED_REDUCE_TUNING": "0",
            "MV2_INTER_REDUCE_TUNING": "1:0-2048,2:2049-+"}
    first = {**base, **m2.FIRST_RANGE["reduce"][2]}
    got = _counts(mvapich2, tmp_path, [1024, 65536], first, reps=40)
    shmem = got[1024].get("mv2_coll_reduce_shmem", 0)
    assert shmem > got[1024].get("mv2_coll_reduce_binomial", 0), got[1024]
    assert got[1024].get("mv2_coll_reduce_two_level_helper", 0) == shmem, got[1024]
    assert m2.catalog(["reduce"]).ran_value("reduce", got[65536]) == 2, got[65536]
    plain = _counts(mvapich2, tmp_path, [1024], base, reps=40)
    assert not plain[1024].get("mv2_coll_reduce_shmem") and plain[1024].get(
        "mv2_coll_reduce_binomial"), plain[1024]

"""Timing modes on real MPI jobs: what the kernel records, the agreement benchmark's core
(kernel, an application-style loop, OSU when built), and an A/A verify that must call no
size faster or slower. No timing is asserted."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from colltune.backends.openmpi.install import OpenMPI, dynamic_env, forcing_vars, read_catalog
from colltune.backends.registry import launch
from colltune.core.catalog import SEG
from colltune.core.config import Config
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import CUT, KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.rules import ompi_classic as rules
from colltune.rules.ompi_classic import COLLTYPE
from colltune.slots import place
from helpers import tune_cli

pytestmark = pytest.mark.mpi

BENCH = Path(__file__).resolve().parent.parent / "bench"


def _run(mpi: OpenMPI, coll: str, reps: Repetitions, algs: tuple[int, ...] = (0,),
         sizes: tuple[int, ...] = (8, 65536)) -> list:
    cat = read_catalog(mpi)
    cfgs = [KernelConfig(a, forcing_vars(coll, a, 0, 0, 0, cat) if a else {}) for a in algs]
    plan = KernelPlan(coll, cfgs, [(a, s) for a in algs for s in sizes], reps)
    cmd, env = launch(mpi, place(4, None), coll, 0, dynamic_env())
    out = run_kernel(cmd, build_kernel(mpi), plan, env)
    assert out.status == "ok", out.message
    return out.results


def test_kernel_records_every_mode_and_statistic(ompi41: OpenMPI) -> None:
    for r in _run(ompi41, "reduce", Repetitions(min_reps=5, max_reps=5, timing="both",
                                                window=8), algs=(0, 1)):
        assert set(r.series) == {"isolated", "back-to-back"}
        for objs in r.series.values():
            assert set(objs) == {"completion", "mean", "root"}
            assert all(len(xs) == r.n == 5 for xs in objs.values())
            # the slowest rank is never faster than the mean over ranks, nor than the root
            assert all(c >= m - 1e-12 for c, m in zip(objs["completion"], objs["mean"]))
            assert all(c >= t - 1e-12 for c, t in zip(objs["completion"], objs["root"]))
        assert r.samples == r.series["isolated"]["completion"]
    # one mode, another objective: "samples" is that series
    for r in _run(ompi41, "bcast", Repetitions(min_reps=5, max_reps=5, timing="back-to-back",
                                               objective="mean")):
        assert set(r.series) == {"back-to-back"} and r.objective == "mean"
        assert r.samples == r.series["back-to-back"]["mean"]


def test_the_loop_is_two_free_running_stretches_of_the_calls_asked(ompi41: OpenMPI
                                                                     ) -> None:
    """`loop N` (fresh launches ask for it): two stretches of N calls each, timed as a
    whole, beside the modes' series and not in "samples"; a stretch the warm-up says would
    outlast loop_time is cut short (to one call at least), and without `loop` none runs."""
    for r in _run(ompi41, "reduce", Repetitions(min_reps=5, max_reps=5, timing="both",
                                                loop=200, loop_time=60.0)):
        assert r.loop == 200 and set(r.series) == {"isolated", "back-to-back", "loop"}
        assert all(len(xs) == 2 and min(xs) > 0 for xs in r.series["loop"].values())
        assert r.samples == r.series["isolated"]["completion"] and r.n == 5
    for r in _run(ompi41, "reduce", Repetitions(min_reps=5, max_reps=5, timing="isolated",
                                                loop=200, loop_time=1e-9)):
        assert r.loop == 1 and set(r.series) == {"isolated", "loop"}
    for r in _run(ompi41, "reduce", Repetitions(min_reps=5, max_reps=5)):
        assert r.loop == 0 and "loop" not in r.series


def test_agreement_core_gives_every_method_for_every_algorithm(ompi41: OpenMPI) -> None:
    sys.path.insert(0, str(BENCH))
    try:
        import agreement_bench as ab
    finally:
        sys.path.remove(str(BENCH))
    osu = os.environ.get("COLLTUNE_OSU_DIR")
    if not osu:
        print("no COLLTUNE_OSU_DIR: OSU is not part of this run (CI has no OSU build)")
    sizes = [65536, 524288]
    ag = ab.agreement(ompi41, "allreduce", 4, sizes, rounds=1,
                      osu_dir=Path(osu) if osu else None, iters=20, point_time=0.05)
    methods = {*ab.KERNEL_METHODS, "loop completion", "loop mean"} | ({"osu mean"} if osu
                                                                       else set())
    algs = [a for a in ag.algorithms if a]
    assert len(algs) >= 5  # Open MPI 4.1's allreduce: linear ... rabenseifner
    for m in methods:
        for a in algs:
            for s in sizes:
                rs = ag.ratios.get((m, a, s))
                assert rs and all(r > 0 for r in rs), (m, ag.algorithms[a], s)
    assert "| rabenseifner | 524288 |" in ab.table(ag)


@pytest.mark.parametrize("which", ["ompi41", "ompi50"])
def test_an_all_default_file_is_not_measured_and_passes(which: str, tmp_path: Path) -> None:
    """A file that keeps the library's own choice everywhere changes nothing: verify says
    so at every size and spends no launch pair on it (an A/A comparison must not dilute
    the family of tests that look for regressions, issue 32)."""
    from conftest import get_mpi

    mpi = get_mpi(which)
    aa = rules.RulesFile(version=1)
    sec = rules.CommRule(4)
    sec.rules.append(rules.MsgRule(0, 0))
    aa.set_section(COLLTYPE["allreduce"], sec)
    path = tmp_path / "aa.conf"
    path.write_text(rules.render(aa))
    res = tune_cli("verify", str(path), "--np", "4", "--mpi", str(mpi.prefix), "--json",
                   str(tmp_path / "v.json"))
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((tmp_path / "v.json").read_text())
    [c] = doc["collectives"]
    assert c["applied"] == "default everywhere"
    assert len(c["kernel"]) == 18  # 4 B (doubles: 8 B) to 1 MiB, no boundary
    assert all(r["verdict"] == "default" and r["rounds"] == 0 for r in c["kernel"])
    assert "nothing to measure" in res.stderr and not doc["inconclusive"]


@pytest.mark.alone
def test_aa_calibration_calls_no_size_different(ompi41: OpenMPI, tmp_path: Path) -> None:
    """--aa: both arms run the library's default at every size, through the whole
    sequential procedure; no size may read faster or slower (a false alarm). Sizes
    the noise leaves undecided are inconclusive (exit 5), with what they could have seen.
    At the default --alpha 0.05 one CI run in twenty may hold a false alarm by design (one
    did: 1 MiB read 1.34x slower over 5 pairs); at 0.002 a gate that is biased or pairs
    launches wrongly still fails here, a sound one almost never."""
    path = tmp_path / "aa.conf"
    path.write_text("1\n2\n1\n4\n1\n0 0 0 0\n")
    res = tune_cli("verify", str(path), "--np", "4", "--mpi", str(ompi41.prefix), "--aa",
                   "--alpha", "0.002",
                   "--sizes", "8,1M", "--max-rounds", "8", "--point-time", "0.03",
                   "--json", str(tmp_path / "v.json"), "--quiet")
    assert res.returncode in (0, 5), res.stdout + res.stderr
    doc = json.loads((tmp_path / "v.json").read_text())
    [c] = doc["collectives"]
    assert doc["aa"] and [r["size"] for r in c["kernel"]] == [8, 1 << 20]
    assert doc["design"]["alpha"] == 0.002 and "alpha 0.002 spent" in res.stdout
    for r in c["kernel"]:
        assert r["verdict"] in ("same", "not slower", "inconclusive"), r
        assert set(r["modes"]) == {"isolated", "back-to-back", "loop"} and r["rounds"] in (5, 8)
        assert r["mde"] > 1 and r["ratio_ci"][0] <= r["ratio"] <= r["ratio_ci"][1]
    assert (res.returncode == 5) == any(r["verdict"] == "inconclusive" for r in c["kernel"])


def test_the_cutoff_stops_only_what_is_clearly_slower_than_the_default(ompi41: OpenMPI
                                                                         ) -> None:
    """The sweep's cutoff: the default (baseline) is measured first; a configuration far
    slower than it (a pipeline of 64-byte segments at 1 MiB: 16384 messages a call) stops
    after 3 repetitions, below --min-reps, and says so; with the cutoff off it is measured until its
    budget, as before. Repetition counts, not times, are asserted."""
    cat = read_catalog(ompi41)
    slow = forcing_vars("bcast", 3, 64, 0, 0, cat)

    def run(cutoff: float) -> tuple[dict, list[int]]:
        reps = Repetitions(min_reps=7, max_reps=30, rel_ci=1e-6, point_time=30.0,
                           timing="both", window=4, cutoff=cutoff)
        cfgs = [KernelConfig(1, slow), KernelConfig(0, {}, baseline=True)]
        plan = KernelPlan("bcast", cfgs, [(0, 1 << 20), (1, 1 << 20)], reps)
        cmd, env = launch(ompi41, place(4, None), "bcast", 0, dynamic_env())
        order: list[int] = []
        out = run_kernel(cmd, build_kernel(ompi41), plan, env,
                         on_event=lambda ev: order.append(int(ev["cid"]))
                         if ev["event"] == "config" else None)
        assert out.status == "ok", out.message
        return {r.cid: r for r in out.results}, order

    on, order = run(1.5)
    assert order == [0, 1]  # the baseline first, whatever the shuffle
    assert on[1].n == 3 and on[1].message == CUT
    assert on[0].n == 30 and not on[0].message  # the baseline is never cut
    off, shuffled = run(0.0)
    assert off[1].n == 30 and not off[1].message
    assert shuffled == [1, 0]  # without the cutoff this seed's shuffle puts it second


@pytest.mark.parametrize("cutoff", ["1.5", "0"])
def test_a_tune_sweep_stores_the_points_the_cutoff_stopped(ompi41: OpenMPI, cutoff: str,
                                                           tmp_path: Path) -> None:
    """Through `tune`: the sweep marks the library default as the baseline, so 64-byte
    segments at 1 MiB are stopped and stored as such; with --cutoff 0 none is."""
    import sqlite3

    db = tmp_path / "s.db"
    r = tune_cli("bcast", "--np", "4", "--mpi", str(ompi41.prefix), "--db", str(db),
                 "--sizes", "1M", "--segsizes", "0,64", "--point-time", "0.1",
                 "--confirm-rounds", "0", "--cutoff", cutoff, "--quiet")
    assert r.returncode == 0, r.stderr
    rows = sqlite3.connect(db).execute(
        "select config_key, n, message from measurements").fetchall()
    cut = [(Config.from_key(k).algorithm, Config.from_key(k).get(SEG), n)
           for k, n, msg in rows if msg == CUT]
    # never the default, never before 3 repetitions; mostly at 3, later where a fast first
    # repetition held the CI's lower end down until the order statistic past 7 moved on
    assert all(a and n >= 3 for a, _, n in cut), cut
    if cutoff == "0":
        assert cut == []
    else:
        assert any(s == 64 for _, s, _ in cut), rows

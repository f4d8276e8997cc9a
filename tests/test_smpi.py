"""SimGrid SMPI backend: platform files, layouts and launch lines offline; then simulated
tuning of reduce at 64 ranks on the shipped fat-tree platform, as the user runs it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from colltune.backends.openmpi.applied import forced, under_rules
from colltune.backends.openmpi.install import OpenMPI, builtin_catalog, read_catalog
from colltune.backends.openmpi.tuned_rules import valid_algorithms
from colltune.backends.smpi import install as smpi
from colltune.collectives import get_collective
from colltune.core import account
from colltune.core.catalog import FAN, SEG
from colltune.core.config import DEFAULT, Config
from colltune.errors import ColltuneError
from colltune.launchers import Launch
from colltune.options import TuneOptions
from colltune.rules import ompi_classic as rules
from colltune.store import Store
from colltune.tuner.run import tune
from conftest import missing
from helpers import tune_cli

DOCS = Path(__file__).resolve().parent.parent / "docs" / "platforms"
FATTREE = DOCS / "fattree-32x16.xml"
FLAT = DOCS / "flat-64x8.xml"


def _installed() -> bool:
    return shutil.which("smpirun") is not None and shutil.which("smpicc") is not None


def need_smpi() -> None:
    if not _installed():
        missing("SimGrid SMPI unavailable (apt-get install libsimgrid-dev)")


def fake(platform: Path) -> smpi.SMPI:
    """An installation record for offline tests (nothing is run)."""
    return smpi.SMPI("3.32", Path("/usr"), Path("/usr/bin/smpicc"), Path("/usr/bin/smpirun"),
                     platform)


def test_shipped_platforms_describe_512_slots() -> None:
    ft = smpi.platform_hosts(FATTREE)
    fl = smpi.platform_hosts(FLAT)
    assert (len(ft), {h.cores for h in ft}) == (32, {16})
    assert (len(fl), {h.cores for h in fl}) == (64, {8})
    assert ft[0].name == "ft-0.cluster" and ft[-1].name == "ft-31.cluster"


def test_radical_lists_and_ranges(tmp_path: Path) -> None:
    p = tmp_path / "p.xml"
    p.write_text('<?xml version="1.0"?><platform version="4.1"><zone id="z" routing="Full">'
                 '<cluster id="c" prefix="n" suffix="" radical="0-3,8,10-11" speed="1Gf" '
                 'bw="1GBps" lat="1us" core="2"/><host id="login" speed="1Gf"/></zone>'
                 '</platform>')
    names = [h.name for h in smpi.platform_hosts(p)]
    assert names == ["n0", "n1", "n2", "n3", "n8", "n10", "n11", "login"]


def test_layout_fills_each_host_then_moves_on() -> None:
    ranks, nodes, ppn = smpi.layout(fake(FATTREE), 512)
    assert (nodes, ppn) == (32, 16)
    assert ranks[15] == "ft-0.cluster" and ranks[16] == "ft-1.cluster"
    ranks, nodes, ppn = smpi.layout(fake(FATTREE), 64, Launch(ppn=4))
    assert (nodes, ppn, ranks[4]) == (16, 4, "ft-1.cluster")
    _, nodes, ppn = smpi.layout(fake(FLAT), 64, Launch(nodes=32))
    assert (nodes, ppn) == (32, 2)


def test_layouts_that_do_not_fit_are_refused() -> None:
    with pytest.raises(ColltuneError, match="needs 33 hosts"):
        smpi.layout(fake(FATTREE), 513)
    with pytest.raises(ColltuneError, match="--nodes is 2"):
        smpi.layout(fake(FATTREE), 64, Launch(nodes=2, ppn=16))


def test_platform_errors_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.xml"
    bad.write_text("<platform><cluster")
    with pytest.raises(ColltuneError, match="bad.xml") as e:
        smpi.platform_hosts(bad)
    assert e.value.hint
    empty = tmp_path / "empty.xml"
    empty.write_text('<platform version="4.1"/>')
    with pytest.raises(ColltuneError, match="no hosts"):
        smpi.platform_hosts(empty)
    with pytest.raises(ColltuneError, match="--platform"):
        smpi.find_smpi(None, None)


def test_launch_line_forces_one_algorithm_and_turns_off_compute_timing() -> None:
    s = fake(FATTREE)
    cmd = smpi.launch_command(s, Path("/h.txt"), 64, "reduce", 5)
    assert cmd[:7] == ["/usr/bin/smpirun", "-np", "64", "-platform", str(FATTREE),
                       "-hostfile", "/h.txt"]
    assert "--cfg=smpi/reduce:ompi_binomial" in cmd
    assert "--cfg=smpi/simulate-computation:no" in cmd
    assert "--cfg=smpi/bcast:ompi" in smpi.launch_command(s, Path("/h"), 8, "bcast", 0)
    with pytest.raises(ColltuneError, match="no counterpart"):
        smpi.launch_command(s, Path("/h"), 8, "bcast", 7)  # knomial: not in SMPI


def test_catalog_uses_open_mpi_ids_and_names() -> None:
    ompi = builtin_catalog().algorithms
    cat = smpi.catalog()
    for coll, algs in cat.algorithms.items():
        assert algs, coll
        for i, name in algs.items():
            assert ompi[coll][i] == name
    assert not cat.variables  # SMPI's ports pick segment sizes themselves


@pytest.mark.parametrize(("coll", "alg", "np", "size", "want"), [
    ("reduce", 2, 64, 65536, (65536, 32)),  # chain: 64 KiB segments, fanout np/2
    ("reduce", 3, 64, 65536, (1024, 0)),  # pipeline: 64 > 0.041*64 + 9.71
    ("reduce", 3, 4, 1 << 20, (65536, 0)),  # 4 < 0.0033*1024 + 1.68 = 5.06
    ("reduce", 3, 8, 1 << 20, (32768, 0)),  # 8 > 5.06, 8 < 0.041*1024 + 9.71
    ("reduce", 5, 4, 16384, (0, 0)),  # binomial, np < 8 and < 20 KiB: unsegmented
    ("reduce", 5, 64, 65536, (1024, 0)),  # 64 > 0.6016*64 + 1.35 = 39.9
    ("reduce", 5, 16, 65536, (0, 0)),  # 16 < 39.9
    ("bcast", 3, 2, 1 << 20, (131072, 0)),  # 2 < 1.6134e-6*2^20 + 2.11 = 3.80
    ("bcast", 3, 8, 1 << 20, (16384, 0)),  # 8 >= 3.66 (64K rule), 8 < 12.16
    ("bcast", 4, 64, 65536, (1024, 0)),  # split binary tree below 370728 B
    ("bcast", 4, 64, 1 << 20, (8192, 0)),
    ("allreduce", 3, 64, 65536, (0, 0)),
])
def test_segment_sizes_smpi_uses(coll: str, alg: int, np: int, size: int,
                                 want: tuple[int, int]) -> None:
    assert smpi.smpi_segsize(coll, alg, np, size) == want


@pytest.mark.mpi
def test_tune_reduce_64_ranks_on_the_fat_tree(tmp_path: Path) -> None:
    """The issue's command, then what the simulation did: every algorithm was simulated
    (distinct times), the default equals one of the forced algorithms exactly at every
    size (SMPI's selector ran one of them), and the file is valid for Open MPI."""
    need_smpi()
    out, db = tmp_path / "rules.conf", tmp_path / "m.sqlite"
    summary, planned = tmp_path / "summary.json", tmp_path / "plan.json"
    args = ["reduce", "--boundaries", "midpoint",
            "--np", "64", "--backend", "smpi", "--platform", str(FATTREE),
            "--sizes", "8,64,512,4K,16K,64K,256K,1M",  # the grid this test was made on
            "--out", str(out), "--db", str(db), "--quiet"]
    res = tune_cli(*args, "--dry-run", "--summary-json", str(planned))  # issue 84: the plan
    assert res.returncode == 0 and not out.exists(), res.stderr
    res = tune_cli(*args, "--summary-json", str(summary), timeout=300)
    assert res.returncode == 0, res.stderr
    doc = json.loads(summary.read_text())
    assert doc["simulated"]["platform"] == str(FATTREE) and doc["mpi"]["name"] == "SimGrid SMPI"
    text = out.read_text()
    assert "SIMULATED, NOT MEASURED" in text
    rf = rules.read(out, valid_algs=valid_algorithms(builtin_catalog()), allow_v2=False)
    assert [c.comsize for c in rf.collectives[11]] == [1, 64]  # below 64: the library's
    assert [r.alg for r in rf.collectives[11][0].rules] == [0]

    store = Store(db)
    try:
        (ctx,) = store.contexts()
        assert (ctx.mpi_name, ctx.np, ctx.nodes, ctx.ppn) == ("SimGrid SMPI", 64, 4, 16)
        assert ctx.backend == "smpi"  # the store records which backend measured it
        ms = store.measurements(ctx)
    finally:
        store.close()
    by_size: dict[int, dict[int, float]] = {}
    for m in ms:
        assert m.status == "ok" and m.n == 1, (m.config, m.size, m.status)
        by_size.setdefault(m.size, {})[m.config.algorithm] = m.samples[0]
    assert len(by_size) >= 6
    for size, t in by_size.items():
        assert set(t) == {0, *smpi.ALGORITHMS["reduce"]}, size
        assert any(abs(t[0] - v) <= 1e-12 * v for a, v in t.items() if a != 0), (size, t)
    distinct = max(len({round(v, 12) for v in t.values()}) for t in by_size.values())
    assert distinct >= 5
    # the allocation 4 real nodes of 16 would hold: one launch, every algorithm switched
    # inside it, its simulated time plus a real launch's start-up
    held = doc["allocation"]
    assert (held["nodes"], held["launches"]) == (4, 1), held
    assert held["node_seconds"] >= 4 * sum(m.samples[0] for m in ms) + held["startup"]
    # what the plan said before: the same launches and points, and within 30% of the
    # allocation (simulated times: the comparison is exact, run after run)
    plan = json.loads(planned.read_text())
    assert (plan["sweep_launches"], plan["points"]) == (held["launches"], len(ms)), plan
    assert abs(plan["node_seconds"] - held["node_seconds"]) <= 0.3 * held["node_seconds"]
    # the rules pick the fastest simulated algorithm wherever it beats the default by 3%
    for size, t in by_size.items():
        best = min(t, key=lambda a: (t[a], a))
        found = rules.lookup(rf, 11, 64, size)
        assert found is not None
        if t[best] <= t[0] * 0.97:
            assert found[1].alg == best, (size, t, found[1])


def test_a_simulation_too_large_for_memory_is_refused_before_it_starts(tmp_path: Path
                                                                       ) -> None:
    """Issue 84: alltoall at 512 ranks up to the default 512 KiB blocks would need
    hundreds of GB in one smpimain; refused before anything is built or run, naming what
    it needs, what the machine has and the largest size that fits, and the size it names
    is then accepted (the plan is made)."""
    need_smpi()
    args = ["alltoall", "--np", "512", "--backend", "smpi", "--platform", str(FATTREE),
            "--db", str(tmp_path / "m.sqlite"), "--dry-run"]
    res = tune_cli(*args)
    assert res.returncode == 2, res.stderr
    assert "GB available" in res.stderr and "needs about" in res.stderr
    fits = int(re.search(r"--sizes up to (\d+) B", res.stderr).group(1))  # type: ignore[union-attr]
    assert 0 < fits < 524288
    ok = tune_cli(*args, "--sizes", f"8,{fits}")
    assert ok.returncode == 0, ok.stderr


def test_the_plan_warns_of_simgrids_quadratic_wait_at_scale(tmp_path: Path) -> None:
    """Issue 84: before 3.34 SimGrid removed each finished detached send from a list of all
    pending ones, so segmented reductions at hundreds of ranks may not finish in time. The
    plan says so (and where docs/smpi.md says what to do) at 512 ranks on such a SimGrid,
    not at 64, and not on a SimGrid that has the fix."""
    need_smpi()
    old = smpi.find_smpi(None, FATTREE).version_tuple < (3, 34)
    for np, said in ((512, old), (64, False)):
        res = tune_cli("reduce", "--np", str(np), "--backend", "smpi", "--platform",
                       str(FATTREE), "--sizes", "8", "--db", str(tmp_path / "q.sqlite"),
                       "--dry-run")
        assert res.returncode == 0, res.stderr
        assert ("keeps every pending detached send" in res.stdout + res.stderr) == said, \
            (np, res.stderr)


def test_a_simgrid_with_upstreams_fix_is_told_by_its_own_symbols(tmp_path: Path) -> None:
    """A SimGrid 3.32 built with upstream's fix of the quadratic wait (docs/smpi.md's
    recipe) says 3.32 like Debian's; its library exports the tree of the set the fix
    keeps pending sends in, Debian's does not. The fixed build is made by hand and never
    committed, so the positive case is a library exporting that symbol, built here; the
    negative is Debian's own library."""
    need_smpi()
    debian = smpi.find_smpi(None, FATTREE)
    assert smpi.waits_quadratically(debian) == (debian.version_tuple < (3, 34))
    # the symbol as 3.32 with commit 5f8fc2c exports it (std::set::insert's tree)
    if shutil.which("gcc") is None:
        missing("no gcc (Debian: gcc)")
    symbol = ("_ZNSt8_Rb_treeIN5boost13intrusive_ptrIN7simgrid6kernel8activity12Activity"
              "ImplEEES6_St9_IdentityIS6_ESt4lessIS6_ESaIS6_EE16_M_insert_uniqueIS6_EESt4"
              "pairISt17_Rb_tree_iteratorIS6_EbEOT_")
    for name, exported, waits in (("fixed", symbol, False), ("stock", "simgrid_other", True)):
        lib = tmp_path / name / "lib" / "libsimgrid.so.3.32"
        lib.parent.mkdir(parents=True)
        src = tmp_path / f"{name}.c"
        src.write_text(f"void {exported}(void) {{}}\n")
        subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
        fake = smpi.SMPI("3.32", tmp_path / name, debian.mpicc, debian.mpirun, FATTREE)
        assert smpi.waits_quadratically(fake) is waits, name
    # no library to read: the version decides
    assert smpi.waits_quadratically(smpi.SMPI("3.32", tmp_path / "none", debian.mpicc,
                                              debian.mpirun, FATTREE))


def test_the_plan_warns_of_alltoalls_flows_at_scale(tmp_path: Path) -> None:
    """At 512 ranks alltoall's basic linear (and SMPI's default, which runs it from 512 B
    a rank) did not finish a point: SimGrid's solver with 261,632 flows in flight. The
    plan says so before the tune spends --timeout on each, at 512 ranks, not at 256, and
    not for another collective."""
    need_smpi()
    for coll, np, said in (("alltoall", 512, True), ("alltoall", 256, False),
                           ("bcast", 512, False)):
        res = tune_cli(coll, "--np", str(np), "--backend", "smpi", "--platform",
                       str(FATTREE), "--sizes", "8", "--db", str(tmp_path / "f.sqlite"),
                       "--dry-run")
        assert res.returncode == 0, res.stderr
        out = res.stdout + res.stderr
        assert ("261,632 flows in flight" in out) == said, (coll, np, out)


@pytest.mark.mpi
def test_one_launch_switches_algorithms_as_launches_force_them(tmp_path: Path) -> None:
    """Issue 84: at scale a tune's cost is its launches. The kernel switches SimGrid's
    table of collectives by name inside one simulation; every point's simulated time equals
    the time of a launch forced to that algorithm on smpirun's line (`--sweep relaunch`),
    exactly, and the one-launch tune holds the allocation of one start-up, not eight."""
    need_smpi()
    times, held = {}, {}
    for sweep in ("mpit", "relaunch"):
        db = tmp_path / f"{sweep}.sqlite"
        opts = TuneOptions(["reduce"], [32], backend="smpi", platform=FATTREE, db=db,
                           boundaries="midpoint", sizes=[64, 16384, 262144], sweep=sweep)
        held[sweep] = tune(opts).summary["allocation"]
        store = Store(db)
        try:
            (ctx,) = store.contexts()
            times[sweep] = {(m.config.algorithm, m.size): m.samples[0]
                            for m in store.measurements(ctx)}
        finally:
            store.close()
    assert times["mpit"] == times["relaunch"]  # bit for bit: deterministic simulations
    assert {a for a, _ in times["mpit"]} == {0, *smpi.ALGORITHMS["reduce"]}
    assert len(set(times["mpit"].values())) >= 5  # the switch took: algorithms differ
    assert held["mpit"]["launches"] == 1
    assert held["relaunch"]["launches"] == len(smpi.ALGORITHMS["reduce"]) + 1
    assert held["mpit"]["startup"] * 8 == pytest.approx(held["relaunch"]["startup"])


@pytest.mark.mpi
def test_a_simulated_first_call_needs_no_warm_up() -> None:
    """Why SMPI points run no warm-up call: the kernel's times with three warm-up calls
    equal its times with none, at every size, segmented algorithms included."""
    from colltune.backends.registry import launch
    from colltune.kernel.build import build_kernel
    from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel

    need_smpi()
    mpi = smpi.find_smpi(None, FATTREE)
    placement = smpi.place(mpi, 32)
    sizes = [64, 4096, 65536, 262144]
    got = []
    for warmup in (0, 3):
        plan = KernelPlan("reduce", [KernelConfig(0)], [(0, s) for s in sizes],
                          Repetitions(warmup=warmup, min_reps=1, max_reps=1))
        cmd, env = launch(mpi, placement, "reduce", 5, None)  # binomial: 1 KiB segments
        out = run_kernel(cmd, build_kernel(mpi), plan, env)
        assert out.status == "ok", out.message
        got.append({r.size: r.median for r in out.results})
    assert set(got[0]) == set(sizes)
    assert got[0] == got[1]


@pytest.mark.mpi
def test_a_simulation_visits_a_configurations_sizes_smallest_first() -> None:
    """At 512 simulated ranks alltoall's basic linear ran out of time at its first point
    of each launch; the sizes were shuffled, so each new launch for the smaller sizes left
    behind ran out at one of them in turn, 600 s each (54, 19, 16 B...). An exact
    simulation has no noise to spread: the tuner's plan visits a configuration's sizes
    smallest first there, and a point that runs out of time leaves only larger sizes,
    excluded with it. A real MPI's stay shuffled."""
    from colltune.backends.registry import launch, of
    from colltune.kernel.build import build_kernel
    from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel

    need_smpi()
    mpi = smpi.find_smpi(None, FLAT)
    assert of(mpi).traits.exact
    sizes = [4096, 8, 65536, 64, 512, 16, 1024, 256]
    order = {}
    for ordered in (True, False):
        plan = KernelPlan("bcast", [KernelConfig(0)], [(0, s) for s in sizes],
                          Repetitions(warmup=0, min_reps=1, max_reps=1), ordered=ordered)
        cmd, env = launch(mpi, smpi.place(mpi, 4), "bcast", 0, None)
        out = run_kernel(cmd, build_kernel(mpi), plan, env)
        assert out.status == "ok", out.message
        order[ordered] = [r.size for r in out.results]
    assert order[True] == sorted(sizes)
    assert sorted(order[False]) == sorted(sizes) and order[False] != sorted(sizes)


@pytest.mark.mpi
def test_simulated_times_repeat_exactly(tmp_path: Path) -> None:
    """Deterministic: two runs (other seeds, so another order) give identical times."""
    need_smpi()
    runs, held = [], []
    for seed, cost in ((1, None), (2, "0")):
        opts = TuneOptions(["bcast"], [16], backend="smpi", platform=FLAT, boundaries="midpoint",
                           db=tmp_path / f"{seed}.sqlite", sizes=[64, 65536, 1 << 20],
                           launch_cost=cost)
        opts.settings.seed = seed
        res = tune(opts)
        ds = res.decisions["bcast"][16]
        runs.append({(d.size, d.chosen.key, d.best_median, d.default_median) for d in ds})
        assert all(d.simulated for d in ds)
        assert all(d.verdict in ("tuned", "default", "kept") for d in ds)
        assert any(d.chosen != DEFAULT for d in ds)
        held.append(res.summary["allocation"])
    assert runs[0] == runs[1]
    # the allocation 2 nodes of 8 would hold (issue 84): simulated, so the same whatever
    # the order, apart from the start-up the second run was told real launches take (none)
    first, free = held
    assert first["nodes"] == free["nodes"] == 2 and first["launches"] == free["launches"]
    assert free["startup"] == 0 and "0+0/node" in str(free["counted"])
    start = account.LaunchCost().seconds(2) * 2 * first["launches"]
    assert first["startup"] == pytest.approx(start, abs=0.01)
    assert first["node_seconds"] == pytest.approx(free["node_seconds"] + start, abs=0.01)
    # what the launches simulated is at least what their points took, simulated too
    assert free["node_seconds"] >= 2 * sum(d.best_median or 0 for d in ds) > 0


@pytest.mark.mpi
def test_several_layouts_in_one_run(tmp_path: Path) -> None:
    """`--np 8,16 --ppn 4`: one comm-size section per size, each layout 4 per node."""
    need_smpi()
    out, db = tmp_path / "rules.conf", tmp_path / "m.sqlite"
    res = tune_cli("barrier", "--boundaries", "midpoint",
                   "--np", "8,16", "--ppn", "4", "--backend", "smpi",
                   "--platform", str(FLAT), "--out", str(out), "--db", str(db), "--quiet",
                   timeout=300)
    assert res.returncode == 0, res.stderr
    rf = rules.read(out, valid_algs=valid_algorithms(builtin_catalog()), allow_v2=False)
    # barrier is collective 6; below 8 ranks the library's own choice, 9 to 15 what 8's
    # and 16's agree on
    assert [c.comsize for c in rf.collectives[6]] == [1, 8, 9, 16]
    store = Store(db)
    try:
        layouts = sorted((c.np, c.nodes, c.ppn) for c in store.contexts())
    finally:
        store.close()
    assert layouts == [(8, 2, 4), (16, 4, 4)]


@pytest.mark.mpi
def test_searches_simulate_each_point_once(tmp_path: Path) -> None:
    """Race and bayes ask for repetitions; on simulated time each point runs once and the
    repetitions are that time again. Both end where the grid ends."""
    need_smpi()
    chosen = {}
    for strategy in ("grid", "race", "bayes"):
        db = tmp_path / f"{strategy}.sqlite"
        opts = TuneOptions(["bcast"], [8], backend="smpi", platform=FLAT, db=db,
                           boundaries="midpoint", sizes=[64, 16384, 1 << 20],
                           strategy=strategy)
        res = tune(opts)
        chosen[strategy] = [(d.size, d.chosen) for d in res.decisions["bcast"][8]]
        store = Store(db)
        try:
            (ctx,) = store.contexts()
            assert {m.n for m in store.measurements(ctx)} == {1}
        finally:
            store.close()
    assert chosen["race"] == chosen["grid"] == chosen["bayes"]


@pytest.mark.mpi
def test_real_open_mpi_runs_what_the_simulation_chose(ompi41: OpenMPI, tmp_path: Path
                                                      ) -> None:
    """The file made from a simulation is an ordinary rules file: real Open MPI 4.1.4 at
    the same 4 ranks runs the chosen algorithm with the segment size SMPI used (pml
    traffic under the file equals that configuration forced, and differs from the same
    algorithm unsegmented)."""
    need_smpi()
    out = tmp_path / "rules.conf"
    opts = TuneOptions(["reduce"], [4], backend="smpi", platform=FATTREE, out=out,
                       boundaries="midpoint", db=tmp_path / "m.sqlite", sizes=[8, 65536])
    res = tune(opts)
    (d,) = [d for d in res.decisions["reduce"][4] if d.size == 65536]
    rf = rules.read(out)
    found = rules.lookup(rf, 11, 4, 65536)
    assert found is not None
    rule = found[1]
    # what SMPI's port used, carried into the file (pipeline: 32 KiB at 4 ranks, 64 KiB)
    assert (rule.alg, rule.segsize) == (d.chosen.algorithm, smpi.smpi_segsize(
        "reduce", d.chosen.algorithm, 4, 65536)[0])
    assert rule.alg != 0 and rule.segsize > 0, "the simulation chose nothing to check"
    coll = get_collective("reduce")
    cat = read_catalog(ompi41)
    chosen = Config.of(rule.alg, {SEG: rule.segsize, FAN: rule.faninout})
    seen = under_rules(ompi41, coll, 4, 65536, out)
    assert seen == forced(ompi41, coll, 4, 65536, chosen, cat)
    assert seen != forced(ompi41, coll, 4, 65536, Config.of(rule.alg, {FAN: rule.faninout}), cat)


@pytest.mark.mpi
@pytest.mark.parametrize("platform", sorted(DOCS.glob("*.xml")), ids=lambda p: p.stem)
def test_every_example_platform_simulates(platform: Path, tmp_path: Path) -> None:
    """Each platform docs/smpi.md offers is one SimGrid runs: 32 ranks across its first
    nodes, every bcast algorithm, times that differ between algorithms."""
    need_smpi()
    opts = TuneOptions(["bcast"], [32], backend="smpi", platform=platform,
                       db=tmp_path / "m.sqlite", sizes=[65536], boundaries="midpoint")
    res = tune(opts)
    (d,) = res.decisions["bcast"][32]
    assert d.simulated and d.default_median and d.best_median
    store = Store(tmp_path / "m.sqlite")
    try:
        (ctx,) = store.contexts()
        times = {m.config.algorithm: m.samples[0] for m in store.measurements(ctx)}
    finally:
        store.close()
    assert set(times) == {0, *smpi.ALGORITHMS["bcast"]} and len(set(times.values())) >= 4


@pytest.mark.mpi
def test_a_merged_file_says_what_serves_each_section(tmp_path: Path) -> None:
    """Each section of a file says which communicator sizes it serves and from what:
    measured in this run, kept from the file merged into, or nothing measured (the
    library's own decision); never "measured at 1" for the all-default first section."""
    need_smpi()
    out, db = tmp_path / "rules.conf", tmp_path / "m.sqlite"
    for np in ("16", "8"):
        res = tune_cli("bcast", "--np", np, "--backend", "smpi", "--platform", str(FLAT),
                       "--sizes", "64,64K", "--boundaries", "midpoint", "--out", str(out),
                       "--db", str(db), "--quiet")
        assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert ("# communicators of fewer than 8 ranks: nothing measured there, so the "
            "library's own decision (algorithm 0)\n# serves communicators of 1 to 7 ranks\n"
            ) in text
    assert ("# serves communicators of 8 to 15 ranks: measured at 8; 9 to 15 ranks take "
            "its rule (the nearest measured size below them; 16 has its own)") in text
    # the 16-rank section keeps what the first run said of it, and says what it serves now
    kept = text[text.index("# bcast at 16 ranks, "):]
    assert ("\n# serves communicators of 16 to any number of ranks: kept from the file this "
            "run merged into\n") in kept
    assert "#   65536 B per rank (lookup 65536)" in kept and text.count("# serves") == 3
    assert "measured at 1;" not in text

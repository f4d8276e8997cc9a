"""coll/han (--tune-han): its choices, how they are forced, its rules file, and proof from
Open MPI 5's own log (coll_han_verbose names the han algorithm of every call han runs) and
its pml traffic that the forced choices and the written file are what ran, across the test
cluster's two nodes (tests/testcluster.py)."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from colltune.backends.openmpi import han
from colltune.backends.openmpi.han_backend import apply_modules, choose_modules, han_rules
from colltune.backends.openmpi.install import OpenMPI
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.kernel.traffic import internal_traffic, monitoring_mca, read_monitoring
from colltune.slots import Placement
from colltune.store import Measurement
from conftest import get_mpi
from helpers import tune_cli
from testcluster import REPO, Cluster

# what ompi_info 5.0.11 prints (--parsable), trimmed to the lines the parser reads
OMPI_INFO = """\
mca:coll:han:param:coll_han_use_reduce_algorithm:enumerator:value:0:default
mca:coll:han:param:coll_han_use_reduce_algorithm:enumerator:value:1:intra
mca:coll:han:param:coll_han_use_reduce_algorithm:enumerator:value:2:simple
mca:coll:han:param:coll_han_use_reduce_algorithm:enumerator:value:3:reproducible
mca:coll:han:param:coll_han_use_bcast_algorithm:enumerator:value:0:default
mca:coll:han:param:coll_han_use_bcast_algorithm:enumerator:value:1:intra
mca:coll:han:param:coll_han_use_bcast_algorithm:enumerator:value:2:simple
mca:coll:han:param:coll_han_use_barrier_algorithm:enumerator:value:0:default
"""


def _cat() -> han.HanCatalog:
    return han.catalog(han.parse_algorithms(OMPI_INFO))


def test_catalog_lists_flat_tuned_each_algorithm_and_the_level_modules() -> None:
    cat = _cat()
    assert set(cat.algorithms) == {"reduce", "bcast"}  # barrier: han's, but not measured
    assert cat.algorithms["reduce"] == {
        1: "tuned (flat)", 2: "han:intra", 3: "han:simple", 4: "han:reproducible",
        5: "han:default up=adapt", 6: "han:default low=sm", 7: "han:default up=adapt low=sm"}
    f = cat.forcing["reduce"]
    assert f[1] == {"coll_han_reduce_dynamic_global_communicator_module": 3}
    assert f[3] == {"coll_han_use_reduce_algorithm": 2}
    assert f[7] == {"coll_han_reduce_up_module": 1, "coll_han_reduce_low_module": 1}
    assert cat.forcing["bcast"][3] == {"coll_han_use_bcast_algorithm": 2}
    assert cat.choice("reduce", 0) == han.BASELINE


def test_rules_file_round_trip_and_han_format() -> None:
    rules: han.HanRules = {
        "reduce": {4: [(0, han.Choice("han")), (2897, han.Choice("han", "simple")),
                       (46341, han.Choice("tuned"))],
                   16: [(0, han.Choice("tuned"))]},
        "bcast": {4: [(0, han.Choice("han", "intra"))]},
    }
    text = han.render(rules, ["a comment"])
    body = [ln for ln in text.splitlines() if not ln.startswith("#")]
    # han's reader: the first communicator size of a level must be 1, the first message 0
    assert body[:8] == ["2  # collectives", "bcast", "1  # topological levels",
                        "global_communicator", "1  # communicator sizes", "1  # np 4",
                        "1  # message sizes", "0 han @intra"]
    assert han.parse(text) == rules  # the `# np N` comment keeps the size tuned
    bare = han.parse("\n".join(ln.split("#")[0] for ln in text.splitlines()))
    assert bare["reduce"] == {1: rules["reduce"][4], 16: rules["reduce"][16]}  # as han reads
    with pytest.raises(han.HanRulesError):
        han.parse(text + "7\n")
    with pytest.raises(han.HanRulesError):
        han.parse(text.replace("0 han @intra", "0 sm"))


def _d(size: int, alg: int) -> Decision:
    return Decision(size, size, Config(alg), Config(alg), 1e-3, 1e-3, None, False)


def _m(alg: int, size: int, t: float) -> Measurement:
    return Measurement(Config(alg), size, "ok", 5, t, t, t, [t] * 5, "")


def test_rules_thresholds_and_modules_are_per_collective() -> None:
    cat = _cat()
    ds = [_d(8, 0), _d(4096, 3), _d(65536, 1), _d(1 << 20, 5)]
    rows = han_rules("reduce", cat, {4: ds})["reduce"][4]
    # geometric midpoints between measured sizes, as for coll/tuned; modules not per size
    assert rows == [(0, han.BASELINE), (182, han.Choice("han", "simple")),
                    (16385, han.Choice("tuned")), (262145, han.BASELINE)]
    frag = han.mca_fragment(Path("/x/han.rules"), {"reduce": (1, 0), "bcast": (0, 0)})
    assert frag.splitlines()[1:] == ["coll_han_use_dynamic_file_rules = 1",
                                     "coll_han_dynamic_rules_filename = /x/han.rules",
                                     "coll_han_reduce_up_module = 1"]


def test_a_second_collective_merges_into_the_files(tmp_path: Path) -> None:
    from colltune.backends.openmpi.han_backend import write_han_outputs

    cat, out = _cat(), tmp_path / "han.rules"
    mpi = OpenMPI("5.0.11", Path("/o"), Path("/o/mpicc"), Path("/o/mpirun"), Path("/o/oi"),
                  han=True)
    write_han_outputs(mpi, cat, {"reduce": {4: [_d(8, 0), _d(4096, 5)]}}, out,
                      {"reduce": (1, 0)}, {})
    write_han_outputs(mpi, cat, {"bcast": {8: [_d(8, 3)]}}, out, {"bcast": (0, 1)}, {})
    rules = han.parse(out.read_text())
    assert rules == {"reduce": {4: [(0, han.BASELINE)]},
                     "bcast": {8: [(0, han.Choice("han", "simple"))]}}
    frag = han.fragment_path(out).read_text()
    assert han.fragment_modules(frag) == {"reduce": (1, 0), "bcast": (0, 1)}
    out.write_text("2\nreduce\n")
    with pytest.raises(Exception, match="will not merge"):
        write_han_outputs(mpi, cat, {"bcast": {8: [_d(8, 3)]}}, out, {}, {})


def test_site_export_of_a_han_file(tmp_path: Path) -> None:
    from colltune.outputs.export import export

    path = tmp_path / "han.rules"
    rules: han.HanRules = {"reduce": {4: [(0, han.Choice("tuned"))]}}
    path.write_text(han.render(rules))
    (tmp_path / "han-mca-params.conf").write_text(han.mca_fragment(path, {"reduce": (1, 1)}))
    site = tmp_path / "site"
    written = {p.path.name: p.text for p in export(path, site)}
    assert set(written) == {"colltune-han.rules", "openmpi-mca-params.conf", "tuned",
                            "tuned.lua"}
    assert han.parse(written["colltune-han.rules"]) == rules
    conf = written["openmpi-mca-params.conf"]
    assert f"coll_han_dynamic_rules_filename = {(site / 'colltune-han.rules').resolve()}" in conf
    assert "coll_han_reduce_up_module = 1" in conf and "coll_han_reduce_low_module = 1" in conf
    assert 'setenv("OMPI_MCA_coll_han_use_dynamic_file_rules", "1")' in written["tuned.lua"]


def test_level_modules_chosen_over_every_size_that_runs_hans_default() -> None:
    cat = _cat()
    sizes = [8, 4096, 65536]
    # up=adapt (5) 20% faster everywhere; low=sm (6) 50% faster at one size, slower at two
    ms = [_m(0, s, 1.0) for s in sizes] + [_m(5, s, 0.8) for s in sizes] + [
        _m(6, 8, 0.5), _m(6, 4096, 1.3), _m(6, 65536, 1.3)] + [_m(7, s, 1.0) for s in sizes]
    ds = [_d(8, 6), _d(4096, 5), _d(65536, 5)]
    pair, notes = choose_modules("reduce", cat, ds, ms, 0.03)
    assert pair == (1, 0)
    assert len(notes) == 1 and notes[0].startswith("reduce 8 B: han:default low=sm")
    assert [d.chosen for d in apply_modules("reduce", cat, ds, pair)] == [Config(5)] * 3
    # nothing beats han's own modules by 3% over those sizes: its defaults stay
    ms2 = [_m(0, s, 1.0) for s in sizes] + [_m(a, s, 0.99) for a in (5, 6, 7) for s in sizes]
    pair2, _ = choose_modules("reduce", cat, ds, ms2, 0.03)
    assert pair2 == (0, 0)
    assert [d.chosen for d in apply_modules("reduce", cat, ds, pair2)] == [DEFAULT] * 3


def test_modules_refuted_at_one_size_are_not_set_at_all() -> None:
    from colltune.backends.openmpi.han_backend import keep_confirmed_modules
    from colltune.core.records import Verdict

    cat = _cat()
    ok = [_d(4096, 5), _d(65536, 5), _d(1 << 20, 1)]
    assert keep_confirmed_modules("reduce", cat, ok, (1, 0)) == (ok, None)
    refuted = replace(_d(8, 0), confirmations=[Verdict(8, 1.0, 1.0, 0.5, 0.5, 2, 4, "same", 1.0)])
    ds, note = keep_confirmed_modules("reduce", cat, [refuted, *ok], (1, 0))
    assert note and "han:default up=adapt" in note
    assert [d.chosen for d in ds] == [DEFAULT, DEFAULT, DEFAULT, Config(1)]
    assert "refuted at another size" in ds[1].reason


def test_han_stays_on_when_tuning_it(tmp_path: Path) -> None:
    from colltune.backends.openmpi.install import launch_command
    from colltune.launchers import Launch

    mpi = OpenMPI("5.0.11", Path("/opt/o"), Path("/opt/o/bin/mpicc"),
                  Path("/opt/o/bin/mpirun"), Path("/opt/o/bin/ompi_info"))
    p = Placement(4, False, str(tmp_path / "hosts"), 2, 2, launch=Launch(None, None, 2, ()))
    assert "^han" in launch_command(mpi, p)
    h = replace(mpi, han=True)
    assert "^han" not in launch_command(h, p) and h.key.endswith("+han")


@pytest.mark.mpi
def test_tune_han_refuses_where_han_does_not_run(ompi41: OpenMPI) -> None:
    r = tune_cli("reduce", "--np", "2", "--tune-han", "--mpi", str(ompi41.prefix))
    assert r.returncode == 2 and "needs Open MPI 5" in r.stderr
    o5 = get_mpi("ompi50")
    r = tune_cli("reduce", "--np", "2", "--tune-han", "--mpi", str(o5.prefix))
    assert r.returncode == 2 and "steps aside on one node" in r.stderr
    r = tune_cli("alltoall", "--np", "2", "--tune-han", "--mpi", str(o5.prefix),
                 "--hostfile", "/dev/null")
    assert r.returncode == 2


# ---------------------------------------------------------------------------
# live, across two namespace hosts, Open MPI 5
# ---------------------------------------------------------------------------

PROBE = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* one MPI_Reduce of argv[1] doubles per call, argv[2] calls, result checked */
int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int n = atoi(argv[1]), calls = atoi(argv[2]), rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    double *s = malloc(sizeof(double) * n), *d = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++) s[i] = 1.0;
    for (int c = 0; c < calls; c++)
        MPI_Reduce(s, d, n, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
    if (rank == 0 && (d[0] != size || d[n - 1] != size)) { printf("WRONG\n"); return 1; }
    MPI_Finalize();
    return 0;
}
"""


def _probe(o5: OpenMPI, tmp: Path) -> Path:
    src, exe = tmp / "probe.c", tmp / "probe"
    if not exe.exists():
        src.write_text(PROBE)
        subprocess.run([str(o5.mpicc), "-O1", "-o", str(exe), str(src)], check=True,
                       capture_output=True)
    return exe


def _run(o5: OpenMPI, cluster: Cluster, exe: Path, size: int, calls: int,
         mca: dict[str, str], monitor: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The probe on the test cluster's 2 nodes x 2 ranks, started on node 1, han on
    (nothing excluded), with `mca` and han's log."""
    args = [str(o5.mpirun), "--oversubscribe", "-np", "4", "--hostfile", cluster.hostfile(2),
            "--map-by", "ppr:2:node", "--mca", "plm_rsh_agent", cluster.agent,
            "--mca", "mpi_yield_when_idle", "1", "--mca", "coll_han_verbose", "1"]
    if monitor:
        monitor.mkdir()
        for k, v in monitoring_mca(monitor).items():
            args += ["--mca", k, v]
    for k, v in mca.items():
        args += ["--mca", k, v]
    r = cluster.on("node1", [*args, str(exe), str(size // 8), str(calls)], timeout=120)
    assert r.returncode == 0 and "WRONG" not in r.stdout, r.stdout + r.stderr[-2000:]
    return r


def _han_algorithms(r: subprocess.CompletedProcess[str], size: int) -> set[str]:
    """han's own words: the algorithm of every reduce of `size` bytes han ran."""
    return set(re.findall(rf"coll:han:get_algorithm reduce size:{size} algorithm:\d+ (\w+)",
                          r.stdout + r.stderr))


def _ran(r: subprocess.CompletedProcess[str], size: int) -> han.Choice:
    algs = _han_algorithms(r, size)
    assert len(algs) <= 1, algs
    return han.Choice("han", algs.pop()) if algs else han.Choice("tuned")


def _intra_node_bytes(monitor: Path) -> int:
    """Collective bytes the pml carried inside a node (ranks 0,1 on node 1, 2,3 on node 2)."""
    t = internal_traffic(read_monitoring(monitor, 4))
    return sum(b for (src, dst), (b, _) in t.items() if src // 2 == dst // 2)


@pytest.mark.mpi
def test_open_mpi_5_runs_the_han_file_and_level_modules_written(
        cluster: Cluster, tmp_path: Path) -> None:
    o5 = get_mpi("ompi50")
    exe = _probe(o5, tmp_path)
    path = tmp_path / "han.rules"
    path.write_text(han.render({"reduce": {4: [
        (0, han.Choice("han")), (2049, han.Choice("han", "simple")),
        (32769, han.Choice("tuned")), (131073, han.Choice("han"))]}}))
    frag = tmp_path / "han-mca-params.conf"
    frag.write_text(han.mca_fragment(path, {"reduce": (0, 1)}))  # low level: sm
    # installed as an administrator would: the site profile exported from the two files
    from colltune.outputs.export import export

    export(path, tmp_path / "site")
    site = tmp_path / "site" / "openmpi-mca-params.conf"
    assert "coll_han_reduce_low_module = 1" in site.read_text()
    mca = {"mca_base_param_files": str(site)}
    expect = {1024: han.Choice("han"), 4096: han.Choice("han", "simple"),
              65536: han.Choice("tuned"), 262144: han.Choice("han")}
    for size, want in expect.items():
        assert _ran(_run(o5, cluster, exe, size, 2, mca), size) == want, size
    # the level module (sm inside a node) from the same file: han's default algorithm at
    # 256 KiB moves no intra-node bytes through the pml; without the file it does
    _run(o5, cluster, exe, 262144, 4, mca, monitor=tmp_path / "mon-sm")
    _run(o5, cluster, exe, 262144, 4, {}, monitor=tmp_path / "mon-plain")
    with_sm = _intra_node_bytes(tmp_path / "mon-sm")
    plain = _intra_node_bytes(tmp_path / "mon-plain")
    print(f"intra-node pml bytes, 4 reduces of 256 KiB: low=sm {with_sm}, han's own {plain}")
    assert plain >= 4 * 262144 and with_sm < 262144


@pytest.mark.mpi
def test_tune_han_end_to_end_across_two_nodes(cluster: Cluster, tmp_path: Path) -> None:
    """`--tune-han` over the test cluster's 2 nodes (node-local /tmp), started on node 1:
    every han choice measured at 2 nodes, and Open MPI runs what the files written say."""
    o5 = get_mpi("ompi50")
    db, out, summ = tmp_path / "db.sqlite", tmp_path / "han.rules", tmp_path / "s.json"
    sizes = [4096, 262144]
    tune = [sys.executable, "-m", "colltune.cli", "reduce", "--boundaries", "midpoint",
            "--np", "4", "--hostfile", cluster.hostfile(2), "--ppn", "2", "--launcher-args",
            f"--mca plm_rsh_agent {cluster.agent}", "--mpi", str(o5.prefix), "--tune-han",
            "--db", str(db), "--out", str(out), "--summary-json", str(summ),
            "--sizes", "4K,256K", "--point-time", "0.02", "--min-reps", "5",
            "--max-reps", "15", "--confirm-rounds", "0", "--quiet"]
    r = cluster.on("node1", tune, env=cluster.env(
        PYTHONPATH=os.pathsep.join([str(REPO / "src"), *sys.path])), cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cat = han.catalog(han.read_algorithms(o5))
    con = sqlite3.connect(db)
    rows = con.execute("SELECT DISTINCT algorithm, size, status, mpi_key, nodes FROM "
                       "measurements").fetchall()
    con.close()
    # every han choice measured at both sizes, 2 nodes, kept apart from coll/tuned's data
    assert {(a, s) for a, s, *_ in rows} == {(a, s) for a in range(len(cat.choices["reduce"]))
                                             for s in sizes}
    assert {(st, k.endswith("+han"), n) for *_, st, k, n in rows} == {("ok", True, 2)}
    # what each measured choice made Open MPI run, in its own log
    exe = _probe(o5, tmp_path)
    for alg in (1, 2, 3):
        choice = cat.choice("reduce", alg)
        mca = {k: str(v) for k, v in cat.forcing["reduce"][alg].items()}
        assert _ran(_run(o5, cluster, exe, 4096, 1, mca), 4096) == choice
    # and under the files written, Open MPI runs what was decided at each size
    summary = json.loads(summ.read_text())
    frag = Path(summary["han"]["mca_params"])
    assert frag.exists() and str(out.resolve()) in frag.read_text()
    decided = {d["size"]: d for d in summary["collectives"]["reduce"]["4"]}
    parsed = han.parse(out.read_text())["reduce"][4]
    for size in sizes:
        want = cat.choice("reduce", decided[size]["chosen"]["algorithm"])
        assert _ran(_run(o5, cluster, exe, size, 2, {"mca_base_param_files": str(frag)}),
                    size) == han.Choice(want.component, want.algorithm), (size, want)
        assert any(c == han.Choice(want.component, want.algorithm) for _, c in parsed)

"""MPICH backend: the catalog read from the library, the tuning file (csel JSON) and the
environment profile, and proof on MPICH 5.0.2 and 4.0.2 that MPICH runs what they say.

Which algorithm MPICH ran is read from its traffic: inside a fresh network namespace, with
MPIR_CVAR_NOLOCAL=1 and a TCP transport, every byte the ranks exchange crosses that
namespace's loopback. At 4 ranks a binomial reduce moves 3 blocks per call and a
reduce-scatter + gather 4: the byte count tells them apart."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from colltune.backends import mpich as mb
from colltune.backends.mpich import MPICH
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions
from colltune.rules import mpich_csel, mpich_env
from colltune.rules.mpich_csel import Ranges
from colltune.tuner import mpich_rules
from colltune.tuner.decide import Decision
from colltune.tuner.space import DEFAULT, Config
from helpers import lo_traffic, tune_cli

# ---------------------------------------------------------------------------
# offline: parsing, writing, reading
# ---------------------------------------------------------------------------

LINES = ("Variable to select reduce algorithm\nauto - Internal algorithm selection (can be "
         "overridden with MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE)\n"
         "binomial              - Force binomial algorithm\n"
         "nb                    - Force nonblocking algorithm\n"
         "reduce_scatter_gather - Force reduce scatter gather algorithm\n")


def test_choices_one_per_line_and_glued() -> None:
    assert mb.parse_choices(LINES) == ["auto", "binomial", "nb", "reduce_scatter_gather"]
    # the same text as Debian's 4.0.2 reports it: line breaks lost, names glued on
    assert mb.parse_choices(LINES.replace("\n", "")) == [
        "auto", "binomial", "nb", "reduce_scatter_gather"]
    glued = ("Variable to select bcast algorithmauto - Internal algorithm selection (can be "
             "overridden with X)binomial        - Force Binomial Treenb              - Force "
             "nonblocking algorithmscatter_ring    - Force Scatter Ringsmp             - x")
    assert mb.parse_choices(glued) == ["auto", "binomial", "nb", "scatter_ring", "smp"]


BASE = {
    "collective=bcast": {"comm_type=intra": {"algorithm=MPIR_Bcast_intra_binomial": {}},
                         "comm_type=inter": {"algorithm=MPIR_Bcast_inter_x": {}}},
    "collective=reduce": {
        "comm_type=intra": {"avg_msg_size<=2048": {"algorithm=MPIR_Reduce_intra_binomial": {}},
                            "avg_msg_size=any": {
                                "algorithm=MPIR_Reduce_intra_reduce_scatter_gather": {}}},
        "comm_type=inter": {"algorithm=MPIR_Reduce_inter_y": {}}},
    "collective=allgather": {"comm_type=intra": {"algorithm=MPIR_Allgather_intra_ring": {}}},
    "collective=barrier": {"comm_type=intra": {"algorithm=MPIR_Barrier_intra_smp": {}}},
}


def test_tuning_file_round_trip_and_what_mpich_selects() -> None:
    tuning: mpich_csel.Tuning = {
        "reduce": {4: Ranges([(4095, "MPIR_Reduce_intra_binomial"),
                              (131071, "MPIR_Reduce_intra_reduce_scatter_gather"),
                              (None, None)]),
                   16: Ranges([(None, "MPIR_Reduce_intra_nb")])},
        "allgather": {8: Ranges([(1000, "MPIR_Allgather_intra_brucks"), (None, None)])},
        "barrier": {4: Ranges([(None, "MPIR_Barrier_intra_dissemination")])},
    }
    text = mpich_csel.render(BASE, tuning)
    table = json.loads(text)
    # every collective of the base is still there (the file replaces MPICH's table)
    assert list(table) == list(BASE)
    assert table["collective=bcast"] == BASE["collective=bcast"]
    assert table["collective=reduce"]["comm_type=inter"] == BASE["collective=reduce"][
        "comm_type=inter"]
    back = mpich_csel.parse(text)
    assert back == tuning
    # what MPICH's search would pick, key by key
    sel = mpich_csel.algorithm_for
    assert sel(table, "reduce", 4, 4095) == "MPIR_Reduce_intra_binomial"
    assert sel(table, "reduce", 3, 4096) == "MPIR_Reduce_intra_reduce_scatter_gather"
    assert sel(table, "reduce", 4, 1 << 20) is None  # MPICH's own subtree, nested
    own = table["collective=reduce"]["comm_type=intra"]["is_commutative=yes"][
        "comm_size<=4"]["avg_msg_size=any"]["comm_type=intra"]
    assert own == BASE["collective=reduce"]["comm_type=intra"]
    assert sel(table, "reduce", 64, 8) == "MPIR_Reduce_intra_nb"  # largest np: any larger
    assert sel(table, "reduce", 4, 8, commutative=False) is None  # MPICH's own, not ours
    assert list(table["collective=reduce"]["comm_type=intra"])[1:] == list(
        BASE["collective=reduce"]["comm_type=intra"])
    # allgather compares the total bytes, no commutativity guard
    assert "total_msg_size<=1000" in table["collective=allgather"]["comm_type=intra"][
        "comm_size=any"]
    assert sel(table, "barrier", 4, 0) == "MPIR_Barrier_intra_dissemination"


def test_tuning_file_refuses_what_mpich_cannot_express() -> None:
    with pytest.raises(mpich_csel.CselError, match="no message size"):
        mpich_csel.render(BASE, {"barrier": {4: Ranges([(10, "MPIR_Barrier_intra_smp"),
                                                        (None, "MPIR_Barrier_intra_nb")])}})
    with pytest.raises(mpich_csel.CselError):
        mpich_csel.parse("[1, 2]")
    bad = json.loads(mpich_csel.render(BASE, {"reduce": {4: Ranges(
        [(4095, "MPIR_Reduce_intra_binomial"), (None, "MPIR_Reduce_intra_nb")])}}))
    chain = bad["collective=reduce"]["comm_type=intra"]["is_commutative=yes"]["comm_size=any"]
    leaf = chain["avg_msg_size<=4095"]
    bad["collective=reduce"]["comm_type=intra"]["is_commutative=yes"]["comm_size=any"] = {
        "avg_msg_size<=9000": leaf, "avg_msg_size<=10": leaf,
        "avg_msg_size=any": chain["avg_msg_size=any"]}
    with pytest.raises(mpich_csel.CselError, match="ascending"):
        mpich_csel.parse(json.dumps(bad))


def test_decisions_to_ranges_use_mpichs_size() -> None:
    cat = mb.MPICHCatalog(algorithms={"allgather": {1: "brucks", 4: "ring"},
                                      "reduce": {1: "binomial", 4: "reduce_scatter_gather"}},
                          container={"allgather": {1: "MPIR_Allgather_intra_brucks",
                                                   4: "MPIR_Allgather_intra_ring"},
                                     "reduce": {1: "MPIR_Reduce_intra_binomial",
                                                4: "MPIR_Reduce_intra_reduce_scatter_gather"}})

    def d(size: int, alg: int) -> Decision:
        c = Config(alg) if alg else DEFAULT
        return Decision(size, size, c, c, 1.0, 1.0, None, False)

    r = mpich_rules.ranges("allgather", cat, 4, [d(1024, 1), d(65536, 4)])
    # total bytes: 4 KiB and 256 KiB at 4 ranks, switching at their geometric midpoint
    assert r.limits == [(32768, "MPIR_Allgather_intra_brucks"),
                        (None, "MPIR_Allgather_intra_ring")]
    r = mpich_rules.ranges("reduce", cat, 4, [d(8, 0), d(4096, 1), d(1 << 20, 1)])
    assert r.limits == [(181, None), (None, "MPIR_Reduce_intra_binomial")]
    t = mpich_rules.tuning({"reduce": {4: [d(8, 1), d(1 << 20, 1)]},
                            "allgather": {4: [d(8, 0)]}}, cat)
    assert list(t) == ["reduce"]  # nothing of allgather left MPICH's own choice
    assert mpich_rules.single_algorithms(t, cat) == {"reduce": "binomial"}


def test_env_profile_round_trip_and_refusals(tmp_path: Path) -> None:
    p = mpich_env.EnvProfile(collectives=["bcast", "reduce"], tuning_file=tmp_path / "t.json",
                             algorithms={"reduce": "binomial"}, comments=["hello"])
    text = mpich_env.render(p)
    assert "export MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE=0" in text
    assert f"export MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE={tmp_path / 't.json'}" in text
    back = mpich_env.parse(text)
    assert (back.collectives, back.tuning_file, back.algorithms, back.comments) == (
        ["bcast", "reduce"], tmp_path / "t.json", {"reduce": "binomial"}, ["hello"])
    with pytest.raises(mpich_env.EnvProfileError, match="without"):
        mpich_env.parse("export MPIR_CVAR_BCAST_INTRA_ALGORITHM=binomial\n")
    with pytest.raises(mpich_env.EnvProfileError, match="not `export"):
        mpich_env.parse("MPIR_CVAR_X=1\n")


# ---------------------------------------------------------------------------
# live: MPICH 5.0.2 (PyPI) and 4.0.2 (Debian)
# ---------------------------------------------------------------------------


def _catalog(mpi: MPICH) -> mb.MPICHCatalog:
    exe = build_kernel(mpi)
    lib = mb.library_path(exe)
    assert lib is not None
    cat = mb.catalog(exe, lib, ["reduce", "bcast", "allreduce"])
    cat.builtin = mb.builtin_table(lib)
    return cat


@pytest.mark.mpi
def test_catalog_is_what_the_library_says(mpich: MPICH) -> None:
    exe = build_kernel(mpich)
    cat = _catalog(mpich)
    assert set(cat.algorithms["reduce"].values()) >= {"binomial", "reduce_scatter_gather"}
    assert cat.builtin is not None and "collective=reduce" in cat.builtin
    for coll in ("reduce", "bcast", "allreduce"):
        for i, name in cat.algorithms[coll].items():
            # the library's own number for the name a user writes in the environment
            assert mb.value_of(exe, mb.algorithm_var(coll), name) == i, (coll, name)
            assert cat.container and cat.container[coll][i].endswith("_" + name)


def _tcp_env(mpi: MPICH) -> dict[str, str]:
    """Every message through a TCP transport on the loopback (none through shared memory)."""
    env = {"MPIR_CVAR_NOLOCAL": "1"}
    if mpi.version_tuple >= (5,):
        return env | {"MPICH_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp"}
    return env | {"UCX_TLS": "tcp,self", "UCX_NET_DEVICES": "lo"}


# per size: calls such that each point moves about 4 MiB per block in flight
SIZES = {16384: 128, 131072: 24, 1 << 20: 4}


def _bytes(mpi: MPICH, ns: str, tmp: Path, size: int, env: dict[str, str]) -> int:
    exe = build_kernel(mpi)
    reps = SIZES[size]
    plan = KernelPlan("reduce", [KernelConfig(0)], [(0, size)],
                      Repetitions(0, reps, reps, 0.01, 1e6, 1))
    pf = tmp / f"plan{size}"
    pf.write_text(plan.render())
    nbytes, events = lo_traffic(ns, [str(mpi.mpirun), "-n", "4", str(exe), str(pf)],
                                mb.launch_env(_tcp_env(mpi) | env))
    assert [e["status"] for e in events if e["event"] == "result"] == ["ok"], events
    return nbytes


@pytest.mark.mpi
def test_tuning_file_and_profile_are_obeyed(mpich: MPICH, netns: str, tmp_path: Path) -> None:
    cat = _catalog(mpich)
    assert cat.builtin is not None
    ids = {n: i for i, n in cat.algorithms["reduce"].items()}
    cont = cat.container["reduce"] if cat.container else {}
    # binomial up to 64 KiB, reduce-scatter + gather up to 512 KiB, binomial above
    tuning = {"reduce": {4: Ranges([(65536, cont[ids["binomial"]]),
                                    (524288, cont[ids["reduce_scatter_gather"]]),
                                    (None, cont[ids["binomial"]])])}}
    tf = tmp_path / "tuning.json"
    tf.write_text(mpich_csel.render(cat.builtin, tuning))
    prof = mpich_env.parse(mpich_env.render(mpich_env.EnvProfile(["reduce"], tf)))
    under_file = prof.variables()
    expected = {16384: "binomial", 131072: "reduce_scatter_gather", 1 << 20: "binomial"}
    for size, name in expected.items():
        forced = {n: _bytes(mpich, netns, tmp_path, size,
                            mb.forcing_env(cat, "reduce", ids[n]))
                  for n in ("binomial", "reduce_scatter_gather")}
        got = _bytes(mpich, netns, tmp_path, size, under_file)
        other = "binomial" if name != "binomial" else "reduce_scatter_gather"
        # the signature: 3 vs 4 blocks per call, so forced runs differ by ~1/3
        assert max(forced.values()) > 1.2 * min(forced.values()), forced
        assert abs(got - forced[name]) < 0.05 * forced[name], (size, got, forced)
        assert abs(got - forced[other]) > 0.15 * forced[other], (size, got, forced)


@pytest.mark.mpi
def test_tune_writes_files_mpich_obeys(mpich: MPICH, netns: str, tmp_path: Path) -> None:
    out = tmp_path / "tuning.json"
    r = tune_cli("reduce", "--np", "4", "--mpi", str(mpich.prefix), "--format", "mpich",
                 "--sizes", "16K,1M", "--min-reps", "5", "--max-reps", "7",
                 "--point-time", "0.05", "--confirm-rounds", "2", "--out", str(out),
                 "--db", str(tmp_path / "s.sqlite"), "--summary-json", str(tmp_path / "s.json"))
    assert r.returncode == 0, r.stderr
    summary = json.loads((tmp_path / "s.json").read_text())
    decided = {d["size"]: d for d in summary["collectives"]["reduce"]["4"]}
    assert set(decided) == {16384, 1 << 20}
    cat = _catalog(mpich)
    ids = {n: i for i, n in cat.algorithms["reduce"].items()}
    env_file = mpich_rules.env_path(out)
    if not any(d["chosen"]["algorithm"] for d in decided.values()):
        # MPICH's own choice everywhere: nothing is written for reduce
        assert "MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE" not in env_file.read_text()
        return
    prof = mpich_env.parse(env_file.read_text())
    assert prof.tuning_file == out.resolve() and "reduce" in prof.collectives
    assert set(json.loads(out.read_text())) == set(cat.builtin or {})
    for size, d in decided.items():
        alg = d["chosen"]["algorithm"]
        # what the decision means: that algorithm forced, or MPICH's own MPIR choice
        want = mb.forcing_env(cat, "reduce", alg) if alg else {mb.device_var("reduce"): "0"}
        forced = _bytes(mpich, netns, tmp_path, size, want)
        got = _bytes(mpich, netns, tmp_path, size, prof.variables())
        assert abs(got - forced) < 0.05 * forced, (size, d["chosen"], got, forced, ids)


@pytest.mark.mpi
def test_site_export_of_the_tuning_file_is_obeyed(mpich: MPICH, netns: str, tmp_path: Path
                                                  ) -> None:
    """`tune export --site` from MPICH's tuning file: the installed copy, a shell profile and
    Tcl/Lua modules that point at it; the modules' variables make MPICH run the file."""
    cat = _catalog(mpich)
    assert cat.builtin is not None and cat.container
    ids = {n: i for i, n in cat.algorithms["reduce"].items()}
    cont = cat.container["reduce"]
    tuning = {"reduce": {4: Ranges([(65536, cont[ids["binomial"]]),
                                    (None, cont[ids["reduce_scatter_gather"]])])}}
    src = tmp_path / "work" / "tuning.json"
    src.parent.mkdir()
    src.write_text(mpich_csel.render(cat.builtin, tuning))
    site = tmp_path / "site"
    r = tune_cli("export", "--from", str(src), "--site", str(site))
    assert r.returncode == 0, r.stderr
    installed = site / "colltune-mpich.json"
    assert installed.read_text() == src.read_text()
    prof = mpich_env.parse((site / "colltune-mpich.env").read_text())
    assert prof.tuning_file == installed.resolve() and prof.collectives == ["reduce"]
    tcl = (site / "modulefiles" / "colltune" / "tuned").read_text()
    lua = (site / "modulefiles" / "colltune" / "tuned.lua").read_text()
    env = dict(re.findall(r"^setenv (\S+) \{(.*)\}$", tcl, re.M))
    assert env == dict(re.findall(r'^setenv\("(\S+)", "(.*)"\)$', lua, re.M))
    assert env == prof.variables()
    src.unlink()  # what runs is the installed copy
    size = 131072  # reduce-scatter + gather in the file; binomial is MPICH's other choice
    got = _bytes(mpich, netns, tmp_path, size, env)
    want = _bytes(mpich, netns, tmp_path, size,
                  mb.forcing_env(cat, "reduce", ids["reduce_scatter_gather"]))
    other = _bytes(mpich, netns, tmp_path, size, mb.forcing_env(cat, "reduce", ids["binomial"]))
    assert abs(got - want) < 0.05 * want and abs(got - other) > 0.15 * other, (got, want, other)


def test_export_from_the_profile_and_refusals(tmp_path: Path) -> None:
    base = {"collective=reduce": {"comm_type=intra": {"algorithm=MPIR_Reduce_intra_binomial":
                                                      {}}}}
    tuning = {"reduce": {4: Ranges([(None, "MPIR_Reduce_intra_reduce_scatter_gather")])}}
    tf = tmp_path / "t.json"
    tf.write_text(mpich_csel.render(base, tuning))
    envf = mpich_rules.env_path(tf)
    envf.write_text(mpich_env.render(mpich_env.EnvProfile(["reduce"], tf.resolve(),
                                                          {"reduce": "reduce_scatter_gather"})))
    home = tmp_path / "home"
    r = tune_cli("export", "--from", str(envf), "--user", env={"HOME": str(home)})
    assert r.returncode == 0, r.stderr
    got = mpich_env.parse((home / ".config/colltune/colltune-mpich.env").read_text())
    assert got.tuning_file == (home / ".config/colltune/colltune-mpich.json").resolve()
    assert got.algorithms == {"reduce": "reduce_scatter_gather"}
    assert not (home / ".config/colltune/modulefiles").exists()  # --user: no modules
    bad = tmp_path / "bad.json"
    bad.write_text('{"collective=reduce": [')
    r = tune_cli("export", "--from", str(bad), "--site", str(tmp_path / "s"))
    assert r.returncode == 2 and "not JSON" in r.stderr and not (tmp_path / "s").exists()


def test_parameterised_leaves_name_every_parameter() -> None:
    base = {"collective=bcast": {"comm_type=intra": {"algorithm=MPIR_Bcast_intra_binomial": {}}}}
    tuning = {"bcast": {4: Ranges([(None, "MPIR_Bcast_intra_tree")])}}
    params = {"MPIR_Bcast_intra_tree": {"tree_type": "kary", "k": "2"}}
    text = mpich_csel.render(base, tuning, params)
    leaf = json.loads(text)["collective=bcast"]["comm_type=intra"]["comm_size<=4"][
        "avg_msg_size=any"]
    assert leaf == {"algorithm=MPIR_Bcast_intra_tree": {"tree_type=kary": {}, "k=2": {}}}
    assert mpich_csel.parse(text) == tuning  # the parameters do not change what is read
    assert set(mb.PARAMS["MPIR_Bcast_intra_tree"]) >= {("k", "MPIR_CVAR_BCAST_TREE_KVAL")}


@pytest.mark.mpi
def test_tree_algorithms_run_from_the_tuning_file(mpich: MPICH, tmp_path: Path) -> None:
    """A tree leaf without its parameters kills MPICH 5.0.2 in MPI_Init (it reads them
    uninitialised); with the parameters the catalog read from the library, each runs."""
    exe = build_kernel(mpich)
    cat = _catalog(mpich)
    assert cat.builtin is not None and cat.container is not None and cat.params is not None
    trees = {i: n for i, n in cat.algorithms["bcast"].items() if "tree" in n}
    if mpich.version_tuple < (5,):
        assert not trees  # 4.0.2 has no blocking tree bcast to select
        return
    assert set(trees.values()) == {"tree", "pipelined_tree"}
    for cont in (cat.container["bcast"][i] for i in trees):
        for key, var in mb.PARAMS[cont]:  # the values the forcing variables run with
            listed = [d for d in mb._list(exe, var) if d["name"] == var][0]
            assert str(listed.get("value", listed.get("text"))) == cat.params[cont][key]
    plan = tmp_path / "plan"
    plan.write_text(KernelPlan("bcast", [KernelConfig(0)], [(0, 65536)],
                               Repetitions(0, 3, 3, 0.01, 1e6, 1)).render())
    for i in trees:
        tuning = {"bcast": {4: Ranges([(None, cat.container["bcast"][i])])}}
        for params, ok in ((cat.params, True), (None, False)):
            tf = tmp_path / "t.json"
            tf.write_text(mpich_csel.render(cat.builtin, tuning, params))
            env = mb.launch_env({mb.JSON_VAR: str(tf), mb.device_var("bcast"): "0"})
            r = subprocess.run([str(mpich.mpirun), "-n", "4", str(exe), str(plan)],
                               capture_output=True, text=True, env=env, timeout=120)
            results = [json.loads(ln) for ln in r.stdout.splitlines()
                       if ln.startswith('{"event":"result"')]
            assert (r.returncode == 0 and [x["status"] for x in results] == ["ok"]) == ok, (
                trees[i], params is not None, r.stderr[-300:])

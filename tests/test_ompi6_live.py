"""Issue 62 on a real Open MPI 6 (v6.0.x, built by hand from the public mirror in /tmp,
docs/openmpi.md "Open MPI 6 here"; never by .ci/run, so skipped where it is not built):
what its own traffic shows it ran under JSON rules files, each point of the reader as
rules/ompi_json.py reads it; and what tune writes for it, read and obeyed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from colltune.backends.openmpi.applied import forced, under_rules
from colltune.backends.openmpi.install import (
    OpenMPI,
    dynamic_env,
    find_openmpi,
    forcing_vars,
    launch_command,
    launch_env,
    read_catalog,
)
from colltune.collectives import get_collective
from colltune.core.catalog import SEG
from colltune.core.config import DEFAULT, Config
from colltune.kernel.build import build_kernel
from colltune.kernel.launch import KernelConfig, KernelPlan, Repetitions, run_kernel
from colltune.kernel.traffic import Traffic, internal_traffic, monitoring_mca, read_monitoring
from colltune.launchers import Launch
from colltune.rules import ompi_classic as rules
from colltune.rules import ompi_json
from colltune.rules.ompi_classic import COLLTYPE
from colltune.slots import Placement
from helpers import tune_cli
from testcluster import REPO, Cluster

PREFIX = Path(os.environ.get("COLLTUNE_OMPI6_PREFIX", "/tmp/ompi6/install"))
pytestmark = [pytest.mark.mpi, pytest.mark.skipif(
    not (PREFIX / "bin" / "mpirun").exists(),
    reason=f"no Open MPI 6 at {PREFIX}: built by hand from the public mirror "
           "(docs/openmpi.md), never by .ci/run")]
SIZE = 65536


@pytest.fixture(scope="module")
def ompi6() -> OpenMPI:
    mpi = find_openmpi(str(PREFIX))
    assert mpi.version_tuple[0] == 6, mpi.version
    return mpi


def _file(tmp: Path, name: str, comm: dict[str, object], rule: dict[str, object]) -> Path:
    p = tmp / name
    p.write_text(json.dumps({"collectives": {"bcast": [{**comm, "rules": [rule]}]}}))
    return p


def test_open_mpi_6_runs_what_its_json_says_as_colltune_reads_it(ompi6: OpenMPI,
                                                                  tmp_path: Path) -> None:
    bcast = get_collective("bcast")
    catalog = read_catalog(ompi6)
    ids = {v: k for k, v in catalog.algorithms["bcast"].items()}
    # at 2 ranks most trees leave the same traffic (one message a call); a pipeline of
    # 8 KiB segments leaves eight
    piped = Config.of(ids["pipeline"], {SEG: 8192})
    default, want = (forced(ompi6, bcast, 2, SIZE, c, catalog) for c in (DEFAULT, piped))
    assert default != want, "the pipeline and the default must leave different traffic"

    def ran(name: str, comm: dict[str, object], rule: dict[str, object]) -> str:
        got = under_rules(ompi6, bcast, 2, SIZE, _file(tmp_path, name, comm, rule))
        return "rule" if got == want else "default" if got == default else "other"

    rule = {"alg": piped.algorithm, "seg_size": 8192}
    assert ran("any.json", {}, rule) == "rule"
    assert ran("named.json", {}, {**rule, "alg": "pipeline"}) == "rule"  # by its name
    # read into a C int, "inf" is -1: the rule matches no communicator (found in the source)
    assert ran("inf.json", {"comm_size_max": "inf"}, rule) == "default"
    assert ran("upto.json", {"comm_size_max": 2}, rule) == "rule"
    # the layout: 2 ranks on one node are single-node, not one-per-node
    assert ran("single.json", {"comm_rank_distribution": "single-node"}, rule) == "rule"
    assert ran("pernode.json", {"comm_rank_distribution": "one-per-node"}, rule) == "default"
    # inclusive message bounds; a rule above the size is not taken
    assert ran("at.json", {}, {**rule, "msg_size_min": SIZE, "msg_size_max": SIZE}) == "rule"
    assert ran("above.json", {}, {**rule, "msg_size_min": SIZE + 1}) == "default"
    # what drops the whole file: a float
    assert ran("float.json", {}, {**rule, "msg_size_min": 0.0}) == "default"
    # and what colltune's reader says of each, the same
    for name, ran_as in (("any", "rule"), ("inf", "default"), ("pernode", "default"),
                         ("above", "default")):
        js = ompi_json.parse((tmp_path / f"{name}.json").read_text())
        hit = ompi_json.lookup(js, "bcast", 2, SIZE, nodes=1, ppn=2)
        assert ("rule" if hit else "default") == ran_as, name


def test_the_segment_size_key_is_seg_size(ompi6: OpenMPI, tmp_path: Path) -> None:
    """The project's converter writes `segsize`, which the reader drops: the pipeline's
    traffic with `seg_size` is the forced segmented one, with `segsize` the unsegmented."""
    bcast = get_collective("bcast")
    catalog = read_catalog(ompi6)
    pipe = catalog.algorithms["bcast"]
    alg = next(k for k, v in pipe.items() if v == "pipeline")
    seg, whole = (forced(ompi6, bcast, 2, SIZE, Config.of(alg, {SEG: s}), catalog)
                  for s in (8192, 0))
    assert seg != whole
    right = _file(tmp_path, "seg.json", {}, {"alg": alg, "seg_size": 8192})
    wrong = _file(tmp_path, "segsize.json", {}, {"alg": alg, "segsize": 8192})
    assert under_rules(ompi6, bcast, 2, SIZE, right) == seg
    assert under_rules(ompi6, bcast, 2, SIZE, wrong) == whole


def test_tune_writes_json_for_open_mpi_6_that_it_reads(ompi6: OpenMPI, tmp_path: Path
                                                       ) -> None:
    out = tmp_path / "rules.json"
    r = tune_cli("bcast", "--np", "2", "--mpi", str(PREFIX), "--sizes", "8,64K",
                 "--min-reps", "5", "--max-reps", "9", "--point-time", "0.05",
                 "--confirm-rounds", "0", "--boundaries", "midpoint", "--out", str(out),
                 "--db", str(tmp_path / "s.db"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(out.read_text())
    about = json.loads(ompi_json.about_path(out).read_text())
    assert about["measured_in"] == {"single-node": ["1x2"]}
    tuned = doc["collectives"]["bcast"][-1]  # the only one at 2 ranks: from 0, as classic
    assert tuned["comm_size_min"] in (0, 2) and "comm_size_max" not in tuned
    assert tuned["comm_rank_distribution"] == "single-node"
    c = tune_cli("check", str(out), "--mpi", str(PREFIX), "--json", "-")
    assert c.returncode == 0 and json.loads(c.stdout)["format"] == "json", c.stderr
    v = tune_cli("verify", str(out), "--mpi", str(PREFIX), "--np", "2", "--sizes", "64K",
                 "--rounds", "2", "--max-rounds", "2", "--allow-inconclusive")
    # the traffic proof: Open MPI 6 read the file (what the sweep chose varies: a tree can
    # leave the default's traffic at 2 ranks, which the proof then says it cannot tell)
    first = v.stdout.splitlines()[0] if v.stdout else ""
    assert first.startswith(("bcast, 2 ranks: applied", "bcast, 2 ranks: UNPROVEN: at")), \
        v.stdout + v.stderr


def test_verify_proves_a_json_rule_applied_from_the_librarys_traffic(ompi6: OpenMPI,
                                                                      tmp_path: Path) -> None:
    """tune verify reads the rule as 6 does for the job's layout and proves from the
    traffic that 6 ran it; a rule for another layout is left to the library there."""
    ids = {v: k for k, v in read_catalog(ompi6).algorithms["bcast"].items()}
    rule = {"alg": ids["pipeline"], "seg_size": 8192, "msg_size_min": 1024}
    for name, dist, said in (("single", "single-node", "bcast, 2 ranks: applied: at"),
                             ("pernode", "one-per-node", "applied (default everywhere)")):
        f = _file(tmp_path, f"{name}.json", {"comm_rank_distribution": dist}, rule)
        v = tune_cli("verify", str(f), "--mpi", str(PREFIX), "--np", "2", "--sizes", "64K",
                     "--rounds", "2", "--max-rounds", "2", "--allow-inconclusive")
        assert said in v.stdout, v.stdout + v.stderr


def test_a_classic_files_sections_mean_on_6_what_its_source_says(ompi6: OpenMPI,
                                                                  tmp_path: Path) -> None:
    """Issue 62's first question, on the library: sections for 2 and 4 ranks, the 2-rank
    one a pipeline: 4.1 and 5.0 run it at 2 ranks; 6 runs the 4-rank section's rules there
    (each section serves the sizes below its own, the last one up), as rules/ompi_v6 and
    `tune check --ompi-version 6` say."""
    bcast = get_collective("bcast")
    catalog = read_catalog(ompi6)
    pipe = next(k for k, v in catalog.algorithms["bcast"].items() if v == "pipeline")
    f = tmp_path / "two-sections.conf"
    f.write_text(f"1\n7\n2\n2\n1\n0 {pipe} 0 8192\n4\n1\n0 0 0 0\n")
    got = under_rules(ompi6, bcast, 2, SIZE, f)
    assert got == forced(ompi6, bcast, 2, SIZE, DEFAULT, catalog)
    assert got != forced(ompi6, bcast, 2, SIZE, Config.of(pipe, {SEG: 8192}), catalog)
    said = tune_cli("check", str(f), "--mpi", str(PREFIX))
    assert "Open MPI 6 applies the section for 4 rank(s) to communicators of 2 rank(s)" \
        in said.stderr, said.stderr


def _traffic_on(cluster: Cluster, mpi: OpenMPI, layout: tuple[int, int], env: dict[str, str],
                name: str) -> Traffic:
    """The collective-internal traffic (pml monitoring, every rank's file in the shared
    home) of 64 KiB reduces on the test cluster's nodes, 4 ranks laid out as `layout`."""
    nodes, ppn = layout
    launch = Launch("mpirun", nodes, ppn, ("--mca", "plm_rsh_agent", cluster.agent,
                                           "--bind-to", "none"))
    placement = Placement(4, False, cluster.hostfile(4), nodes, ppn, launch=launch)
    mon = cluster.home / f"mon-{name}"
    mon.mkdir()
    plan = KernelPlan("reduce", [KernelConfig(0)], [(0, SIZE)],
                      Repetitions(warmup=0, min_reps=6, max_reps=6), dup_always=False)
    cmd = launch_command(mpi, placement, monitoring_mca(mon), node=False)
    out = run_kernel([*cluster.enter("node1"), *cmd], build_kernel(mpi), plan,
                     launch_env({**cluster.env(), **env}), point_timeout=120)
    assert out.status == "ok", (out.message, out.stderr[-2000:])
    return internal_traffic(read_monitoring(mon, 4), min_bytes=SIZE)


def test_open_mpi_6_runs_each_layouts_rules_across_nodes(ompi6: OpenMPI,
                                                          cluster: Cluster) -> None:
    """The file colltune writes for rules measured in two layouts (render_layers): on the
    test cluster, 4 ranks on one node run the single-node layer's linear reduce, and 4 on
    two nodes the other layer's binomial one; forced, the two leave different traffic in
    each layout, so the traffic says which layer Open MPI 6 took."""
    catalog = read_catalog(ompi6)
    ids = {v: k for k, v in catalog.algorithms["reduce"].items()}
    one, across = (rules.RulesFile(version=2) for _ in range(2))
    one.set_section(COLLTYPE["reduce"], rules.CommRule(4, [rules.MsgRule(0, ids["linear"])]))
    across.set_section(COLLTYPE["reduce"], rules.CommRule(4, [rules.MsgRule(0, ids["binomial"])]))
    f = cluster.home / "layers.json"
    f.write_text(ompi_json.render_layers({"single-node": one, "any": across}))
    for nodes, ppn, alg, other in ((1, 4, "linear", "binomial"), (2, 2, "binomial", "linear")):
        tag = f"{nodes}x{ppn}"
        got = _traffic_on(cluster, ompi6, (nodes, ppn), dynamic_env(rules=f), f"{tag}-file")
        want, not_it = (_traffic_on(cluster, ompi6, (nodes, ppn), dynamic_env(forcing_vars(
            "reduce", ids[a], 0, 0, 0, catalog)), f"{tag}-{a}") for a in (alg, other))
        assert want != not_it, tag
        print(tag, "file:", sorted(got), alg + ":", sorted(want), other + ":", sorted(not_it))
        assert got == want, (tag, got, want)
        # and colltune reads the file as the library did
        said = ompi_json.lookup(ompi_json.parse(f.read_text()), "reduce", 4, SIZE, nodes, ppn)
        assert said is not None and said[3].alg == ids[alg], tag


def test_tune_layouts_writes_one_json_with_a_layer_each(ompi6: OpenMPI, cluster: Cluster
                                                         ) -> None:
    """`tune --layouts 2x2,1x4` against Open MPI 6 on the test cluster: one JSON file (no
    file per layout), a single-node layer and an `any` layer (with the library's own choice
    for one-per-node ahead of it), and the layouts each was measured in."""
    work = cluster.home / "layouts6"
    work.mkdir()
    r = cluster.on("node1", [sys.executable, "-m", "colltune.cli", "reduce", "--layouts",
                             "2x2,1x4", "--hostfile", cluster.hostfile(4), "--launcher-args",
                             f"--mca plm_rsh_agent {cluster.agent} --bind-to none", "--mpi",
                             str(PREFIX), "--sizes", "64K", "--db", "db.sqlite", "--out",
                             "r.json", "--confirm-rounds", "0", "--quiet"],
                   env=cluster.env(PYTHONPATH=str(REPO / "src")), cwd=work)
    assert r.returncode == 0, r.stderr[-3000:]
    # one file for every layout (and beside it what the schema leaves no room for)
    assert sorted(p.name for p in work.glob("r*.json")) == ["r.json", "r.json.colltune.json"]
    doc = json.loads((work / "r.json").read_text())
    about = json.loads(ompi_json.about_path(work / "r.json").read_text())
    assert about["measured_in"] == {"single-node": ["1x4"], "any": ["2x2"]}
    dists = [c.get("comm_rank_distribution", "any") for c in doc["collectives"]["reduce"]]
    assert dists[0] == "single-node" and dists[-1] == "any" and "one-per-node" in dists
    assert dists == sorted(dists, key=ompi_json.LAYER_ORDER.index)

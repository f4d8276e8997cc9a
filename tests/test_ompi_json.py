"""Issue 62, scope 4: Open MPI 6's JSON rules file, read as its reader reads it and written
from colltune's decisions. The reader's logic is tested as read from its source
(coll_tuned_dynamic_file.c and coll_tuned_dynamic_rules.c at v6.0.x bb1c85d203;
docs/openmpi.md); tests/test_ompi6_live.py runs a real Open MPI 6 where one is built."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from colltune.rules import ompi_classic as classic
from colltune.rules import ompi_json as oj
from helpers import tune_cli


def _rules(*sections: tuple[int, list[tuple[int, int]]]) -> classic.RulesFile:
    rf = classic.RulesFile(version=2)
    for comsize, rules in sections:
        rf.set_section(7, classic.CommRule(comsize, [classic.MsgRule(s, a, 0, s // 4, None)
                                                     for s, a in rules]))
    return rf


def test_the_json_written_means_on_6_what_the_classic_file_means_on_4_and_5() -> None:
    """Every communicator size and message size, on random files: the rule Open MPI 6
    takes from the JSON is the rule 4.1 and 5.0 take from the classic file."""
    rng = random.Random(62)
    for _ in range(200):
        comsizes = sorted(rng.sample(range(1, 40), rng.randint(1, 4)))
        rf = _rules(*[(c, sorted({(s, rng.randint(0, 6)) for s in
                                  [0, *rng.sample(range(1, 5000), rng.randint(0, 4))]},
                                 key=lambda r: r[0]))
                      for c in comsizes])
        for sec in rf.collectives[7]:  # one rule per size, as colltune writes them
            sec.rules = list({r.msgsize: r for r in sec.rules}.values())
        js = oj.parse(oj.render(oj.from_classic(rf)))
        assert js.warnings == []
        for np in range(0, 45):
            for size in (0, 1, 7, 100, 999, 1000, 2500, 4999, 5000, 10**6):
                got = oj.lookup(js, "bcast", np, size)
                want = classic.lookup(rf, 7, np, size)
                assert want is not None and got is not None, (np, size)
                m, r = got[3], want[1]
                assert (m.alg, m.segsize) == (r.alg, r.segsize), (np, size, comsizes)


def _shape(rf: classic.RulesFile) -> list[tuple[int, list[tuple[int, int, int]]]]:
    return [(s.comsize, [(r.msgsize, r.alg, r.segsize) for r in s.rules])
            for s in rf.collectives[7]]


def test_a_file_colltune_wrote_reads_back_with_its_layouts() -> None:
    """Rules measured on one node and across nodes: each layer for its distribution, the
    specific ones first (the first rule that fits wins), the library's own choice for the
    distribution not measured (4 ranks on 4 nodes) ahead of the rules measured 2 x 2; read
    back layer by layer."""
    one = _rules((1, [(0, 0)]), (4, [(0, 0), (1024, 3), (65536, 6)]))
    across = _rules((4, [(0, 5)]))
    text = oj.render_layers({"any": across, "single-node": one}, {"written_by": "test"})
    doc = json.loads(text)
    assert doc["colltune"] == {"written_by": "test"}
    first, second, placeholder, last = doc["collectives"]["bcast"]
    assert first == {"comm_size_min": 0, "comm_size_max": 3,
                     "comm_rank_distribution": "single-node",
                     "rules": [{"msg_size_min": 0, "msg_size_max": "inf", "alg": 0}]}
    # no comm_size_max: Open MPI reads it into a C int, where "inf" would be -1
    assert "comm_size_max" not in second and second["comm_rank_distribution"] == "single-node"
    assert second["rules"][1] == {"msg_size_min": 1024, "msg_size_max": 65535, "alg": 3,
                                  "seg_size": 256}
    assert placeholder == {"comm_size_min": 0, "comm_rank_distribution": "one-per-node",
                           "rules": [{"msg_size_min": 0, "msg_size_max": "inf", "alg": 0}]}
    assert "comm_rank_distribution" not in last and last["rules"][0]["alg"] == 5
    js = oj.parse(text)
    assert oj.lookup(js, "bcast", 4, 2048, nodes=1)[3].alg == 3  # type: ignore[index]
    assert oj.lookup(js, "bcast", 4, 2048, nodes=2, ppn=2)[3].alg == 5  # type: ignore[index]
    assert oj.lookup(js, "bcast", 4, 2048, nodes=4, ppn=1)[3].alg == 0  # type: ignore[index]
    back = oj.layers(js)
    assert _shape(back["single-node"]) == [(1, [(0, 0, 0)]),
                                           (4, [(0, 0, 0), (1024, 3, 256), (65536, 6, 16384)])]
    # a first section serves from 0 ranks up, whatever size it was measured at: the file
    # does not say that size, and reads back as 1 (the same meaning)
    assert _shape(back["any"]) == [(1, [(0, 5, 0)])]
    assert _shape(back["one-per-node"]) == [(1, [(0, 0, 0)])]
    # read back and written again, the file is the same
    assert oj.render_layers(back, {"written_by": "test"}) == text
    # measured on one node only: nothing for other layouts, so no placeholder either
    alone = json.loads(oj.render_layers({"single-node": one}))["collectives"]["bcast"]
    assert {c["comm_rank_distribution"] for c in alone} == {"single-node"}


def test_a_layout_rule_is_skipped_where_the_job_has_another_layout() -> None:
    js = oj.parse(json.dumps({"collectives": {"reduce": [
        {"comm_size_min": 4, "comm_rank_distribution": "single-node",
         "rules": [{"alg": 3}]},
        {"comm_size_min": 4, "comm_rank_distribution": "one-per-node",
         "rules": [{"alg": 5}]},
        {"comm_size_min": 4, "rules": [{"alg": 2}]}]}}))
    assert oj.lookup(js, "reduce", 4, 64, nodes=1)[3].alg == 3  # type: ignore[index]
    assert oj.lookup(js, "reduce", 4, 64, nodes=4, ppn=1)[3].alg == 5  # type: ignore[index]
    assert oj.lookup(js, "reduce", 8, 64, nodes=2, ppn=4)[3].alg == 2  # type: ignore[index]
    assert oj.lookup(js, "reduce", 2, 64) is None  # below every rule: the fixed decision
    assert oj.distribution_of(1, 4) == "single-node"
    assert oj.distribution_of(4, 1) == "one-per-node"
    assert oj.distribution_of(2, 2) == "any"


@pytest.mark.parametrize("doc, error", [
    ({"rules": []}, 'needs a "collectives" object'),
    ({"collectives": {"Bcast": []}}, "unknown collective 'Bcast'"),
    ({"collectives": {"bcast": [{"rules": [{"alg": 1, "msg_size_min": 1.5}]}]}},
     "msg_size_min must be an integer"),
    ({"collectives": {"bcast": [{"rules": [{"alg": 1, "faninout": "four"}]}]}},
     "neither an integer nor \"inf\""),
    ({"collectives": {"bcast": [{"comm_size_min": 2}]}}, 'needs a list of "rules"'),
])
def test_what_open_mpi_6_drops_whole_is_refused(doc: dict[str, object], error: str) -> None:
    with pytest.raises(oj.JsonRulesError, match=error):
        oj.parse(json.dumps(doc))


def test_what_open_mpi_6_reads_otherwise_is_said() -> None:
    """Each case as its reader takes it: said as a warning, read as it reads it."""
    text = ('{"collectives": {"bcast": [{"comm_size_max": "inf", "rules": [{"alg": 1}]}, '
            '{"comm_rank_distribution": "by-node", "rules": ['
            '{"msg_size_max": 99, "alg": 1, "segsize": 4096, "seg_size": 0},'
            '{"msg_size_min": 100, "msg_size_max": "Infinity"},'
            '{"alg": 1, "alg": 2}]}], "gatherv": []}}')
    js = oj.parse(text, "f.json", valid_algs=lambda name: {1: "basic_linear", 2: "chain"})
    said = "\n".join(js.warnings)
    assert "comm_size_max inf is read as -1" in said  # a C int: the rule never matches
    assert oj.lookup(js, "bcast", 4, 10)[0] == 1  # type: ignore[index]  # the second rule
    assert "'by-node' is read as \"any\"" in said
    assert "key 'segsize' is not read (Open MPI's key is seg_size)" in said
    assert oj.lookup(js, "bcast", 4, 10)[3].segsize == 0  # type: ignore[index]
    assert 'no "alg": the rule runs the fixed decision' in said
    assert oj.lookup(js, "bcast", 4, 500)[3].alg == 0  # type: ignore[index]  # "Inf..." is inf
    assert "key 'alg' twice: Open MPI reads the first" in said
    assert "gatherv: coll/tuned has no dynamic decision for it" in said
    named = oj.parse('{"collectives": {"bcast": [{"rules": [{"alg": "chain"}, '
                     '{"alg": "pipeline"}]}]}}', valid_algs=lambda n: {1: "basic_linear",
                                                                      2: "chain"})
    assert [(m.alg, m.disabled) for m in named.collectives["bcast"][0].rules] == [
        (2, False), (0, True)]
    with pytest.raises(oj.JsonRulesError, match="not JSON"):
        oj.parse('{"collectives": {"bcast": [{"rules": [{"alg": NaN}]}]}}')


def test_check_reads_json_as_open_mpi_6_and_refuses_it_for_5(tmp_path: Path) -> None:
    rf = _rules((1, [(0, 0)]), (4, [(0, 0), (1024, 3)]))
    f = tmp_path / "rules.json"
    f.write_text(oj.render_layers({"single-node": rf}))
    six = tune_cli("check", str(f), "--ompi-version", "6.0.0", "--json", "-")
    assert six.returncode == 0, six.stderr
    doc = json.loads(six.stdout)
    assert doc["format"] == "json"
    assert doc["collectives"]["bcast"][1]["comm_rank_distribution"] == "single-node"
    five = tune_cli("check", str(f), "--ompi-version", "5.0.7")
    assert five.returncode == 1
    assert "Open MPI 5 reads only the classic format and would drop it" in five.stderr
    explained = tune_cli("explain", str(f), "-c", "bcast", "--np", "4", "--size", "2K")
    assert explained.returncode == 0, explained.stderr
    assert "communicator rule 2 (4-2147483647 ranks, single-node)" in explained.stdout
    assert "algorithm 3" in explained.stdout


def test_json_is_refused_where_the_open_mpi_reads_none(tmp_path: Path) -> None:
    """Open MPI 4.1 (Debian's /usr) reads no JSON: asked for one, tune says so first."""
    r = tune_cli("reduce", "--np", "2", "--mpi", "/usr", "--backend", "openmpi",
                 "--rules-version", "3", "--out", str(tmp_path / "r.json"),
                 "--db", str(tmp_path / "s.db"))
    assert r.returncode == 2, r.stderr
    assert "reads no JSON rules (6.0 and later do)" in r.stderr


def test_a_classic_file_says_its_layout_in_a_comment_and_check_reads_it() -> None:
    """Open MPI 4.1 and 5.0's formats cannot say a layout: the file tune writes says it in
    a comment per section (the golden file from the recorded one-node datasets), and tune
    check reports it."""
    golden = Path(__file__).parent / "golden" / "from-db-ompi41.conf"
    assert "# tuned for bcast at 4 ranks on 1 node(s) x 4 (single-node)" in golden.read_text()
    c = tune_cli("check", str(golden), "--json", "-")
    assert c.returncode == 0, c.stderr
    said = json.loads(c.stdout)["tuned_for"]
    assert "bcast at 4 ranks: 1 node(s) x 4" in said and len(said) == 12

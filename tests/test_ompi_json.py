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
    text = oj.render_layers({"any": across, "single-node": one})
    doc = json.loads(text)
    assert list(doc) == ["rule_file_version", "module", "collectives"]
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
    assert oj.render_layers(back) == text
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


# Open MPI's schema for these files (docs/tuning-apps/tuned_dynamic_file_schema.json in its
# repository), its rules stated here in our own words: the top holds `rule_file_version` (a
# number), `module` (text) and `collectives`, and may hold `$schema`, nothing else; a
# collective is one of the lowercase names the schema lists, holding a list of communicator
# rules; a communicator rule has `rules` and may have the size bounds (an integer or inf) and
# one of three rank distributions, nothing else; a message rule has `alg` (integer or name)
# and may have the size bounds and the integer parameters (faninout, seg_size, reqs,
# bine_imp), nothing else.
_BOUND = {"anyOf": [{"type": "integer"}, {"enum": ["inf", "Inf", "INF"]}]}
_SCHEMA_NAMES = ("allgather allreduce alltoall alltoallv alltoallw barrier bcast exscan gather "
                 "gatherv reduce reducescatter reducescatterblock scan scatter scatterv "
                 "neighbor_allgather neighbor_allgatherv neighbor_alltoall neighbor_alltoallv "
                 "neighbor_alltoallw").split()
OPEN_MPI_SCHEMA = {
    "type": "object", "required": ["rule_file_version", "module", "collectives"],
    "additionalProperties": False,
    "properties": {
        "rule_file_version": {"type": "number"}, "module": {"type": "string"},
        "$schema": {"type": "string"},
        "collectives": {
            "type": "object", "additionalProperties": False,
            "patternProperties": {"^(" + "|".join(_SCHEMA_NAMES) + ")$": {
                "type": "array", "items": {
                    "type": "object", "required": ["rules"], "additionalProperties": False,
                    "properties": {
                        "comm_size_min": _BOUND, "comm_size_max": _BOUND,
                        "comm_rank_distribution": {
                            "enum": ["any", "one-per-node", "single-node"]},
                        "rules": {"type": "array", "items": {
                            "type": "object", "required": ["alg"],
                            "additionalProperties": False,
                            "properties": {
                                "msg_size_min": _BOUND, "msg_size_max": _BOUND,
                                "alg": {"type": ["string", "integer"]},
                                "reqs": {"type": "integer"}, "faninout": {"type": "integer"},
                                "seg_size": {"type": "integer"},
                                "bine_imp": {"type": ["string", "integer"]}}}}}}}}}}}


def test_every_json_file_colltune_writes_validates_against_open_mpis_schema(
        tmp_path: Path) -> None:
    """Issue 74: a site that validates with Open MPI's schema (or converts with its script)
    took colltune's files for invalid: no `rule_file_version`, no `module`, and a `colltune`
    object the schema does not allow. Every layer combination, written as tune writes it
    and as export installs it, validates; the provenance lives beside the file."""
    import jsonschema

    jsonschema.Draft201909Validator.check_schema(OPEN_MPI_SCHEMA)
    validator = jsonschema.Draft201909Validator(OPEN_MPI_SCHEMA)
    one = _rules((1, [(0, 0)]), (4, [(0, 0), (1024, 3), (65536, 6)]))
    across = _rules((4, [(0, 5)]))
    for layers in ({"any": across}, {"single-node": one},
                   {"any": across, "single-node": one, "one-per-node": one}):
        doc = json.loads(oj.render_layers(layers))
        errors = [e.message for e in validator.iter_errors(doc)]
        assert errors == [], errors
        assert oj.parse(json.dumps(doc)).warnings == []
    # the validator is not one that passes everything: colltune's former top-level object
    old = {"colltune": {"written_by": "test"}, **json.loads(oj.render_layers({"any": across}))}
    assert any("colltune" in e.message for e in validator.iter_errors(old))
    assert any("not in Open MPI's schema" in w for w in oj.parse(json.dumps(old)).warnings)
    del old["colltune"], old["module"]
    assert any("'module' is a required property" in e.message
               for e in validator.iter_errors(old))

    # as `tune --rules-version 3` writes it (rules, and what they cannot say beside them)
    # and as `tune export` installs it
    store_rules = tmp_path / "rules.json"
    store_rules.write_text(oj.render_layers({"single-node": one}))
    site = tmp_path / "site"
    r = tune_cli("export", "--site", str(site), "--from", str(store_rules))
    assert r.returncode == 0, r.stdout + r.stderr
    installed = json.loads((site / "colltune-rules.conf").read_text())
    assert [e.message for e in validator.iter_errors(installed)] == []
    # an older colltune's file, with its own object: installed without it
    store_rules.write_text(json.dumps({"colltune": {"written_by": "an older colltune"},
                                       "collectives": doc["collectives"]}))
    r = tune_cli("export", "--site", str(site), "--from", str(store_rules), "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    installed = json.loads((site / "colltune-rules.conf").read_text())
    assert [e.message for e in validator.iter_errors(installed)] == []
    assert installed["collectives"] == doc["collectives"]

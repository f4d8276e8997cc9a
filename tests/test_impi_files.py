"""Intel MPI's tuning file and profiles as colltune writes and reads them (no library needed):
a round trip, the refusals that match what Intel MPI would misread, and the rule that a
profile never selects through a tuning file and I_MPI_ADJUST_* at once."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from colltune.backends import registry
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.rules import impi_env, impi_table, impi_tuning
from colltune.rules.impi_tuning import ImpiFormatError, Rules, rules_for, rules_from


def test_render_and_parse_round_trip() -> None:
    t: impi_tuning.Tuning = {
        "bcast": {2: Rules([(1024, 1), (None, 3)]), 4: Rules([(20, 8), (None, 15)])},
        "reduce_scatter": {None: Rules([(None, 2)])}}
    text = impi_tuning.render(t)
    doc = json.loads(text)
    # the levels Intel MPI needs, comm_id included (without it the file is misread)
    assert doc["coll=Bcast"]["ppn=-1"]["comm_size=4"]["comm_id=-1"]["msg_size=20"] == \
        {"Bcast=8": {}}
    assert list(doc["coll=Bcast"]["ppn=-1"]["comm_size=2"]["comm_id=-1"]) == \
        ["msg_size=1024", "msg_size=-1"]  # ascending, the catch-all last
    assert "coll=Reduce_scatter" in doc
    back = impi_tuning.parse(text)
    assert impi_tuning.render(back) == text
    assert back["bcast"][4].preset_at(20) == 8 and back["bcast"][4].preset_at(21) == 15
    # the first comm_size key at or above the job's size, else the largest (observed: 4
    # also serves 2, 3 and 8: tests/test_impi.py)
    assert rules_for(back, "bcast", 3) is back["bcast"][4]
    assert rules_for(back, "bcast", 5) is back["bcast"][4]


@pytest.mark.parametrize("text, why", [
    ('{"coll=Bcast": {"ppn=-1": {"comm_size=4": {"msg_size=-1": {"Bcast=1": {}}}}}}',
     "comm_id"),
    ('{"coll=Bcast": {"ppn=-1": {"comm_size=4": {"comm_id=-1": {"msg_size=-1": '
     '{"Bcast=1": {}}, "msg_size=64": {"Bcast=2": {}}}}}}}', "ascend"),
    ('{"coll=Bcast": {"ppn=-1": {"comm_size=4": {"comm_id=-1": {"msg_size=-1": '
     '{"Reduce=1": {}}}}}}}', "Bcast=ID"),
    ('{"coll=Frobnicate": {}}', "names no collective"),
    ('{"coll=Bcast": {"ppn=-1": {"comm_size=4": {"comm_id=-1": {"msg_size=NaN": '
     '{"Bcast=1": {}}}}}}}', "msg_size=N"),
    ("[1, 2]", "object"),
    ('{"coll=Bcast": NaN}', "not JSON"),
])
def test_what_intel_mpi_would_misread_is_refused(text: str, why: str) -> None:
    with pytest.raises(ImpiFormatError, match=why):
        impi_tuning.parse(text)



def test_layers_per_ranks_a_node_round_trip_and_merge(tmp_path: Path) -> None:
    """tune --layouts 2x2,1x4 --format impi: one ppn layer per layout, ascending, in one
    file; a second run's layer merges beside the first; a job takes the first layer at or
    above its ranks a node, else the largest (shown on the library: tests/test_impi.py)."""
    from colltune.backends.impi.files import write_tuning

    out = tmp_path / "t.json"
    two, four = Rules([(1024, 1), (None, 3)]), Rules([(None, 8)])
    for ppn, r in ((4, four), (2, two)):
        write_tuning(out, {ppn: {"bcast": {4: r}}}, ["tuned here"], [])
    doc = json.loads(out.read_text())
    assert list(doc["coll=Bcast"]) == ["ppn=2", "ppn=4"]
    layers = impi_tuning.parse_layers(out.read_text())
    assert layers == {2: {"bcast": {4: two}}, 4: {"bcast": {4: four}}}
    assert impi_tuning.render_layers(layers) == out.read_text()
    assert impi_tuning.layer_for(layers, 1)["bcast"][4] == two
    assert impi_tuning.layer_for(layers, 3)["bcast"][4] == four
    assert impi_tuning.layer_for(layers, 16)["bcast"][4] == four
    assert impi_tuning.parse(out.read_text())["bcast"][4] == four  # no layout: the largest

def test_rules_from_range_starts_merges_neighbours() -> None:
    r = rules_from([(0, 1), (100, 1), (4000, 3), (70000, 1)])
    assert r.limits == [(3999, 1), (69999, 3), (None, 1)]
    assert r.ranges() == [(0, 3999, 1), (4000, 69999, 3), (70000, None, 1)]


def test_a_profile_never_mixes_a_tuning_file_with_adjust_variables() -> None:
    with pytest.raises(ImpiFormatError, match="never both"):
        impi_env.render(impi_env.ImpiProfile([], {"I_MPI_TUNING": "/x.json",
                                                  "I_MPI_ADJUST_BCAST": "1:0-100"}))
    with pytest.raises(ImpiFormatError, match="never both"):
        impi_env.parse("export I_MPI_TUNING_BIN=/a.dat\nexport I_MPI_ADJUST_REDUCE=2:0-8\n")
    # a malformed rule list is ignored by Intel MPI without a word: refused here
    with pytest.raises(ImpiFormatError, match="malformed"):
        impi_env.parse("export I_MPI_ADJUST_BCAST='1:0-100@1-4,2:101-200@1-4'\n")
    with pytest.raises(ImpiFormatError, match="not a setting"):
        impi_env.parse("export I_MPI_HYDRA_BOOTSTRAP_EXEC=/tmp/evil\n")
    with pytest.raises(ImpiFormatError, match="takes one value"):
        impi_env.parse("export I_MPI_TUNING='$(rm -rf ~)'\n")


def test_adjust_variables_carry_the_same_rules(tmp_path: Path) -> None:
    """The I_MPI_ADJUST_* form of a tuning of one comm size, read back by bash as written;
    two comm sizes do not fit (one message-size rule per process range)."""
    top = impi_env.TOP
    env = impi_env.from_tuning({"bcast": {4: Rules([(20, 8), (None, 15)])}})
    assert env == {"I_MPI_ADJUST_BCAST": f"8:0-20;15:21-{top}"}
    with pytest.raises(ImpiFormatError, match="one message-size rule per process range"):
        impi_env.from_tuning({"bcast": {2: Rules([(None, 1)]), 4: Rules([(None, 3)])}})
    with pytest.raises(ImpiFormatError, match="keeps only the last"):
        impi_env.check({"I_MPI_ADJUST_BCAST": "8:0-20@1-4;2:21-1023@1-4"})
    prof = impi_env.ImpiProfile(["a comment; with $(danger)"], env)
    text = impi_env.render(prof)
    assert impi_env.parse(text).settings == env
    path = tmp_path / "p.env"
    path.write_text(text)
    out = subprocess.run(["bash", "-c", f". {path} && printf %s \"$I_MPI_ADJUST_BCAST\""],
                         capture_output=True, text=True, check=True).stdout
    assert out == env["I_MPI_ADJUST_BCAST"]


def test_the_family_claims_its_files(tmp_path: Path) -> None:
    f = tmp_path / "t.json"
    f.write_text(impi_tuning.render({"bcast": {4: Rules([(None, 1)])}}))
    assert registry.for_file(f).name == "impi"
    g = tmp_path / "t.env"
    g.write_text("export I_MPI_TUNING=/x/t.json\n")
    assert registry.for_file(g).name == "impi"


def test_a_kept_default_names_the_preset_seen_running_the_same_functions() -> None:
    from colltune.backends.impi.standin import rules

    a, b = frozenset({("MPIR_Bcast_intra_binomial", 1)}), frozenset({("X", 1)})
    prints = {0: {8: a, 64: b}, 1: {8: a, 64: a}, 3: {8: b, 64: b}}

    def d(size: int, cfg: Config) -> Decision:
        return Decision(size, size, cfg, None, None, None, None, False)

    r, why = rules("bcast", [d(8, DEFAULT), d(64, Config(3)), d(4096, DEFAULT)], prints)
    assert r is None and "4096 B" in why  # nothing seen at 4096 B: cannot be named
    prints[0][4096] = prints[1][4096] = a
    r, _ = rules("bcast", [d(8, DEFAULT), d(64, Config(3)), d(4096, DEFAULT)], prints)
    assert r is not None and [p for _, p in r.limits] == [1, 3, 1]
    # no preset runs what the default runs at 64 B: a fill (the sweep's fastest) stands in
    prints[0][64] = frozenset({("MPIDI_SHMGR_Release_bcast", 1)})
    r, _ = rules("bcast", [d(8, Config(3)), d(64, DEFAULT)], prints, fill=lambda s: 1)
    assert r is not None and [p for _, p in r.limits] == [3, 1]
    # a stand-in fresh launches found slower: none, and the reason names it
    r, why = rules("bcast", [d(8, Config(3)), d(64, DEFAULT)], prints, fill=lambda s: None,
                   unfilled=lambda s: "preset 1 (the sweep's fastest there) was slower")
    assert r is None and "at 64 B" in why and "preset 1 (the sweep's fastest" in why, why
    r, why = rules("bcast", [d(8, Config(3)), d(64, DEFAULT)], prints, fill=lambda s: None)
    assert r is None and "none was measured there" in why, why


def test_an_adjust_profile_is_written_merged_read_and_exported(tmp_path: Path) -> None:
    """--format impi-env: one profile of I_MPI_ADJUST_* variables at --out, merged with the
    variables it held for other collectives; read back (check, verify, export) as the
    rules it holds; never merged into a profile that names a tuning file."""
    from colltune.backends.impi.files import read_files, tuned_env, write_adjusts
    from colltune.errors import ColltuneError
    from colltune.outputs.export import export

    out = tmp_path / "impi.env"
    write_adjusts(out, {"reduce": {4: Rules([(None, 3)])}}, ["provenance"], [])
    written = write_adjusts(out, {"bcast": {4: Rules([(1024, 8), (None, 1)])}},
                            ["provenance"], ["a note"])
    prof = impi_env.parse(out.read_text())
    assert prof.settings == {"I_MPI_ADJUST_REDUCE": f"3:0-{impi_env.TOP}",
                             "I_MPI_ADJUST_BCAST": f"8:0-1024;1:1025-{impi_env.TOP}"}
    assert "note: a note" in prof.comments and written.what.endswith("I_MPI_ADJUST_* variables")
    layers, read, text = read_files(out)
    assert text is not None and impi_tuning.parse_layers(text) == layers
    assert list(layers) == [None]  # variables are for any ranks a node
    bcast = rules_for(layers[None], "bcast", 4)
    assert bcast is not None and [bcast.preset_at(s) for s in (8, 1024, 1025, 1 << 30)] == [
        8, 8, 1, 1]
    assert tuned_env(out, read) == prof.settings  # what verify's tuned arm sets
    done = export(out, tmp_path / "site")
    (installed,) = [p for p in done if p.path.name == "colltune-impi.env"]
    assert impi_env.parse(installed.text).settings == prof.settings
    assert not (tmp_path / "site" / "colltune-impi.json").exists()
    # the modules set the rule lists exactly, ';' and all, in the real interpreters
    from helpers import module_env
    modules = [p.path for p in done if "modulefiles" in p.path.parts]
    assert sorted(m.name for m in modules) == ["tuned", "tuned.lua"]
    for module in modules:
        assert module_env(module) == prof.settings, module
    sourced = subprocess.run(["bash", "-c", f". {installed.path} && printf %s "
                              "\"$I_MPI_ADJUST_BCAST\""], capture_output=True, text=True,
                             check=True).stdout
    assert sourced == prof.settings["I_MPI_ADJUST_BCAST"]

    named = tmp_path / "named.env"
    named.write_text("export I_MPI_TUNING=/x/t.json\n")
    with pytest.raises(ColltuneError, match="never holds both"):
        write_adjusts(named, {"bcast": {4: Rules([(None, 1)])}}, ["p"], [])
    assert named.read_text() == "export I_MPI_TUNING=/x/t.json\n"
    with pytest.raises(ColltuneError, match="tune one --np"):
        write_adjusts(tmp_path / "two.env", {"bcast": {2: Rules([(None, 1)]),
                                                       4: Rules([(None, 3)])}}, ["p"], [])
    with pytest.raises(ImpiFormatError, match="every process count"):
        impi_env.to_tuning({"I_MPI_ADJUST_BCAST": "1:0-100@1-4"})


def test_a_spliced_table_is_read_through_colltunes_record(tmp_path: Path) -> None:
    """A binary tuning table (--format impi-bin) is not text: `tune check` finds its family
    by its name, checks that it is a table, and reads the rules from colltune's record beside
    it; without the record it says which file to keep; a record with a gap, or a binary
    that is not a table, is refused, and neither is ever read as rules."""
    import sys

    from colltune.backends.impi.files import tuned_env
    from colltune.rules.impi_table import Node

    dat = tmp_path / "t.dat"
    leaf = Node(8, 0, 0, records=[(3, 0, 0, 0, 0), (3, 0, 0, 0, 0)])
    dat.write_bytes(impi_table.encode(Node(0, 4, 65536, [Node(4, 5, 7, [Node(5, 6, -1, [
        Node(6, 9, 4, [Node(9, 7, -1, [Node(7, 8, -1, [leaf])])])])])])))
    assert registry.for_file(dat).name == "impi"
    check = [sys.executable, "-m", "colltune.cli", "check", str(dat)]
    r = subprocess.run(check, capture_output=True, text=True, check=False)
    assert r.returncode == 2, r.stderr
    assert f"record of its rules beside it ({tmp_path / 't.rules'})" in r.stderr.replace(
        "\n", " ")
    t = {"bcast": {4: Rules([(1024, 8), (None, impi_tuning.LIBRARY)])}}
    # the table's path is written quoted: a newline in it starts no line of rules
    assert impi_table.parse_rules(impi_table.render_rules(
        {4: t}, "/a\nbcast 4 4 0 - 3\n")) == {4: t}
    (tmp_path / "t.rules").write_text(impi_table.render_rules({4: t}, str(dat)))
    # a table and its record, well formed: judged by its content against the installation
    # it is for (tests/test_untrusted_round3.py), nothing to judge without one
    r = subprocess.run(check, capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "without the Intel MPI it is for" in r.stderr, r.stderr
    assert tuned_env(dat, impi_env.ImpiProfile()) == {"I_MPI_TUNING_BIN": str(dat.resolve())}
    (tmp_path / "t.rules").write_text("bcast 4 4 0 1024 8\nbcast 4 4 2000 - library\n")
    r = subprocess.run(check, capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "without a gap" in r.stderr, r.stderr
    (tmp_path / "t.rules").write_text(impi_table.render_rules({4: t}, str(dat)))
    # a profile from elsewhere naming itself as the table is refused, not read again
    loop = tmp_path / "loop.env"
    loop.write_text(impi_env.render(impi_env.ImpiProfile([], {"I_MPI_TUNING_BIN": str(loop)})))
    r = subprocess.run([*check[:-1], str(loop)], capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "not a .dat tuning table" in r.stderr, r.stderr
    dat.write_bytes(b"\x78\x9c\x00\xff not a table")
    r = subprocess.run(check, capture_output=True, text=True, check=False)
    assert r.returncode == 2 and "not an Intel MPI binary tuning table" in r.stderr, r.stderr


def test_a_range_left_to_the_library_has_no_json_or_variable_form() -> None:
    """Only a spliced table can leave a range to Intel MPI's own entries: the JSON file and
    I_MPI_ADJUST_* refuse such rules instead of writing a preset id Intel MPI misreads
    (it took "Bcast=-1" as a five-part entry of its own)."""
    t = {"bcast": {4: Rules([(1024, 8), (None, impi_tuning.LIBRARY)])}}
    with pytest.raises(ImpiFormatError, match="only --format impi-bin"):
        impi_tuning.render(t)
    with pytest.raises(ImpiFormatError, match="only --format impi-bin"):
        impi_env.from_tuning(t)


def test_stand_in_candidates_off_the_sweep_come_from_its_neighbours() -> None:
    """A size measured only while locating a boundary ran two configurations: its
    candidates are the default's twins at the swept sizes either side, then their fastest;
    only those (and what ran there) are worth a probe, not every preset."""
    from colltune.backends.impi.standin import TRIES, candidates, ranked, swept, wanted
    from colltune.store.records import Measurement

    def m(preset: int, size: int, t: float) -> Measurement:
        return Measurement(Config(preset), size, "ok", 5, t, t, t, [t], "")

    ms = [m(p, s, t) for s, order in ((256, (5, 2, 9, 7)), (1024, (9, 7, 2, 5)))
          for t, p in enumerate(order, start=1)] + [m(0, 256, 9.0), m(0, 1024, 9.0),
                                                   m(5, 512, 1.0), m(0, 512, 2.0)]
    fp = frozenset({("MPIR_Bcast_intra_binomial", 1)})
    prints = {0: {256: fp, 512: fp, 1024: None}, 7: {256: fp}, 2: {256: None}}
    got = candidates(prints, ranked(ms), [256, 512, 1024])
    assert got[256] == [7, 5, 2]  # the twin, then the sweep's fastest there
    assert got[1024] == [9, 7, 2]  # no twin seen: the fastest
    assert got[512] == [7, 5, 9] and len(got[512]) == TRIES  # the twin either side first
    fast = {256: [5, 2, 9, 7], 1024: [9, 7, 2, 5], 512: [5]}
    assert wanted(prints, fast, swept(fast), 512) == {5, 2, 9, 7}


def test_the_tables_record_holds_a_layer_per_ranks_a_node() -> None:
    """colltune's record of a spliced table: rules for one comm size at two ppn, read back
    layer by layer; each layer's ranges checked apart (a gap in one is refused)."""
    two = {"bcast": {4: Rules([(1024, 8), (None, impi_tuning.LIBRARY)])}}
    four = {"bcast": {4: Rules([(None, 3)])}, "reduce": {8: Rules([(None, 1)])}}
    text = impi_table.render_rules({2: two, 4: four}, "/t.dat")
    assert impi_table.parse_rules(text) == {2: two, 4: four}
    with pytest.raises(impi_tuning.ImpiFormatError, match="without a gap"):
        impi_table.parse_rules("bcast 4 2 0 1024 8\nbcast 4 4 1025 - 3\n")
    with pytest.raises(impi_tuning.ImpiFormatError, match="does not fit"):
        impi_table.parse_rules("bcast 4 8 0 - 3\n")

"""Open MPI rules files: writer/reader round trip and everything Open MPI drops or misreads."""

from __future__ import annotations

import pytest

from colltune.outfile import write_atomic
from colltune.rules import ompi_classic as rules
from colltune.rules.ompi_classic import CommRule, MsgRule, RulesError, RulesFile

GOOD = """# comment
1  # one collective
11
1
4
3
0 1 0 0
1025 5 0 0
65537 2 4 8192
"""


def test_reads_a_valid_file() -> None:
    rf = rules.parse(GOOD)
    sec = rf.collectives[11][0]
    assert sec.comsize == 4
    assert [(r.msgsize, r.alg, r.faninout, r.segsize) for r in sec.rules] == [
        (0, 1, 0, 0), (1025, 5, 0, 0), (65537, 2, 4, 8192)]
    assert sec.rules[1].line == 8


@pytest.mark.parametrize("version", [1, 2])
def test_round_trip(version: int) -> None:
    rf = RulesFile(version=version, comments=["made by a test, with digits 123 in it"])
    rf.set_section(11, CommRule(4, [MsgRule(0, 1), MsgRule(2049, 5, 0, 1024, 8)]), ["note 42"])
    rf.set_section(11, CommRule(2, [MsgRule(0, 0)]))
    rf.set_section(0, CommRule(8, [MsgRule(0, 4)]))
    text = rules.render(rf)
    back = rules.parse(text)
    assert back.version == version
    assert sorted(back.collectives) == [0, 11]
    assert [s.comsize for s in back.collectives[11]] == [2, 4]
    r = back.collectives[11][1].rules[1]
    assert (r.msgsize, r.alg, r.segsize) == (2049, 5, 1024)
    assert r.maxreq == (8 if version == 2 else None)
    # the comments a merge writes again: the file's and each section's
    assert back.comments == rf.comments and back.notes == {(11, 4): ["note 42"]}
    if version == 2:
        assert text.startswith("rule-file-version-2")
    else:
        assert "rule-file-version" not in text


def _reject(text: str, line: int, words: str, **kw: object) -> None:
    with pytest.raises(RulesError) as e:
        rules.parse(text, "f.conf", **kw)  # type: ignore[arg-type]
    assert e.value.line == line, str(e.value)
    assert words in e.value.reason, str(e.value)
    assert str(e.value).startswith(f"f.conf:{line}:")


def test_rejects_first_rule_not_zero() -> None:
    _reject(GOOD.replace("0 1 0 0", "1 1 0 0"), 7, "first rule has message size 1")


def test_rejects_bad_counts_and_truncation() -> None:
    _reject(GOOD.replace("1  # one collective", "2  # two"), 9, "truncated")
    _reject(GOOD.replace("\n3\n", "\n4\n"), 9, "truncated")
    _reject(GOOD.replace("\n3\n", "\n2\n"), 9, "numbers after the last collective")
    _reject(GOOD[: GOOD.index("65537") + 8], 9, "truncated")
    _reject(GOOD.replace("65537 2 4 8192", "65537 2\n4 8192"), 9, "one line")


def test_rejects_stray_text_and_padding() -> None:
    _reject(GOOD.replace("1025 5", "1025 binomial5"), 8, "unexpected text 'binomial5'")
    _reject(GOOD.replace("1025 5", "01025 5"), 8, "zero-padded")
    _reject(GOOD.replace("1025 5", "0x401 5"), 8, "unexpected text")
    _reject(GOOD.replace("1025 5", "-1025 5"), 8, "unexpected text")


def test_rejects_misplaced_header_and_header_on_old_versions() -> None:
    _reject("# c\n" + "rule-file-version-2\n" + GOOD, 2, "very first bytes")
    _reject("[rule-file-version-2]\n" + GOOD, 1, "without brackets")
    v2 = "rule-file-version-2\n" + GOOD.replace("0 1 0 0", "0 1 0 0 4")
    assert rules.parse(v2).collectives[11][0].rules[0].maxreq == 4
    _reject(v2, 1, "not understood by this Open MPI", allow_v2=False)


def test_rejects_extra_column_without_header() -> None:
    _reject(GOOD.replace("0 1 0 0", "0 1 0 0 4"), 7, "5 numbers on a rule line")


def test_rejects_unsorted_sizes_unknown_ids_and_algorithms() -> None:
    _reject(GOOD.replace("65537", "1000"), 9, "must ascend")
    _reject(GOOD.replace("\n11\n", "\n10\n"), 3, "gatherv")
    _reject(GOOD.replace("1  # one collective", "23"), 2, "at most 22")
    _reject(GOOD, 9, "algorithm 2 does not exist", valid_algs=lambda cid: {1, 5})


def test_lookup_follows_open_mpi() -> None:
    rf = RulesFile()
    rf.set_section(11, CommRule(4, [MsgRule(0, 1), MsgRule(1025, 5)]))
    rf.set_section(11, CommRule(16, [MsgRule(0, 3)]))
    assert rules.lookup(rf, 11, 2, 10)[1].alg == 1  # first section serves smaller comms
    assert rules.lookup(rf, 11, 8, 1024)[1].alg == 1
    assert rules.lookup(rf, 11, 8, 1025)[1].alg == 5
    assert rules.lookup(rf, 11, 64, 10)[1].alg == 3
    assert rules.lookup(rf, 7, 4, 10) is None


def test_write_atomic_keeps_old_file_on_failure(tmp_path) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "r.conf"
    write_atomic(p, GOOD)

    with pytest.raises(TypeError):
        write_atomic(p, 123)  # type: ignore[arg-type]
    assert p.read_text() == GOOD
    assert [x.name for x in tmp_path.iterdir()] == ["r.conf"]


def test_verify_warns_of_a_classic_file_tuned_in_another_layout() -> None:
    """A classic file cannot say its layout but its comments do: verified in another
    layout than it was tuned in (a file of tune --layouts run in the other), verify says
    so before it launches anything."""
    from colltune.backends.openmpi.backend import other_layouts
    from colltune.backends.openmpi.tuned_rules import tuned_for
    from colltune.slots import Placement

    text = "1\n7\n1\n# " + tuned_for("bcast", 4, 1, 4) + "\n4\n1\n0 0 0 0\n"
    same, other = Placement(4, False, None, 1, 4), Placement(4, False, "h", 2, 2)
    assert other_layouts(text, same) == []
    (said,) = other_layouts(text, other)
    assert "bcast at 4 ranks was tuned on 1 node(s) x 4; this job runs 2 node(s) x 2" in said
    assert other_layouts(text, Placement(8, False, "h", 2, 4)) == []  # another section size


def test_a_kept_comment_stays_a_comment() -> None:
    """A merge writes a section's comment lines again (the file may be another user's): a
    carriage return or form feed in one never starts a line of numbers Open MPI reads."""
    text = GOOD.replace("4\n3\n", "# kept\r1 1\x0c2 2\n4\n3\n")
    rf = rules.parse(text)
    assert rf.notes == {(11, 4): ["kept\r1 1\x0c2 2"]}
    again = rules.render(rf)
    assert "# kept 1 1\x0c2 2\n" in again
    back = rules.parse(again)
    assert back.collectives == rf.collectives and back.notes == {(11, 4): ["kept 1 1\x0c2 2"]}

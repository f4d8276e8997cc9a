"""A rules file never changes the algorithm at a communicator size it has no evidence for:
Open MPI applies the first comm-size section to every smaller communicator, so a file
tuned above 2 ranks starts with an all-default section; `tune check` warns about files
whose sections decide sizes far from their own."""

from __future__ import annotations

from pathlib import Path

import pytest

from colltune.backends.openmpi.applied import forced, under_rules
from colltune.backends.openmpi.install import OpenMPI, builtin_catalog, read_catalog
from colltune.backends.openmpi.tuned_rules import build_rules
from colltune.collectives import get_collective
from colltune.core.catalog import SEG
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.outfile import write_atomic
from colltune.rules import ompi_classic as rules
from colltune.rules.ompi_classic import COLLTYPE, lookup_size
from helpers import tune_cli

REDUCE = get_collective("reduce")
PIPELINE = Config.of(3, {SEG: 1024})  # traffic unlike the default's at 2 and 3 ranks (64 KiB)


def _file(mpi: OpenMPI, np: int, cfg: Config, catalog: object) -> rules.RulesFile:
    d = Decision(65536, lookup_size(REDUCE, 65536, np), cfg, cfg, 1.0, 2.0, 0.0, True)
    return build_rules(None, 1, {"reduce": {np: [d]}}, mpi, catalog)  # type: ignore[arg-type]


def test_sections_served_and_the_leading_default(tmp_path: Path) -> None:
    mpi = OpenMPI("4.1.4", Path("/usr"), Path("/usr/bin/mpicc"), Path("/usr/bin/mpirun"),
                  Path("/usr/bin/ompi_info"))
    rf = _file(mpi, 4, PIPELINE, builtin_catalog())
    secs = rf.collectives[COLLTYPE[REDUCE.name]]
    assert [(s.comsize, [(r.msgsize, r.alg) for r in s.rules]) for s in secs] == [
        (1, [(0, 0)]), (4, [(0, 3)])]
    assert [(lo, hi) for _, lo, hi in rules.served(secs)] == [(1, 3), (4, None)]
    text = rules.render(rf)
    assert "serves communicators of 4 to any number of ranks" in text
    assert rules.coverage_warnings(rf) == []
    # tuned at 2: nothing below it to protect
    assert [s.comsize for s in _file(mpi, 2, PIPELINE, builtin_catalog()).collectives[
        COLLTYPE[REDUCE.name]]] == [2]
    # a hand-written file tuned at 8 and 64 only: both warnings, from `tune check` too
    hand = tmp_path / "hand.conf"
    hand.write_text("1\n11\n2\n8\n1\n0 3 0 1024\n64\n1\n0 3 0 1024\n")
    r = tune_cli("check", str(hand))
    assert r.returncode == 0, r.stderr
    assert "decides communicators of 1 to 7 ranks" in r.stderr
    assert "decides up to 63 ranks, more than twice its size" in r.stderr
    ours = tmp_path / "ours.conf"
    ours.write_text(text)
    assert "warning" not in tune_cli("check", str(ours)).stderr


@pytest.mark.mpi
def test_a_file_tuned_at_4_ranks_leaves_2_and_3_ranks_to_open_mpi(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    cat = read_catalog(ompi41)
    out = tmp_path / "r.conf"
    write_atomic(out, rules.render(_file(ompi41, 4, PIPELINE, cat)))
    for np in (2, 3):
        got = under_rules(ompi41, REDUCE, np, 65536, out)
        assert got == forced(ompi41, REDUCE, np, 65536, DEFAULT, cat), np
        assert got != forced(ompi41, REDUCE, np, 65536, PIPELINE, cat), np
    assert under_rules(ompi41, REDUCE, 4, 65536, out) == forced(ompi41, REDUCE, 4, 65536,
                                                                PIPELINE, cat)
    # without the leading section, the 4-rank section decides 3 ranks too (why it exists)
    bare = _file(ompi41, 4, PIPELINE, cat)
    bare.collectives[COLLTYPE[REDUCE.name]] = bare.collectives[COLLTYPE[REDUCE.name]][1:]
    write_atomic(out, rules.render(bare))
    assert under_rules(ompi41, REDUCE, 3, 65536, out) == forced(ompi41, REDUCE, 3, 65536,
                                                                PIPELINE, cat)


LINEAR = Config.of(1, {})


def _two(mpi: OpenMPI, at2: Config, at4: Config, catalog: object) -> rules.RulesFile:
    """A file tuned at 2 and 4 ranks (65536 B), nothing measured at 3."""
    ds = {np: [Decision(65536, lookup_size(REDUCE, 65536, np), cfg, cfg, 1.0, 2.0, 0.0, True)]
          for np, cfg in ((2, at2), (4, at4))}
    return build_rules(None, 1, {"reduce": ds}, mpi, catalog)  # type: ignore[arg-type]


def test_a_size_between_two_measured_runs_what_both_agree_on() -> None:
    """Issue 84, item 4: a communicator size between two measured ones gets a section of
    its own, what both run where they agree and the library's own decision where they
    part (rules.agreed), said in the file; nothing between: no section."""
    mpi = OpenMPI("4.1.4", Path("/usr"), Path("/usr/bin/mpicc"), Path("/usr/bin/mpirun"),
                  Path("/usr/bin/ompi_info"))
    cid = COLLTYPE[REDUCE.name]
    for at4, between in ((PIPELINE, [(0, 3, 1024)]), (LINEAR, [(0, 0, 0)])):
        rf = _two(mpi, PIPELINE, at4, builtin_catalog())
        got = [(s.comsize, [(r.msgsize, r.alg, r.segsize) for r in s.rules])
               for s in rf.collectives[cid]]
        assert got == [(2, [(0, 3, 1024)]), (3, between),
                       (4, [(0, at4.algorithm, 1024 if at4 == PIPELINE else 0)])], got
        text = rules.render(rf)
        assert "reduce between 2 and 3 ranks" not in text
        assert "reduce between 2 and 4 ranks: measured at neither" in text
        assert "serves communicators of 3 to 3 ranks" in text
        assert rules.parse(text).collectives[cid][1].comsize == 3  # Open MPI's grammar
    # tuned again into the same file: the section between follows the new choices (an
    # earlier agreement kept would run pipeline at 3 ranks, which 4's choice now refutes)
    again = _two(mpi, PIPELINE, PIPELINE, builtin_catalog())
    again = build_rules(again, 1, {"reduce": {
        np: [Decision(65536, lookup_size(REDUCE, 65536, np), cfg, cfg, 1.0, 2.0, 0.0, True)]
        for np, cfg in ((2, PIPELINE), (4, LINEAR))}}, mpi, builtin_catalog())
    assert [(r.msgsize, r.alg) for r in again.collectives[cid][1].rules] == [(0, 0)]
    # the section's rules, message size by message size: each part where the two differ
    lo = rules.CommRule(2, [rules.MsgRule(0, 3, 0, 1024), rules.MsgRule(4096, 1),
                            rules.MsgRule(65536, 2)])
    hi = rules.CommRule(8, [rules.MsgRule(0, 3, 0, 1024), rules.MsgRule(8192, 1)])
    assert [(r.msgsize, r.alg) for r in rules.agreed(lo, hi, 3).rules] == [
        (0, 3), (4096, 0), (8192, 1), (65536, 0)]


@pytest.mark.mpi
def test_open_mpi_runs_the_section_between_two_measured_sizes(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    """What Open MPI 4.1 ran at 3 ranks (its traffic) under a file tuned at 2 and 4: the
    choice both made, or its own where they part."""
    cat = read_catalog(ompi41)
    out = tmp_path / "r.conf"
    write_atomic(out, rules.render(_two(ompi41, PIPELINE, PIPELINE, cat)))
    assert under_rules(ompi41, REDUCE, 3, 65536, out) == forced(ompi41, REDUCE, 3, 65536,
                                                                PIPELINE, cat)
    write_atomic(out, rules.render(_two(ompi41, PIPELINE, LINEAR, cat)))
    got = under_rules(ompi41, REDUCE, 3, 65536, out)
    assert got == forced(ompi41, REDUCE, 3, 65536, DEFAULT, cat)
    assert got != forced(ompi41, REDUCE, 3, 65536, PIPELINE, cat)


def test_a_merge_keeps_each_kept_sections_notes() -> None:
    """A section kept from the file merged into keeps what colltune said of it there (the
    reader returns a section's comment lines), with what it serves now; a hand-written
    file's section, which has none, says that its notes are not known."""
    mpi = OpenMPI("4.1.4", Path("/usr"), Path("/usr/bin/mpicc"), Path("/usr/bin/mpirun"),
                  Path("/usr/bin/ompi_info"))
    at4 = {"reduce": {4: [Decision(65536, lookup_size(REDUCE, 65536, 4), PIPELINE, PIPELINE,
                                   1.0, 2.0, 0.0, True)]}}
    first = rules.render(_file(mpi, 8, LINEAR, builtin_catalog()))
    assert "serves communicators of 8 to any number of ranks: measured at 8" in first
    merged = rules.render(build_rules(rules.parse(first), 1, at4, mpi, builtin_catalog()))
    eight = merged[merged.index("# reduce at 8 ranks, "):]
    assert eight.index("#   65536 B per rank (lookup 65536)") < eight.index("8  # comm")
    assert ("# serves communicators of 8 to any number of ranks: kept from the file this "
            "run merged into\n") in eight
    assert "communicators of fewer than 4 ranks" in merged  # said afresh, not "8"
    assert "fewer than 8" not in merged and merged.count("# serves") == 3
    assert rules.render(build_rules(rules.parse(merged), 1, at4, mpi, builtin_catalog())
                        ).count("# serves") == 3  # merged again: nothing said twice
    hand = build_rules(rules.parse("1\n11\n1\n8\n1\n0 3 0 1024\n"), 1, at4, mpi,
                       builtin_catalog())
    assert ("# reduce at 8 ranks: kept from the file this run merged into (its notes there "
            "are not carried over)\n# serves communicators of 8 to any number of ranks\n"
            ) in rules.render(hand)

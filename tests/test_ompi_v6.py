"""Issue 62, its first question: Open MPI 6 (v6.0.x and main since e973840e2b) reads a
classic file's communicator-size sections as ranges below each section's size; 4.1 and 5.0
take the last section at or below the size. No Open MPI 6 runs here: the logic is tested
as read from its source (coll_tuned_dynamic_file.c, ompi_coll_tuned_get_com_rule_ptr;
docs/openmpi.md), and `tune check --ompi-version 6` says where a file changes meaning."""

from __future__ import annotations

from pathlib import Path

from colltune.rules.ompi_classic import CommRule, MsgRule, parse, served
from colltune.rules.ompi_v6 import served_v6, v6_warnings
from helpers import tune_cli


def _sections(*sizes: int) -> list[CommRule]:
    return [CommRule(n, [MsgRule(0, 1)]) for n in sizes]


def _lookup(ranges: list[tuple[CommRule, int, int | None]], size: int) -> int | None:
    """The section a communicator of `size` ranks runs (its COMSIZE): the first range
    holding it, as Open MPI 6's lookup takes it."""
    return next((sec.comsize for sec, lo, hi in ranges
                 if lo <= size and (hi is None or size <= hi)), None)


def test_sections_become_ranges_below_each_size() -> None:
    v6 = served_v6(_sections(2, 4, 8))
    assert [(s.comsize, lo, hi) for s, lo, hi in v6] == [(2, 0, 1), (4, 2, 3), (8, 4, None)]
    # `--np 2,4`: 4.1 and 5.0 run the 2-rank rules at 2 and 3 ranks, 6 the 4-rank ones
    two_four = _sections(2, 4)
    assert [_lookup(served(two_four), n) for n in (2, 3, 4, 9)] == [2, 2, 4, 4]
    assert [_lookup(served_v6(two_four), n) for n in (1, 2, 3, 4, 9)] == [2, 4, 4, 4, 4]
    # a lone section serves every size in both
    assert [_lookup(served_v6(_sections(4)), n) for n in (1, 3, 4, 64)] == [4, 4, 4, 4]
    # colltune's all-default section at 1 (before a first section above 2) covers nothing
    # on 6: a file tuned at 4 ranks runs its 4-rank rules at 2 and 3 ranks there again
    assert [_lookup(served_v6(_sections(1, 4)), n) for n in (1, 2, 3)] == [4, 4, 4]


def test_check_for_open_mpi_6_says_where_a_file_changes_meaning(tmp_path: Path) -> None:
    f = tmp_path / "two-sections.conf"
    f.write_text("1\n2\n2\n2\n1\n0 1 0 0\n4\n1\n0 3 0 0\n")  # allreduce at 2 and 4 ranks
    assert len(v6_warnings(parse(f.read_text()))) == 2
    six = tune_cli("check", str(f), "--ompi-version", "6.0.0")
    assert six.returncode == 0, six.stderr
    assert ("Open MPI 6 applies the section for 4 rank(s) to communicators of 2 rank(s) "
            "and more (4.1 and 5.0: communicators of 4 rank(s) and more)") in six.stderr
    five = tune_cli("check", str(f), "--ompi-version", "5.0.7")
    assert five.returncode == 0 and "Open MPI 6" not in five.stderr
    lone = tmp_path / "one.conf"
    lone.write_text("1\n2\n1\n4\n1\n0 3 0 0\n")
    assert "Open MPI 6" not in tune_cli("check", str(lone), "--ompi-version", "6").stderr

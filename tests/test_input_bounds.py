"""Numbers a library would misread are refused where they enter: rules files (Open MPI
reads longs and keeps most of them in ints), OSU files, and command-line sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from colltune.errors import FormatError
from colltune.osu_output import parse as parse_osu
from colltune.rules import ompi_classic as rules
from helpers import tune_cli

# one reduce section at communicator size CS: algorithm ALG, fan in/out FAN, segment SEG
TEMPLATE = "1\n11\n1\n{cs}\n1\n0 {alg} {fan} {seg}\n"


@pytest.mark.parametrize("field,value,why", [
    ("cs", 2**70, "larger than Open MPI's long"),
    ("cs", 4294967297, "in an int"),
    ("cs", 0, "at least 1 rank"),
    ("alg", 2**31, "in an int"),
    ("fan", 2**40, "in an int"),
    ("seg", 2**64, "larger than Open MPI's long"),
])
def test_rules_numbers_open_mpi_would_misread_are_refused(field: str, value: int,
                                                         why: str) -> None:
    values = {"cs": 4, "alg": 1, "fan": 0, "seg": 0, field: value}
    with pytest.raises(rules.RulesError, match=why):
        rules.parse(TEMPLATE.format(**values))


def test_large_but_valid_numbers_stay_accepted() -> None:
    rf = rules.parse(TEMPLATE.format(cs=2**31 - 1, alg=1, fan=0, seg=2**40))
    assert rf.collectives[11][0].comsize == 2**31 - 1
    assert rf.collectives[11][0].rules[0].segsize == 2**40


@pytest.mark.parametrize("cell", ["1_0.0", "nan", "1e3", "inf", "-1.0"])
def test_osu_latencies_are_read_as_osu_prints_them(cell: str) -> None:
    text = ("# OSU MPI Reduce Latency Test v7.3\n# Size       Avg Latency(us)\n"
            f"4            {cell}\n")
    with pytest.raises(FormatError, match="not a number as OSU prints one"):
        parse_osu(text)
    assert parse_osu(text.replace(cell, "10.25")).rows[0].avg_us == 10.25


def test_out_of_range_communicator_sizes_on_the_command_line(tmp_path: Path) -> None:
    f = tmp_path / "r.conf"
    f.write_text(TEMPLATE.format(cs=4, alg=1, fan=0, seg=0))
    r = tune_cli("explain", str(f), "-c", "reduce", "--np", "-5", "--size", "8")
    assert r.returncode == 2 and "--np -5" in r.stderr and "Traceback" not in r.stderr
    osu = tmp_path / "reduce_alg1.txt"
    osu.write_text("# OSU MPI Reduce Latency Test v7.3\n# Size       Avg Latency(us)\n"
                   "4            10.25\n")
    for np in ("4294967297", "99999999999999999999"):
        r = tune_cli("import-osu", str(osu), "--np", np, "--db", str(tmp_path / "s.db"))
        assert r.returncode == 2 and "Traceback" not in r.stderr, (np, r.stderr)
        assert "ranks" in r.stderr

"""Numbers a library would misread are refused where they enter: rules files (Open MPI
reads longs and keeps most of them in ints), OSU files, and command-line sizes."""

from __future__ import annotations

from pathlib import Path

import pytest

from colltune.errors import FormatError
from colltune.osu.osu_output import parse as parse_osu
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


@pytest.mark.parametrize("column,value", [
    ("samples", "'not json'"), ("config_key", "'bogus'"), ("samples", "'[\"a\", 1]'"),
    ("size", "'four'"), ("series", "'[1]'"), ("median", "'fast'"),
])
def test_a_damaged_store_row_is_an_error_not_a_traceback(tmp_path: Path, column: str,
                                                         value: str) -> None:
    import sqlite3

    from colltune.core.config import DEFAULT
    from colltune.core.records import PointResult
    from colltune.store import Context, Store

    db = tmp_path / "s.db"
    store = Store(db)
    ctx = Context("openmpi-4.1.4@/usr", "Open MPI", "4.1.4", "/usr", "h", 4, 4, 1, "reduce")
    store.add(ctx, DEFAULT, PointResult(0, 64, "ok", 3, 1e-5, samples=[1e-5] * 3), "mpit")
    store.close()
    con = sqlite3.connect(db)
    con.execute(f"UPDATE measurements SET {column} = {value}")  # noqa: S608 (test values)
    con.commit()
    con.close()
    for cmd in (["show"], ["report", "--out", str(tmp_path / "rep")]):
        r = tune_cli(*cmd, "--db", str(db))
        # 4: a store problem (exit codes: README)
        assert r.returncode == 4 and "Traceback" not in r.stderr, (cmd, r.stderr)
        assert "is malformed" in r.stderr and "another --db" in r.stderr, (cmd, r.stderr)


def test_binary_and_foreign_inputs_of_report_and_app_are_one_line_errors(tmp_path: Path
                                                                          ) -> None:
    binary = tmp_path / "bin.dat"
    binary.write_bytes(bytes(range(256)) * 8)
    r = tune_cli("report", "--out", str(tmp_path / "rep"), "--rules", str(binary),
                 "--profile", str(binary))
    assert r.returncode == 2 and "not UTF-8 text" in r.stderr and "Traceback" not in r.stderr
    newer = tmp_path / "newer.json"
    newer.write_text('{"schema": "colltune-profile", "version": 99}')
    for bad, why in ((binary, "not UTF-8 text"), (newer, "reads up to 2"),
                     (tmp_path / "missing.json", "cannot read the profile")):
        r = tune_cli("app", str(bad))
        assert r.returncode == 2 and why in r.stderr, r.stderr
        assert "Traceback" not in r.stderr

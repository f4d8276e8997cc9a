"""The IMB-MPI1 reader on output recorded from Intel MPI 2021.18.1's own IMB (np 2: Bcast,
Reduce, Barrier), and on what another user's file may hold instead."""

from __future__ import annotations

from pathlib import Path

import pytest

from colltune.osu.imb_output import ImbError, parse, table

DATA = Path(__file__).parent / "data" / "imb-2021.18.1-np2.txt"


def test_recorded_imb_output_is_read() -> None:
    tables = parse(DATA.read_text())
    assert [(t.benchmark, t.processes) for t in tables] == [
        ("Bcast", 2), ("Reduce", 2), ("Barrier", 2)]
    bcast = table(tables, "bcast", 2)
    assert bcast is not None and sorted(bcast.avg_us()) == [8, 16, 32, 64]
    assert all(r["#repetitions"] == 50 for r in bcast.rows)
    assert all(r["t_min[usec]"] <= r["t_avg[usec]"] <= r["t_max[usec]"] for r in bcast.rows)
    barrier = table(tables, "Barrier", 2)
    assert barrier is not None and barrier.avg_us() == {} and len(barrier.rows) == 1
    assert table(tables, "bcast", 4) is None


@pytest.mark.parametrize("row", ["8 50 1.0 nan 1.0", "8 50 1.0 inf 1.0", "8 50 -1 2 3",
                                 "8.5 50 1 2 3",
                                 # issue 61, finding 7: an OverflowError, and 16 read from 1_6
                                 "1e30 50 1 2 3", "1_6 50 1 2 3", "16 50 1_0 2 3"])
def test_impossible_rows_are_refused(row: str) -> None:
    text = DATA.read_text().replace("            8           50", row + " #", 1)
    head = ("# Benchmarking Bcast\n# #processes = 2\n"
            "       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]\n")
    with pytest.raises(ImbError):
        parse(head + row + "\n")
    assert parse(text)  # the recorded file itself stays readable


def test_what_is_not_a_table_row_is_skipped() -> None:
    text = ("# Benchmarking Bcast\n# #processes = 2\n"
            "       #bytes #repetitions  t_min[usec]  t_max[usec]  t_avg[usec]\n"
            "            8           50         1.93         2.62         2.28\n"
            "<script>alert(1)</script>\n16 50 1 2\n")
    (t,) = parse(text)
    assert t.avg_us() == {8: 2.28}
    # digits of another script are not a size (float() would read this row as 16 B)
    (t,) = parse(text.replace("<script>", "\u0661\u0666 50 1 2 3\n<script>"))
    assert t.avg_us() == {8: 2.28}


def test_runs_to_import_are_the_tables_at_np_and_a_forced_file_holds_one(tmp_path: Path
                                                                        ) -> None:
    """`tune import-imb` reads the recorded file: at --np 2 every collective table of a
    default run; a file forced to a preset may hold one benchmark only (the others in it
    ran their defaults); another --np names what the file holds."""
    from colltune.errors import ColltuneError
    from colltune.osu.imb_import import imb_runs

    default = tmp_path / "imb_default.txt"
    default.write_text(DATA.read_text())
    runs = imb_runs([default], 2)
    assert [(r.collective, sorted(r.avg_us), r.algorithm) for r in runs] == [
        ("bcast", [8, 16, 32, 64], 0), ("reduce", [8, 16, 32, 64], 0), ("barrier", [0], 0)]
    assert runs[0].avg_us == table(parse(DATA.read_text()), "Bcast", 2).avg_us()  # type: ignore[union-attr]
    forced = tmp_path / "imb_alg3.txt"
    forced.write_text(DATA.read_text())
    with pytest.raises(ColltuneError, match="holds Bcast, Reduce, Barrier"):
        imb_runs([forced], 2)
    with pytest.raises(ColltuneError, match=r"at 4 processes \(it holds Barrier at 2"):
        imb_runs([default], 4)
    unnamed = tmp_path / "imb.txt"
    unnamed.write_text(DATA.read_text())
    with pytest.raises(ColltuneError, match="--algorithm"):
        imb_runs([unnamed], 2)
    assert [r.algorithm for r in imb_runs([unnamed], 2, algorithm=0)] == [0, 0, 0]

"""`tune import-osu`: OSU files written here in OSU's own format (plain and -f) become the
expected decisions, with OSU's per-rank sizes converted to what Open MPI compares."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from colltune.backends.openmpi.install import OpenMPI
from colltune.osu.osu_import import algorithm_from_name
from colltune.rules import ompi_classic as rules
from colltune.rules.ompi_classic import COLLTYPE
from helpers import tune_cli


def _osu(path: Path, title: str, rows: dict[int, float], full: bool) -> Path:
    head = "# Size       Avg Latency(us)"
    if full:
        head += "   Min Latency(us)   Max Latency(us)  Iterations"
    lines = [f"# OSU MPI {title} Latency Test v7.3", "# Datatype: MPI_CHAR.", head]
    for size, avg in rows.items():
        cells = f"{size:<10}{avg:>18.2f}"
        if full:
            cells += f"{avg * 0.9:>18.2f}{avg * 1.2:>18.2f}{1000:>12}"
        lines.append(cells)
    path.write_text("\n".join(lines) + "\n")
    return path


def test_repeated_runs_decide_per_size_in_lookup_units(ompi41: OpenMPI, tmp_path: Path
                                                      ) -> None:
    files = []
    # allgather at 4 ranks: ring (4) loses at 512 B per rank, wins clearly from 1 KiB
    for i, jitter in enumerate((1.0, 1.02, 0.99)):
        files.append(_osu(tmp_path / f"allgather_default_{i}.txt", "Allgather",
                          {512: 10 * jitter, 1024: 20 * jitter, 4096: 60 * jitter}, i == 0))
        files.append(_osu(tmp_path / f"allgather_alg4_{i}.txt", "Allgather",
                          {512: 12 * jitter, 1024: 14 * jitter, 4096: 40 * jitter}, i == 1))
    out, summary = tmp_path / "rules.conf", tmp_path / "s.json"
    r = tune_cli("import-osu", *map(str, files), "--np", "4", "--mpi", str(ompi41.prefix),
                 "--db", str(tmp_path / "db.sqlite"), "--out", str(out), "--summary-json",
                 str(summary))
    assert r.returncode == 0, r.stderr
    doc = json.loads(summary.read_text())
    ds = doc["collectives"]["allgather"]["4"]
    assert [(d["size"], d["lookup_size"], d["chosen"]["algorithm"]) for d in ds] == [
        (512, 2048, 0), (1024, 4096, 4), (4096, 16384, 4)]
    assert all("Welch" in d["reason"] for d in ds if d["chosen"]["algorithm"] == 4)
    rf = rules.read(out)
    cid = COLLTYPE["allgather"]

    def alg(lookup: int) -> int:
        hit = rules.lookup(rf, cid, 4, lookup)
        assert hit is not None
        return hit[1].alg

    # Open MPI compares total bytes for allgather: 1 KiB per rank is 4 KiB here
    assert (alg(2048), alg(4096), alg(16384)) == (0, 4, 4)
    assert alg(1024) == 0, "per-rank sizes were written unconverted"
    with sqlite3.connect(tmp_path / "db.sqlite") as c:
        stored = c.execute("SELECT algorithm, size, n, sweep FROM measurements "
                           "ORDER BY algorithm, size").fetchall()
    assert stored == [(0, 512, 3, "osu"), (0, 1024, 3, "osu"), (0, 4096, 3, "osu"),
                      (4, 512, 3, "osu"), (4, 1024, 3, "osu"), (4, 4096, 3, "osu")]


def test_single_runs_need_a_clear_margin(ompi41: OpenMPI, tmp_path: Path) -> None:
    files = [_osu(tmp_path / "reduce-default.out", "Reduce", {8: 10.0, 65536: 100.0}, True),
             _osu(tmp_path / "reduce.alg=2.out", "Reduce", {8: 8.0, 65536: 97.0}, False),
             _osu(tmp_path / "reduce.alg=3.out", "Reduce", {8: 9.5, 65536: 120.0}, False)]
    summary = tmp_path / "s.json"
    r = tune_cli("import-osu", *map(str, files), "--np", "4", "--mpi", str(ompi41.prefix),
                 "--db", str(tmp_path / "db.sqlite"), "--summary-json", str(summary), "-q")
    assert r.returncode == 0, r.stderr
    ds = json.loads(summary.read_text())["collectives"]["reduce"]["4"]
    # reduce compares the block itself: lookup == OSU's size
    assert [(d["size"], d["lookup_size"], d["chosen"]["algorithm"]) for d in ds] == [
        (8, 8, 2), (65536, 65536, 0)]
    assert "one OSU run" in ds[0]["reason"] and "10%" in ds[1]["reason"]


def test_import_errors_name_the_file(ompi41: OpenMPI, tmp_path: Path) -> None:
    ok = _osu(tmp_path / "bcast_default.txt", "Broadcast", {8: 5.0}, False)
    unnamed = _osu(tmp_path / "bcast_run.txt", "Broadcast", {8: 5.0}, False)
    r = tune_cli("import-osu", str(ok), str(unnamed), "--np", "4", "--mpi", str(ompi41.prefix),
                 "--db", str(tmp_path / "db.sqlite"))
    assert r.returncode == 2 and "bcast_run.txt" in r.stderr and "--algorithm" in r.stderr
    bogus = _osu(tmp_path / "bcast_alg99.txt", "Broadcast", {8: 5.0}, False)
    r = tune_cli("import-osu", str(bogus), "--np", "4", "--mpi", str(ompi41.prefix),
                 "--db", str(tmp_path / "db.sqlite"))
    assert r.returncode == 2 and "no algorithm 99" in r.stderr
    broken = tmp_path / "bcast_alg1.txt"
    broken.write_text(ok.read_text() + "16 oops\n")
    r = tune_cli("import-osu", str(broken), "--np", "4", "--mpi", str(ompi41.prefix),
                 "--db", str(tmp_path / "db.sqlite"))
    assert r.returncode == 2 and f"{broken}:5:" in r.stderr and "what to do" in r.stderr


def test_algorithm_from_file_name() -> None:
    assert [algorithm_from_name(Path(n)) for n in (
        "reduce_alg3.txt", "osu_bcast.algorithm-6.out", "x.alg=2", "default.txt",
        "run-default-2.log", "reduce.txt", "galgo5.txt")] == [3, 6, 2, 0, 0, None, None]


def test_a_corrected_reimport_replaces_and_a_failed_one_writes_nothing(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    db, out = tmp_path / "db.sqlite", tmp_path / "rules.conf"
    first = _osu(tmp_path / "reduce_default.txt", "Reduce", {8: 50.0}, False)
    common = ["--np", "4", "--mpi", str(ompi41.prefix), "--db", str(db), "-q"]
    assert tune_cli("import-osu", str(first), *common).returncode == 0
    fixed = _osu(tmp_path / "reduce_default.txt", "Reduce", {8: 5.0}, False)  # a typo fixed
    summary = tmp_path / "s.json"
    r = tune_cli("import-osu", str(fixed), *common, "--summary-json", str(summary))
    assert r.returncode == 0, r.stderr
    assert json.loads(summary.read_text())["replaced_points"] == 1

    def stored() -> list[tuple[int, int, float]]:
        with sqlite3.connect(db) as c:
            return [(s, n, round(json.loads(x)[0] * 1e6, 6)) for s, n, x in
                    c.execute("SELECT size, n, samples FROM measurements").fetchall()]

    assert stored() == [(8, 1, 5.0)]  # the corrected value, not the first import's
    out.write_text("not a rules file\n")  # the merge will fail
    later = _osu(tmp_path / "reduce_alg2.txt", "Reduce", {8: 4.0}, False)
    r = tune_cli("import-osu", str(later), *common, "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert stored() == [(8, 1, 5.0)]  # nothing of the failed import was stored


def test_an_import_never_replaces_what_colltune_measured(ompi41: OpenMPI,
                                                         tmp_path: Path) -> None:
    import socket

    from colltune.core.config import DEFAULT
    from colltune.core.records import PointResult
    from colltune.store import Context, Store

    db = tmp_path / "db.sqlite"
    st = Store(db)
    ctx = Context(ompi41.key, ompi41.name, ompi41.version, str(ompi41.prefix),
                  socket.gethostname(), 4, 4, 1, "reduce", "openmpi")
    st.add(ctx, DEFAULT, PointResult(0, 8, "ok", 3, 2e-6, samples=[2e-6] * 3), "mpit")
    st.close()
    osu = _osu(tmp_path / "reduce_default.txt", "Reduce", {8: 5.0, 16: 6.0}, False)
    r = tune_cli("import-osu", str(osu), "--np", "4", "--mpi", str(ompi41.prefix), "--db",
                 str(db), "-q")
    assert r.returncode == 4 and "does not replace what colltune measured" in r.stderr
    with sqlite3.connect(db) as c:  # not even the 16 B point, which was new
        assert c.execute("SELECT size, sweep FROM measurements").fetchall() == [(8, "mpit")]


def test_dash_writes_the_summary_to_standard_output_alone(ompi41: OpenMPI,
                                                          tmp_path: Path) -> None:
    """`--summary-json -`: standard output is the JSON and nothing else (tables, if any,
    go to standard error), as with the tools users know."""
    osu = _osu(tmp_path / "reduce_default.txt", "Reduce", {8: 5.0}, False)
    r = tune_cli("import-osu", str(osu), "--np", "4", "--mpi", str(ompi41.prefix), "--db",
                 str(tmp_path / "db.sqlite"), "--summary-json", "-")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["collectives"]["reduce"]["4"][0]["size"] == 8
    assert not (tmp_path / "-").exists()


def _validated(path: Path, title: str, rows: dict[int, tuple[float, str]]) -> Path:
    lines = [f"# OSU MPI {title} Latency Test v7.3", "# Datatype: MPI_CHAR.",
             "# Size       Avg Latency(us)        Validation"]
    lines += [f"{size:<10}{avg:>18.2f}{ok:>18}" for size, (avg, ok) in rows.items()]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_validation_column_v_collectives_and_the_runs_host(ompi41: OpenMPI,
                                                           tmp_path: Path) -> None:
    """OSU's -c column (a failed validation refuses the file, naming the line), the
    v-collectives colltune tunes, and --host for runs made on a cluster node."""
    db = tmp_path / "db.sqlite"
    common = ["--np", "4", "--mpi", str(ompi41.prefix), "--db", str(db), "-q"]
    files = [_validated(tmp_path / "allgatherv_default.txt", "Allgatherv",
                        {64: (3.0, "Pass"), 1024: (9.0, "Pass")}),
             _osu(tmp_path / "alltoallv_default.txt", "All-to-Allv Personalized Exchange",
                  {64: (4.0)}, False)]
    r = tune_cli("import-osu", *map(str, files), *common, "--host", "node17")
    assert r.returncode == 0, r.stderr
    with sqlite3.connect(db) as c:
        assert sorted(c.execute("SELECT DISTINCT host, collective FROM measurements")) == [
            ("node17", "allgatherv"), ("node17", "alltoallv")]
    bad = _validated(tmp_path / "allgatherv_alg2.txt", "Allgatherv",
                     {64: (2.0, "Pass"), 1024: (1.0, "Fail")})
    r = tune_cli("import-osu", str(bad), *common)
    assert r.returncode == 2 and f"{bad}:5:" in r.stderr and "wrong result" in r.stderr
    gv = _osu(tmp_path / "gatherv_default.txt", "Gatherv", {64: 2.0}, False)
    r = tune_cli("import-osu", str(gv), *common)
    assert r.returncode == 2 and "does not tune gatherv" in r.stderr
    r = tune_cli("import-osu", str(files[0]), *common, "--host", "x/../y")
    assert r.returncode == 2 and "not a host name" in r.stderr


@pytest.mark.timeout(20)
def test_a_crafted_header_is_read_in_linear_time() -> None:
    """Issue 61, finding 8: a header of `a ` repeated 20,000 times, failing at its end, took
    30 s (quadratic); 200,000 would take hours. Refused at once, the message kept short."""
    from colltune.osu.osu_output import FormatError, parse

    for tail in ("latency-", "latency(", "Latency(us) -"):
        body = "# " + "a " * 200_000 + tail
        with pytest.raises(FormatError) as e:
            parse("# OSU MPI Reduce Latency Test v7.0\n" + body + "\n")
        assert "unknown column header" in str(e.value) and len(str(e.value)) < 300

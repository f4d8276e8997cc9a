"""Property-based fuzzing of every reader and of the CLI: generated and mutated input never
causes a traceback, every rejection names the file, the line and the reason, and every file
the writers produce is accepted by the readers and by `tune check`.

COLLTUNE_FUZZ_EXAMPLES raises the number of cases per property (docs/reliability.md)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from colltune.cli import app
from colltune.collectives import COLLECTIVES
from colltune.errors import FormatError
from colltune.osu import osu_output
from colltune.rules import mvapich2
from colltune.rules import ompi_classic as rules
from colltune.rules.mvapich2 import Profile, Range
from colltune.rules.ompi_classic import CommRule, MsgRule, RulesFile
from helpers import commands_built_once

EXAMPLES = int(os.environ.get("COLLTUNE_FUZZ_EXAMPLES", "100"))  # more: set it
FUZZ = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
runner = CliRunner()


@pytest.fixture(autouse=True, scope="module")
def _command_built_once() -> Iterator[None]:
    with commands_built_once():  # 50 ms a build: most of an example here
        yield


# --- mutations shared by the text formats ------------------------------------------------

def mutate(text: str, data: st.DataObject) -> str:
    """A few edits of the kinds people and tools make: lines dropped, duplicated, swapped or
    truncated, numbers changed, junk inserted, bytes flipped."""
    lines = text.splitlines(keepends=True)
    for _ in range(data.draw(st.integers(1, 4))):
        if not lines:
            lines = [""]
        i = data.draw(st.integers(0, len(lines) - 1))
        op = data.draw(st.sampled_from(["drop", "dup", "swap", "cut", "num", "junk", "char"]))
        if op == "drop":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "swap":
            j = data.draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif op == "cut":
            lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))]
        elif op == "num":
            new = data.draw(st.sampled_from(["-1", "0", "00", "1e9", "nan", "inf", "0x10",
                                             "4294967296", "99999999999999999999", "1.5"]))
            lines[i] = re.sub(r"[0-9.]+", new, lines[i], count=1)
        elif op == "junk":
            lines.insert(i, data.draw(st.text(max_size=20)) + "\n")
        else:
            pos = data.draw(st.integers(0, max(0, len(lines[i]) - 1)))
            ch = data.draw(st.characters())
            lines[i] = lines[i][:pos] + ch + lines[i][pos + 1:]
    return "".join(lines)


def _located(e: FormatError, path: str, text: str) -> None:
    assert str(e).startswith(path + ":"), str(e)
    assert 0 <= e.line <= max(1, len(text.splitlines()) + 1), (e.line, str(e))
    assert e.reason.strip(), "a rejection without a reason"


# --- Open MPI rules files --------------------------------------------------------------------

rule_rows = st.lists(st.tuples(st.integers(0, 10**9), st.integers(0, 9), st.integers(0, 8),
                               st.integers(0, 1 << 20), st.integers(0, 64)),
                     min_size=1, max_size=6)
rules_files = st.builds(
    lambda data, version: _make_rules(data, version),
    st.dictionaries(st.sampled_from([0, 1, 2, 3, 7, 9, 11, 15]),
                    st.dictionaries(st.integers(1, 4096), rule_rows, min_size=1, max_size=3),
                    min_size=1, max_size=4),
    st.sampled_from([1, 2]))


def _make_rules(data: dict[int, dict[int, list[tuple[int, ...]]]], version: int) -> RulesFile:
    rf = RulesFile(version=version, comments=["fuzz"])
    for cid, per_np in data.items():
        for np, rows in per_np.items():
            sizes = sorted({r[0] for r in rows} | {0})
            rs = [MsgRule(s, r[1], r[2], r[3], r[4] if version == 2 else None)
                  for s, r in zip(sizes, rows + rows[:1])]
            rf.set_section(cid, CommRule(np, rs))
    return rf


def _shape(rf: RulesFile) -> list[tuple[object, ...]]:
    return [(cid, s.comsize, r.msgsize, r.alg, r.faninout, r.segsize, r.maxreq)
            for cid, secs in sorted(rf.collectives.items()) for s in secs for r in s.rules]


@FUZZ
@given(rules_files, st.data())
def test_rules_reader_on_mutated_files(rf: RulesFile, data: st.DataObject) -> None:
    text = mutate(rules.render(rf), data)
    try:
        got = rules.parse(text, "m.conf")
    except FormatError as e:
        _located(e, "m.conf", text)
        return
    # accepted: it must survive its own round trip unchanged
    assert _shape(rules.parse(rules.render(got))) == _shape(got)


@FUZZ
@given(st.text(max_size=400))
def test_rules_reader_on_garbage(text: str) -> None:
    try:
        rules.parse(text, "g.conf")
    except FormatError as e:
        _located(e, "g.conf", text)


@FUZZ
@given(rules_files)
def test_every_written_rules_file_reads_back_the_same(rf: RulesFile) -> None:
    assert _shape(rules.parse(rules.render(rf))) == _shape(rf)


@FUZZ
@given(rules_files)
def test_tune_check_accepts_every_written_file(tmp_path: Path, rf: RulesFile) -> None:
    path = tmp_path / "w.conf"
    path.write_text(rules.render(rf))
    r = runner.invoke(app, ["check", str(path), "--ompi-version",
                            "5.0.11" if rf.version == 2 else "4.1.4"])
    assert r.exit_code == 0, r.output
    assert "OK" in r.output


# --- OSU output ----------------------------------------------------------------------------

OSU_TITLES = {"reduce": "Reduce", "bcast": "Broadcast", "allreduce": "Allreduce",
              "alltoall": "All-to-All Personalized Exchange", "gather": "Gather",
              "allgather": "Allgather", "scatter": "Scatter", "barrier": "Barrier"}
lat = st.floats(0, 1e7, allow_nan=False, allow_infinity=False)


@st.composite
def osu_files(draw: st.DrawFn) -> tuple[str, str, list[tuple[int, float]], bool]:
    coll = draw(st.sampled_from(sorted(OSU_TITLES)))
    full = draw(st.booleans())
    if coll == "barrier":
        sizes = [0]
    else:
        sizes = sorted(draw(st.sets(st.integers(1, 1 << 24), min_size=1, max_size=12)))
    version = draw(st.sampled_from(["5.9", "7.3"]))
    lines = [draw(st.sampled_from(["", "[node1:4242] mpirun noise\n"])),
             f"# OSU MPI {OSU_TITLES[coll]} Latency Test v{version}\n",
             "# Datatype: MPI_CHAR.\n"]
    head = ["# "] if coll == "barrier" else ["# Size    "]
    head.append("Avg Latency(us)")
    if full:
        head += ["   Min Latency(us)", "   Max Latency(us)", "  Iterations"]
    lines.append("".join(head) + "\n")
    rows = []
    for s in sizes:
        lo, hi = sorted((draw(lat), draw(lat)))
        avg = round((lo + hi) / 2, 2)
        cells = [] if coll == "barrier" else [str(s)]
        cells.append(f"{avg:.2f}")
        if full:
            cells += [f"{min(lo, avg):.2f}", f"{max(hi, avg):.2f}", "1000"]
        lines.append("  ".join(c.rjust(12) for c in cells) + "\n")
        rows.append((s, float(f"{avg:.2f}")))
    return coll, "".join(lines), rows, full


@FUZZ
@given(osu_files())
def test_osu_reader_reads_every_generated_file(f: tuple[str, str, list[tuple[int, float]], bool]
                                              ) -> None:
    coll, text, rows, full = f
    run = osu_output.parse(text, "o.txt")
    assert run.collective == coll
    assert [(r.size, r.avg_us) for r in run.rows] == rows
    assert all((r.iterations == 1000) == full for r in run.rows)


@FUZZ
@given(osu_files(), st.data())
def test_osu_reader_on_mutated_files(f: tuple[str, str, list[tuple[int, float]], bool],
                                     data: st.DataObject) -> None:
    text = mutate(f[1], data)
    try:
        run = osu_output.parse(text, "o.txt")
    except FormatError as e:
        _located(e, "o.txt", text)
        return
    sizes = [r.size for r in run.rows]
    assert sizes == sorted(set(sizes)) and all(r.avg_us >= 0 for r in run.rows)


# --- MVAPICH2 profiles ------------------------------------------------------------------------

@st.composite
def profiles(draw: st.DrawFn) -> Profile:
    p = Profile(comments=[draw(st.text(st.characters(blacklist_categories=["Cc", "Cs"]),
                                       max_size=30)).strip()])
    for var in draw(st.lists(st.sampled_from(sorted(mvapich2.TUNING_VARS)), unique=True,
                             min_size=1, max_size=5)):
        ends = sorted(draw(st.sets(st.integers(0, 1 << 30), max_size=5)))
        # some numbers exist only as a single value (not inside a range string)
        algs = sorted(mvapich2.TUNING_VARS[var].algorithms
                      - (mvapich2.SINGLE_ONLY.get(var, set()) if ends else set()))
        los = [0] + [e + 1 for e in ends]
        his: list[int | None] = [*ends, None]
        p.set_ranges(var, [Range(draw(st.sampled_from(algs)), lo, hi)
                           for lo, hi in zip(los, his)])
    if draw(st.booleans()):
        p.settings["MV2_ENABLE_AFFINITY"] = "0"
    return p


@FUZZ
@given(profiles(), st.sampled_from(["conf", "env"]))
def test_profile_writer_output_reads_back_and_passes_check(tmp_path: Path, p: Profile,
                                                           style: str) -> None:
    text = mvapich2.render(p, style)
    back = mvapich2.parse(text, "p.conf")
    assert back.settings == p.settings
    path = tmp_path / "mv2.conf"
    path.write_text(text)
    r = runner.invoke(app, ["check", str(path)])
    assert r.exit_code == 0 and "MVAPICH2 profile" in r.output, r.output


@FUZZ
@given(profiles(), st.data())
def test_profile_reader_on_mutated_files(p: Profile, data: st.DataObject) -> None:
    text = mutate(mvapich2.render(p, data.draw(st.sampled_from(["conf", "env"]))), data)
    try:
        got = mvapich2.parse(text, "p.conf")
    except FormatError as e:
        _located(e, "p.conf", text)
        return
    assert mvapich2.parse(mvapich2.render(got)).settings == got.settings


# --- the CLI ---------------------------------------------------------------------------------

COMMANDS = [*sorted(COLLECTIVES), "all", "check", "explain", "reduse", ""]
OPTIONS = ["--np", "--sizes", "--segsizes", "--param", "--strategy", "--sweep", "--rules-version",
           "--timeout", "--point-time", "--rel-ci", "--min-reps", "--max-reps", "--seed",
           "--confirm-rounds", "--hostfile", "--out", "--db", "--summary-json", "--from-db",
           "--quiet", "--collective", "--size", "--ompi-version", "-c", "-o", "--help"]
VALUES = st.one_of(
    st.sampled_from(["4", "2,4", "0", "-1", "1", "1K", "8,1M", "2G", "4096G", ",", "", "x",
                     "nan", "inf", "1e400", "0.0", "-0.5", "999999999999999999999", "grid",
                     "bayes", "mpit", "relaunch", "1", "2", "3", "reduce", "4.1.4", "5.0.11",
                     "v", "FILE", "DIR", "MISSING", "BADRULES", "PROFILE", "BADPROFILE",
                     "radix=0,2", "segsize=4K", "=", "x=1="]),
    st.text(max_size=12))


TEMPLATES = [
    ["reduce", "--np", "4", "--sizes", "8,1K", "--out", "FILE", "--summary-json", "DIR"],
    ["all", "--np", "2,4", "--segsizes", "0,4K", "--from-db", "--out", "BADRULES"],
    ["bcast", "--np", "4", "--min-reps", "7", "--max-reps", "400", "--timeout", "60"],
    ["check", "FILE", "--ompi-version", "4.1.4"],
    ["check", "BADRULES"],
    ["explain", "FILE", "--collective", "reduce", "--np", "4", "--size", "8"],
    ["explain", "BADRULES", "-c", "bcast", "--np", "2", "--size", "1K"],
    ["check", "PROFILE"],
    ["check", "BADPROFILE", "--ompi-version", "5.0.11"],
]


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    """A real command line, then a few edits: a value replaced, a word dropped or added."""
    if draw(st.integers(0, 4)) == 0:
        args = [draw(st.sampled_from(COMMANDS))]
    else:
        args = list(draw(st.sampled_from(TEMPLATES)))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(["value", "drop", "option", "command"]))
        i = draw(st.integers(0, len(args) - 1)) if args else 0
        if op == "value" and args:
            args[i] = draw(VALUES)
        elif op == "drop" and args:
            del args[i]
        elif op == "option":
            args[i:i] = [draw(st.sampled_from(OPTIONS)), draw(VALUES)]
        elif args:
            args[0] = draw(st.sampled_from(COMMANDS))
    return args


@FUZZ
@given(command_lines())
def test_cli_never_shows_a_traceback(tmp_path: Path, argv: list[str]) -> None:
    files = {"FILE": tmp_path / "rules.conf", "DIR": tmp_path, "MISSING": tmp_path / "no" / "x",
             "BADRULES": tmp_path / "bad.conf"}
    files["FILE"].write_text("1\n11\n1\n4\n1\n0 1 0 0\n")
    files["BADRULES"].write_text("1\n11\n1\n4\n1\n5 1 0 0\n")
    files["PROFILE"] = tmp_path / "mv2.conf"
    files["PROFILE"].write_text("MV2_INTER_BCAST_TUNING = 8\n")
    files["BADPROFILE"] = tmp_path / "mv2bad.conf"
    files["BADPROFILE"].write_text("MV2_INTER_REDUCE_TUNING = 1:0-64,2:65-+\n")
    argv = [str(files[a]) if a in files else a for a in argv]
    if argv and argv[0] in [*COLLECTIVES, "all"]:
        # no real launch, ever: the last --mpi wins and names no installation
        argv += ["--mpi", str(tmp_path / "no-mpi-here"), "--db", str(tmp_path / "db.sqlite")]
    r = runner.invoke(app, argv, env={"SLURM_JOB_ID": "", "COLUMNS": "200"})
    assert r.exception is None or isinstance(r.exception, SystemExit), (argv, r.exception)
    assert r.exit_code in (0, 1, 2, 3, 4), (argv, r.exit_code, r.output)  # README
    assert "Traceback" not in r.output
    if "error: " in r.output and r.exit_code != 0:
        assert "what to do:" in r.output, (argv, r.output)


READERS = {"rules": rules.read, "osu": osu_output.read, "profile": mvapich2.read}


@pytest.mark.parametrize("reader", sorted(READERS))
@FUZZ
@given(blob=st.binary(max_size=300), head=st.sampled_from([b"", b"MV2_X=1\n",
                                                         b"# OSU MPI Reduce Latency Test\n"]))
def test_readers_on_garbage_bytes(tmp_path: Path, reader: str, blob: bytes, head: bytes
                                  ) -> None:
    path = tmp_path / "g.txt"
    path.write_bytes(head + blob)
    try:
        READERS[reader](path)
    except FormatError as e:
        assert str(e).startswith(str(path)) and e.reason


# --- profiles and store rows: input another user may have written (docs/security.md) ------

def _json_values() -> st.SearchStrategy[object]:
    leaf = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                     st.floats(allow_nan=False), st.text(max_size=12),
                     st.sampled_from(["<script>", "[/]", "$\\frac{$", "\x1b[2J", "=cmd"]))
    return st.recursive(leaf, lambda kids: st.one_of(
        st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=8), kids, max_size=3)),
        max_leaves=8)


def _paths(doc: object, at: tuple[object, ...] = ()) -> list[tuple[object, ...]]:
    out = [at]
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _paths(v, (*at, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _paths(v, (*at, i))
    return out


@FUZZ
@given(data=st.data())
def test_profile_loader_on_mutated_profiles(tmp_path: Path, data: st.DataObject) -> None:
    """A valid profile with a few values replaced or removed: loaded, or refused with a
    ColltuneError that names the file; and what loads, `tune app` can plan from."""
    import json

    from colltune.apploop.app.groups import plan
    from colltune.apploop.profiling.profile import load
    from colltune.errors import ColltuneError
    from test_untrusted_input import valid_profile

    doc: dict[str, object] = valid_profile()
    for _ in range(data.draw(st.integers(1, 3))):
        at = data.draw(st.sampled_from(_paths(doc)[1:]))
        parent: object = doc
        for k in at[:-1]:
            parent = parent[k]  # type: ignore[index]
        if data.draw(st.booleans()):
            parent[at[-1]] = data.draw(_json_values())  # type: ignore[index]
        else:
            del parent[at[-1]]  # type: ignore[attr-defined]
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    try:
        prof = load(path)
    except ColltuneError as e:
        assert str(path) in e.message and "\n" not in e.message
        return
    plan(prof, 0.001)


STORE_ROWS = {
    "measurement samples": ("UPDATE measurements SET samples=?", "json"),
    "measurement series": ("UPDATE measurements SET series=?", "json"),
    "measurement strata": ("UPDATE measurements SET strata=?", "json"),
    "model params": ("UPDATE models SET params=?", "json"),
    "catalog names": ("UPDATE catalogs SET algorithms=?", "json"),
    "host": ("UPDATE measurements SET host=?", "text"),
}


@pytest.mark.parametrize("row", sorted(STORE_ROWS))
@settings(max_examples=max(10, EXAMPLES // 5), deadline=None,  # a store and a CLI run each
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_store_readers_on_garbage_rows(tmp_path: Path, row: str, data: st.DataObject
                                       ) -> None:
    """A store row edited to anything: `tune show` and `tune report` answer, or fail with
    one line and exit 4; never a traceback."""
    import json
    import tempfile

    from test_untrusted_input import hostile_store

    db = Path(tempfile.mkdtemp(dir=tmp_path)) / "s.db"  # one store per example
    hostile_store(db, tmp_path / "p", names={"reduce": {2: "x"}})
    sql, kind = STORE_ROWS[row]
    value = (json.dumps(data.draw(_json_values())) if kind == "json" and data.draw(st.booleans())
             else data.draw(st.text(max_size=20)))
    import sqlite3

    con = sqlite3.connect(db)
    q = {"r2": 1.0, "median_rel": 0.0, "worst_rel": 0.0, "points": 3}
    fit = {"pieces": [{"lo": 0, "hi": 8, "a": 1e-6, "b": 1e-9}], "gamma": 0.0,
           "quality": q, "gamma_quality": q}
    con.execute("INSERT INTO models (mpi_key, mpi_version, host, np, ppn, model, params, "
                "probe, created) VALUES ('k', '4.1.4', 'h', 2, 2, 'hockney', ?, '{}', 'x')",
                (json.dumps(fit),))
    con.execute(sql, (value,))
    con.commit()
    con.close()
    r = runner.invoke(app, ["show", "--db", str(db)], env={"COLUMNS": "200"})
    assert r.exception is None or isinstance(r.exception, SystemExit), (value, r.exception)
    assert r.exit_code in (0, 4), (value, r.output)
    # what tune report reads and puts in its tables (the plots are left out: slow)
    from colltune.errors import StoreError
    from colltune.reporting.report import load
    from colltune.reporting.report_tables import model_tables, summary_table
    from colltune.store import Store

    try:
        summary_table(load(db))
        s = Store(db, readonly=True)
        try:
            model_tables(s.models())
        finally:
            s.close()
    except StoreError as e:
        assert "\n" not in e.message

"""Bad input: one clear line saying what is wrong and what to do, a non-zero exit, no traceback."""

from __future__ import annotations

import shutil
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from colltune.backends.openmpi.install import OpenMPI
from colltune.errors import ColltuneError
from colltune.host import cores
from colltune.slots import place
from helpers import tune_cli


def _error(r, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert r.returncode != 0
    assert "Traceback" not in r.stderr
    first = r.stderr.strip().splitlines()[0]
    assert first.startswith("error: "), r.stderr
    for w in words:
        assert w in r.stderr, r.stderr
    assert "what to do:" in r.stderr


def test_unknown_collective() -> None:
    r = tune_cli("reduse", "--np", "4")
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "reduse" in r.stderr


@pytest.mark.parametrize("np", ["0", "-3", "1", "four"])
def test_bad_np(np: str, tmp_path: Path) -> None:
    _error(tune_cli("reduce", "--np", np, "--db", str(tmp_path / "d.sqlite")), "--np")


def test_no_mpi_found(tmp_path: Path) -> None:
    _error(tune_cli("reduce", "--np", "2", "--mpi", str(tmp_path / "nowhere")),
           "no MPI colltune drives at", "--mpi")


def test_slurm_allocation_too_small() -> None:
    env = {"SLURM_JOB_ID": "77", "SLURM_NTASKS": "2", "SLURM_JOB_NUM_NODES": "1"}
    with pytest.raises(ColltuneError) as e:
        place(4, env=env)
    assert "2 tasks of Slurm job 77" in e.value.message and "salloc -n 4" in e.value.hint
    assert place(2, env=env).oversubscribe is False


def test_hostfile_slots(tmp_path: Path) -> None:
    hf = tmp_path / "hosts"
    hf.write_text("# two nodes\nnode1 slots=2\nnode2 slots=1\n")
    assert place(3, str(hf), env={}).hostfile == str(hf)
    with pytest.raises(ColltuneError, match="more than the 3 slots"):
        place(4, str(hf), env={})


def test_oversubscription_is_announced() -> None:
    p = place(cores() + 1, env={})
    assert p.oversubscribe and p.warning and "oversubscribed" in p.warning


def test_check_reports_file_line_and_reason(tmp_path: Path) -> None:
    f = tmp_path / "bad.conf"
    f.write_text("1\n11\n1\n4\n1\n0 1 O 0\n")
    r = tune_cli("check", str(f))
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert f"{f}:6: unexpected text 'O'" in r.stderr
    r = tune_cli("check", str(tmp_path / "missing.conf"))
    assert r.returncode == 1 and "cannot read" in r.stderr and "Traceback" not in r.stderr


def test_explain(tmp_path: Path) -> None:
    f = tmp_path / "r.conf"
    f.write_text("1\n11\n2\n2\n1\n0 1 0 0\n8\n2\n0 0 0 0\n4097 5 0 8192\n")
    r = tune_cli("explain", str(f), "-c", "reduce", "--np", "16", "--size", "8K")
    assert r.returncode == 0, r.stderr
    assert "line 10" in r.stdout and "algorithm 5" in r.stdout and "segment size 8192" in r.stdout
    r = tune_cli("explain", str(f), "-c", "reduce", "--np", "4", "--size", "8K")
    assert "section 2" in r.stdout and "algorithm 1" in r.stdout


@pytest.mark.mpi
def test_malformed_merge_target_is_never_overwritten(ompi41: OpenMPI, tmp_path: Path) -> None:
    out = tmp_path / "rules.conf"
    junk = "1\n11\n1\n4\n1\n5 1 0 0\n"  # first rule not 0
    out.write_text(junk)
    r = tune_cli("reduce", "--np", "2", "--mpi", str(ompi41.prefix), "--out", str(out),
                 "--db", str(tmp_path / "d.sqlite"), "--sizes", "8", "--quiet")
    _error(r, f"{out}:6", "not changed")
    assert out.read_text() == junk


@pytest.mark.mpi
def test_merge_keeps_other_collectives_and_sizes(ompi41: OpenMPI, tmp_path: Path) -> None:
    out = tmp_path / "rules.conf"
    out.write_text("2\n7\n1\n16\n1\n0 6 0 0\n11\n1\n64\n1\n0 5 0 0\n")  # bcast@16, reduce@64
    r = tune_cli("reduce", "--np", "2", "--mpi", str(ompi41.prefix), "--out", str(out),
                 "--db", str(tmp_path / "d.sqlite"), "--sizes", "8", "--point-time", "0.02",
                 "--confirm-rounds", "0", "--quiet")  # the merge, not the decision: no pairs
    assert r.returncode == 0, r.stderr
    from colltune.rules import ompi_classic as rules

    rf = rules.read(out)
    assert [s.comsize for s in rf.collectives[7]] == [16]
    assert [s.comsize for s in rf.collectives[11]] == [2, 64]
    assert rf.collectives[11][1].rules[0].alg == 5


@pytest.mark.mpi
def test_compile_failure_shows_the_compiler_message(ompi41: OpenMPI, tmp_path: Path) -> None:
    fake = tmp_path / "mpi" / "bin"
    fake.mkdir(parents=True)
    for tool in ("ompi_info", "mpirun"):
        (fake / tool).symlink_to(getattr(ompi41, tool))
    cc = fake / "mpicc"
    cc.write_text("#!/bin/sh\necho 'collbench.c:1:10: fatal error: mpi.h: No such file' >&2\n"
                  "exit 1\n")
    cc.chmod(0o755)
    r = tune_cli("reduce", "--np", "2", "--mpi", str(fake.parent), "--db",
                 str(tmp_path / "d.sqlite"), "--sizes", "8", "--quiet")
    _error(r, "compiling the benchmark kernel", "mpi.h: No such file", "libopenmpi-dev")


def test_unwritable_output_is_refused_before_measuring(tmp_path: Path) -> None:
    db = tmp_path / "d.sqlite"
    r = tune_cli("reduce", "--np", "2", "--db", str(db),
                 "--out", str(tmp_path / "no" / "such" / "dir" / "r.conf"), "--sizes", "8")
    _error(r, "--out", "does not exist")
    assert not db.exists()


@pytest.mark.parametrize("args,words", [
    (["--min-reps", "0"], "--min-reps"), (["--min-reps", "9", "--max-reps", "3"], "--max-reps"),
    (["--timeout", "0"], "--timeout"), (["--sizes", ","], "--sizes"),
    (["--sizes", "0"], "sizes"), (["--rules-version", "3"], "--rules-version"),
    (["--confirm-rounds", "-1"], "--confirm-rounds"), (["--rel-ci", "2"], "--rel-ci"),
    (["--cutoff", "0.5"], "--cutoff"), (["--param", "radix"], "--param"),
    (["--param", "radix=,"], "--param"), (["--param", "fanout=2", "--param", "fanout=4"],
                                          "twice"),
    # a name Open MPI's coll/tuned does not declare: refused, naming those it does
    (["--param", "radix=2"], "segsize, fanout, max_requests"),
    # a request window the classic rules format cannot carry
    (["--rules-version", "1", "--param", "max_requests=0,8"], "--rules-version 2"),
    # Open MPI's rules select by size, but only once measured: no file drives the sweep
    (["--sweep", "bands"], "--sweep bands"), (["--sweep", "both"], "--sweep mpit"),
    # another family's own option: refused by what each family says it takes, naming
    # the families that take it (issue 74: not a list of Open MPI's flags in the base)
    (["--for-np", "2"], "--for-np does not apply to --backend openmpi"),
    (["--trade-off"], "it is mvapich2's"),
    (["--backend", "mpich", "--mpi", "/usr", "--tune-han"], "it is openmpi's"),
    (["--backend", "mpich", "--mpi", "/usr", "--rules-version", "2"],
     "it is openmpi and smpi's"),
    # a real MPI's launches are timed, not modelled (issue 84)
    (["--launch-cost", "1"], "it is smpi's"),
    (["--backend", "smpi", "--launch-cost", "soon"], "--launch-cost 'soon': not seconds"),
    (["--backend", "smpi", "--launch-cost", "-1"], "BASE+PER_NODE/node"),
    # sizes between: added in launches of their own (issue 84, item 4)
    (["--between", "nearest"], "--between rule, measure"),
    (["--between", "measure", "--comm-sizes", "2"], "not with --comm-sizes, --predict or"),
    (["--between", "measure", "--from-db"], "not with --comm-sizes, --predict or --from-db")])
def test_impossible_settings_are_refused(args: list[str], words: str, tmp_path: Path) -> None:
    _error(tune_cli("reduce", "--np", "2", "--db", str(tmp_path / "d.sqlite"), *args), words)


@pytest.mark.parametrize("args,words", [
    (["--layouts", "2x2,1x4", "--np", "4"], "leave out --np, --nodes and --ppn"),
    (["--layouts", "2x2", "--ppn", "2"], "leave out --np, --nodes and --ppn"),
    (["--layouts", "2by2"], "cannot read '2by2' as a layout"),
    (["--layouts", "1x1"], "at least 2 ranks each"),
    (["--layouts", "2x2,2x2"], "names a layout twice"),
    (["--layouts", "1x2", "--comm-sizes", "2"], "without --comm-sizes")])
def test_layouts_that_cannot_run_are_refused(args: list[str], words: str, tmp_path: Path
                                             ) -> None:
    _error(tune_cli("reduce", "--db", str(tmp_path / "d.sqlite"), *args), words)


@pytest.mark.parametrize("sweep,said", [("mpit", True), ("relaunch", False)])
def test_default_launches_that_repeat_nothing_are_said(ompi41: OpenMPI, sweep: str, said: bool,
                                                       tmp_path: Path) -> None:
    """Under an MPI_T sweep the default shares the launch of every configuration: asking
    for it in 3 launches would silently do nothing, so it is said (before anything runs)."""
    r = tune_cli("bcast", "--np", "2", "--mpi", str(ompi41.prefix), "--sweep", sweep,
                 "--default-launches", "3", "--from-db", "--db", str(tmp_path / "d.db"))
    assert r.returncode != 0  # nothing stored
    assert ("--default-launches 3 repeats nothing" in r.stderr) == said, r.stderr


@pytest.mark.mpi
def test_output_lost_during_the_run_keeps_the_store(ompi41: OpenMPI, tmp_path: Path) -> None:
    """The output directory vanishes while measuring: a clear error at the end, and every
    measurement is in the store for --from-db."""
    db = tmp_path / "d.sqlite"
    outdir = tmp_path / "out"
    outdir.mkdir()
    args = ["reduce", "--np", "2", "--mpi", str(ompi41.prefix), "--db", str(db), "--sizes",
            "8,4K", "--point-time", "0.02", "--confirm-rounds", "0", "--quiet"]
    proc = subprocess.Popen([sys.executable, "-m", "colltune.cli", *args, "--out",
                             str(outdir / "r.conf")], stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (db.exists() and _count(db) > 0):
        time.sleep(0.02)
    shutil.rmtree(outdir)
    _, stderr = proc.communicate(timeout=300)
    r = subprocess.CompletedProcess(args, proc.returncode, "", stderr)
    _error(r, "cannot write --out", "--from-db")
    assert _count(db) > 3
    ok = tune_cli(*args, "--from-db", "--out", str(tmp_path / "r.conf"))
    assert ok.returncode == 0, ok.stderr


def _count(db: Path) -> int:
    try:
        with sqlite3.connect(db) as c:
            return int(c.execute("SELECT COUNT(*) FROM measurements").fetchone()[0])
    except sqlite3.Error:
        return 0


def test_every_error_in_the_source_says_what_to_do() -> None:
    """Each ColltuneError raised anywhere in colltune carries a non-empty hint."""
    import ast

    import colltune

    root = Path(colltune.__file__).parent
    missing = []
    calls = 0
    for f in root.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "ColltuneError":
                calls += 1
                hint = node.args[1] if len(node.args) > 1 else next(
                    (k.value for k in node.keywords if k.arg == "hint"), None)
                if hint is None or (isinstance(hint, ast.Constant) and not hint.value):
                    missing.append(f"{f.relative_to(root)}:{node.lineno}")
    assert calls > 30 and missing == []


def test_version() -> None:
    from colltune import __version__

    r = tune_cli("--version")
    assert r.returncode == 0 and r.stdout.strip() == f"colltune {__version__}"


@pytest.mark.mpi  # finds Open MPI (ompi_info); launches nothing
def test_heavy_oversubscription_is_refused_before_launching(ompi41: OpenMPI,
                                                            tmp_path: Path) -> None:
    from colltune.slots import MAX_OVERSUBSCRIPTION, refuse_heavy_oversubscription

    limit = MAX_OVERSUBSCRIPTION * cores()
    refuse_heavy_oversubscription(place(limit, env={}))  # at the limit: runs
    with pytest.raises(ColltuneError, match="oversubscribed"):
        refuse_heavy_oversubscription(place(limit + 1, env={}))
    db = tmp_path / "d.sqlite"
    r = tune_cli("reduce", "--np", "512", "--mpi", str(ompi41.prefix), "--db", str(db),
                 "--sizes", "8", "--confirm-rounds", "0")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "oversubscribed" in r.stderr and "--predict" in r.stderr and \
        "--backend smpi" in r.stderr and "--slurm-script" in r.stderr
    with sqlite3.connect(db) as c:
        assert c.execute("SELECT COUNT(*) FROM measurements").fetchone() == (0,)
    # deciding from stored measurements launches nothing: not refused for that
    r = tune_cli("reduce", "--np", "512", "--mpi", str(ompi41.prefix), "--db", str(db),
                 "--from-db")
    assert r.returncode == 2 and "no stored measurements" in r.stderr


def test_exit_codes_say_the_class_of_failure(tmp_path: Path) -> None:
    """0 success, 1 a verdict against the input, 2 usage, 3 the MPI or a job on it,
    4 the store (README, "Exit codes")."""
    bad = tmp_path / "bad.conf"
    bad.write_text("1\n7\n1\n4\n2\n0 1 0 0\n")  # says two rules, holds one
    notstore = tmp_path / "notes.db"
    notstore.write_text("my notes, not a store\n")
    cases = [
        (["check", str(bad), "--ompi-version", "4.1.4"], 1),
        (["reduce", "--np", "4", "--strategy", "guess"], 2),
        (["reduce", "--np", "4", "--mpi", str(tmp_path / "no-mpi-here"), "--db",
          str(tmp_path / "s.db")], 3),
        (["show", "--db", str(notstore)], 4),
        (["--version"], 0),
    ]
    for args, code in cases:
        r = tune_cli(*args)
        assert r.returncode == code, (args, r.returncode, r.stderr)
        assert "Traceback" not in r.stderr


def test_colltune_is_a_second_name_for_tune() -> None:
    """Sites where `tune` collides with another command run `colltune`."""
    exe = Path(sys.executable).parent / "colltune"
    r = subprocess.run([str(exe), "--version"], capture_output=True, text=True, check=False)
    assert r.returncode == 0 and r.stdout == tune_cli("--version").stdout


def test_version_with_mpi_names_the_installation_it_would_tune(tmp_path: Path) -> None:
    from conftest import get_mpich

    mpich = get_mpich("mpich50")
    r = tune_cli("--version", "--mpi", "/usr")
    assert r.returncode == 0 and "Open MPI 4.1.4 at /usr" in r.stdout, r.stderr
    r = tune_cli("--version", "--mpi", str(mpich.prefix))
    assert r.returncode == 0 and f"MPICH {mpich.version}" in r.stdout, r.stderr
    r = tune_cli("--version", "--mpi", str(tmp_path))
    assert r.returncode == 3 and "no MPI colltune drives" in r.stderr


def test_every_table_command_has_json_on_standard_output(tmp_path: Path) -> None:
    """One option name, --json, on show, check, explain and model show; `-` is standard
    output, which then holds the JSON alone."""
    import json

    conf = tmp_path / "r.conf"
    conf.write_text("1\n7\n1\n4\n2\n0 1 0 0\n65536 3 0 1024\n")
    r = tune_cli("check", str(conf), "--json", "-")
    doc = json.loads(r.stdout)
    assert r.returncode == 0 and doc["valid"] is True
    assert doc["collectives"]["bcast"][0]["rules"][1]["segsize"] == 1024
    r = tune_cli("explain", str(conf), "-c", "bcast", "--np", "4", "--size", "1M", "--json",
                 "-")
    assert json.loads(r.stdout)["rule"]["algorithm"] == 3
    bad = tmp_path / "bad.conf"
    bad.write_text("1\n7\n1\n4\n2\n0 1 0 0\n")
    r = tune_cli("check", str(bad), "--json", "-")
    assert r.returncode == 1 and json.loads(r.stdout)["valid"] is False
    for args in (["show"], ["model", "show"]):  # an empty store: an error, no JSON
        r = tune_cli(*args, "--db", str(tmp_path / "none.db"), "--json", "-")
        assert r.returncode == 4 and r.stdout == "", (args, r.stdout, r.stderr)


def test_sizes_with_from_db_are_honoured(tmp_path: Path) -> None:
    """--from-db --sizes decides at those sizes only (never silently at every stored size),
    and sizes the store does not hold are said."""
    import json
    import random

    from colltune.backends.openmpi.install import find_openmpi
    from colltune.collectives import get_collective
    from colltune.core.config import DEFAULT, Config
    from colltune.core.records import PointResult
    from colltune.slots import place
    from colltune.store import Store
    from colltune.tuner.measure import context_for

    mpi = find_openmpi("/usr")
    db = tmp_path / "s.db"
    st = Store(db)
    ctx = context_for(mpi, get_collective("reduce"), place(4))
    rng = random.Random(2)
    for size in (8, 512, 4096):
        for cfg, t in ((DEFAULT, 2e-5), (Config(1), 1e-5)):
            xs = [t * rng.uniform(0.95, 1.05) for _ in range(20)]
            st.add(ctx, cfg, PointResult(0, size, "ok", 20, sorted(xs)[10], samples=xs),
                   "mpit")
    st.close()
    s = tmp_path / "s.json"
    r = tune_cli("reduce", "--np", "4", "--mpi", "/usr", "--db", str(db), "--from-db",
                 "--sizes", "8,4K", "--summary-json", str(s), "-q")
    assert r.returncode == 0, r.stderr
    assert [d["size"] for d in json.loads(s.read_text())["collectives"]["reduce"]["4"]] == [
        8, 4096]
    r = tune_cli("reduce", "--np", "4", "--mpi", "/usr", "--db", str(db), "--from-db",
                 "--sizes", "64K", "-q")
    assert r.returncode == 2 and "at those --sizes" in r.stderr, r.stderr


def test_flags_do_not_show_as_taking_a_value() -> None:
    """typer prints <bool> beside a flag as if it took one; colltune's flags print none
    (only typer's own --help is left)."""
    for cmd in (["reduce"], ["verify"], ["export"], []):
        r = tune_cli(*cmd, "--help", env={"COLUMNS": "200"})
        flagged = [ln for ln in r.stdout.splitlines() if "<bool>" in ln and "--help" not in ln]
        assert flagged == [], (cmd, flagged)


def test_a_command_started_alone_reads_its_arguments_as_in_the_whole_app() -> None:
    """`tune X ...` builds only X's parser (typer builds every command's at each start):
    each command's help and a bad option's error are what the whole app gives, and
    anything that is not one command name gets the whole app."""
    from typer.main import get_command
    from typer.testing import CliRunner

    from colltune.cli import _for, app
    from helpers import commands_built_once

    runner = CliRunner()
    cmds = get_command(app).commands  # type: ignore[attr-defined]
    names = sorted(n for n, c in cmds.items() if not hasattr(c, "commands"))  # not groups
    assert len(names) > 20 and "check" in names
    with commands_built_once():  # the whole app's, for the comparisons
        for name in names:
            lean = _for([name, "--x"])
            assert lean is not app and list(get_command(lean).commands) == [name]  # type: ignore[attr-defined]
            for argv in ([name, "--help"], [name, "--no-such-option"]):
                a, b = runner.invoke(lean, argv), runner.invoke(app, argv)
                assert (a.exit_code, a.output) == (b.exit_code, b.output), argv
    for argv in ([], ["--version"], ["chek"], ["model", "fit"], ["--help", "check"]):
        assert _for(argv) is app


def test_a_step_is_named_once(tmp_path: Path) -> None:
    """--step and --step-from both name the step: refused before anything runs; a file
    that is not a profile is refused as one (it may be another user's)."""
    f = tmp_path / "r.conf"
    f.write_text("1\n7\n1\n4\n1\n0 0 0 0\n")
    r = tune_cli("verify", str(f), "--step", "8", "--step-from", str(f))
    assert r.returncode == 2 and "--step and --step-from" in r.stderr, r.stderr
    other = tmp_path / "other.json"
    other.write_text('{"entries": [{"collective": "bcast", "size": 8}]}')
    r = tune_cli("verify", str(f), "--step-from", str(other))
    assert r.returncode == 2 and "is not a colltune profile" in r.stderr, r.stderr

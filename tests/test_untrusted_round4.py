"""Files from others, round four (issue 86): the online layer inside the application, the
library each rank really ran, and the profiles a replay trusts. Each test reproduces a
finding as the review found it (a colleague on the same machine, a project directory the
group shares) and fails without its fix."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from colltune.backends.openmpi.install import OpenMPI
from colltune.kernel.build import build_kernel
from conftest import get_mpi
from helpers import tune_cli
from test_online import _build, plan_head


def _online(ompi41: OpenMPI, tmp_path: Path, *opts: str, exe: Path | None = None,
            steps: str = "80") -> subprocess.CompletedProcess[str]:
    exe = exe or _build(ompi41, tmp_path)
    return tune_cli("online", "-o", str(tmp_path / "r.conf"), "--mpi", str(ompi41.prefix),
                    "--db", str(tmp_path / "s.sqlite"), "--timeout", "120", *opts, "--",
                    str(ompi41.mpirun), "-np", "2", "--oversubscribe", str(exe), steps, "0",
                    env=ompi41.tool_env())


@pytest.mark.mpi
def test_summary_json_is_checked_before_the_run_and_never_written_through_a_link(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    """Finding 1: a link proj/summary.json -> the victim's notes was overwritten after the
    whole run; a missing directory was a traceback after it, a FIFO hung it, and `-` was a
    file named `-`. Now each is refused before anything runs (no rules file), and `-` is
    standard output holding the JSON alone."""
    exe = _build(ompi41, tmp_path)
    proj, notes = tmp_path / "proj", tmp_path / "victim-notes.txt"
    proj.mkdir()
    notes.write_text("the victim's notes\n")
    (proj / "summary.json").symlink_to(notes)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, why in ((proj / "summary.json", "symbolic link"),
                      (tmp_path / "no" / "such" / "s.json", "does not exist"),
                      (fifo, "not a regular file")):
        r = _online(ompi41, tmp_path, "--summary-json", str(path), exe=exe)
        said = r.stdout + r.stderr
        assert r.returncode == 2 and why in said and "Traceback" not in said, (path, said)
        assert not (tmp_path / "r.conf").exists(), "refused before the run"
    assert notes.read_text() == "the victim's notes\n"
    # `-`: the JSON alone on standard output, the table and the application's own output
    # on standard error
    r = _online(ompi41, tmp_path, "--summary-json", "-", exe=exe)
    assert r.returncode == 0, r.stdout + r.stderr
    doc = json.loads(r.stdout)
    assert doc["groups"] and not (Path.cwd() / "-").exists()
    assert "checksum" in r.stderr


@pytest.mark.mpi
def test_evidence_dir_is_never_a_link_and_is_made_private(ompi41: OpenMPI,
                                                          tmp_path: Path) -> None:
    """Finding 9: --evidence DIR followed a link planted at DIR (the schedules landed in
    another user's directory), and a new DIR got the umask's mode. Now a link is refused
    before the run, a new DIR is 0700 under any umask."""
    exe = _build(ompi41, tmp_path)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    (tmp_path / "ev").symlink_to(theirs)
    r = _online(ompi41, tmp_path, "--evidence", str(tmp_path / "ev"), exe=exe)
    said = r.stdout + r.stderr
    assert r.returncode == 2 and "symbolic link" in said, said
    assert list(theirs.iterdir()) == [] and not (tmp_path / "r.conf").exists()
    # a new directory (and the missing level above it) made private whatever the umask
    old = os.umask(0o002)
    try:
        r = _online(ompi41, tmp_path, "--evidence", str(tmp_path / "new" / "ev"), exe=exe)
    finally:
        os.umask(old)
    assert r.returncode == 0, r.stdout + r.stderr
    for d in (tmp_path / "new", tmp_path / "new" / "ev"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, oct(d.stat().st_mode)
    assert any(f.name.startswith("schedule.") for f in (tmp_path / "new" / "ev").iterdir())


ZERO = r"""
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv)
{
    double in[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[8];
    MPI_Init(&argc, &argv);
    for (int i = 0; i < 2000; i++) {
        MPI_Allreduce(in, out, 0, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(in, out, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    MPI_Finalize();
    return 0;
}
"""


def _compile(mpi: OpenMPI, where: Path, name: str, text: str) -> Path:
    src, exe = where / f"{name}.c", where / name
    src.write_text(text)
    r = subprocess.run([str(mpi.mpicc), "-std=c99", "-Wall", "-Werror", "-o", str(exe),
                        str(src)], capture_output=True, text=True, env=mpi.tool_env(),
                       check=False)
    assert r.returncode == 0, r.stderr
    return exe


@pytest.mark.mpi
def test_zero_byte_calls_leave_their_group_out_and_the_file_is_written(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    """Finding 7: 2,000 allreduces of count 0 were explored, then the decision failed
    ("sizes must be 1 B to 2 GiB"), no file was written, and every later run failed alike.
    Now that group is left out with a note, and the 64 B group's file is written, twice."""
    exe = _compile(ompi41, tmp_path, "zero", ZERO)
    for _ in range(2):
        r = _online(ompi41, tmp_path, "--summary-json", str(tmp_path / "s.json"), exe=exe)
        said = " ".join((r.stdout + r.stderr).split())
        assert r.returncode == 0, said
        assert "allreduce of 0 B on 2 ranks: left out of the file" in said, said
        assert (tmp_path / "r.conf").is_file()
        sizes = {g["size"] for g in json.loads((tmp_path / "s.json").read_text())["groups"]}
        assert {0, 64} <= sizes, sizes


@pytest.fixture(scope="module")
def arrival_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real profile of tests/data/arrival.c (rank 3 enters 2 ms late) on 4 ranks."""
    from arrival_prog import build_arrival

    ompi41 = get_mpi("ompi41")
    where = tmp_path_factory.mktemp("arrival")
    out = where / "arrival.json"
    r = tune_cli("profile", "-o", str(out), "--mpi", str(ompi41.prefix), "--",
                 str(ompi41.mpirun), "-np", "4", "--oversubscribe",
                 str(build_arrival(ompi41, where)), "2000", "3", "60", env=ompi41.tool_env())
    assert r.returncode == 0, r.stdout + r.stderr
    return out


def _tampered(profile: Path, where: Path, rows: list[list[float]],
              spread_max: float | None = None) -> Path:
    doc = json.loads(profile.read_text())
    for e in doc["entries"]:
        if (e["collective"], e["comm_size"]) == ("allreduce", 4):
            e["arrival"]["delays_s"] = rows
            if spread_max is not None:
                e["arrival"]["spread_s"]["max"] = spread_max
    out = where / "tampered.json"
    out.write_text(json.dumps(doc))
    return out


@pytest.mark.mpi
@pytest.mark.parametrize("rows,spread_max,why", [
    ([[]], None, "should be non-empty"),                              # a traceback before
    ([[0.0, 0.0, 0.0]], None, "where each rank has one (4)"),         # uneven
    ([[0.0, 0.0, 0.0, 10.0]] * 8, None, "where the profile recorded at most"),
    ([[0.0, 0.0, 0.0, 11.0]], 11.0, "where a replay waits 0 to 10 s"),  # the kernel's bound
    ([[0.0, 0.0, 0.0, 2.0]] * 8, 2.0, "over the 1 s a replay waits at most"),
    ([[0.0, 0.0, 0.0, 0.001]] * 65, None, "65 rows, where a replay takes 1 to 64"),
], ids=["empty", "uneven", "inconsistent", "over-10s", "total", "rows"])
def test_a_replay_checks_the_profiles_rows_before_anything_runs(
        ompi41: OpenMPI, arrival_profile: Path, tmp_path: Path, rows: list[list[float]],
        spread_max: float | None, why: str) -> None:
    """Finding 8: rows of 10 s in a profile that recorded 2 ms spreads were replayed as
    given (every repetition slept 10 s), an 11 s delay was refused by the kernel only after
    three launches, and `delays_s: [[]]` was a ValueError traceback in `tune COLL
    --arrival` and `tune app`. Now each is one line, exit 2, before any launch."""
    bad = _tampered(arrival_profile, tmp_path, rows, spread_max)
    for argv in (("allreduce", "--np", "4", "--arrival", str(bad), "--sizes", "64",
                  "--out", str(tmp_path / "r.conf")),
                 ("app", str(bad), "--arrival", "on", "--out", str(tmp_path / "r.conf"))):
        r = tune_cli(*argv, "--mpi", str(ompi41.prefix), "--db", str(tmp_path / "s.sqlite"),
                     env=ompi41.tool_env(), timeout=120)
        said = " ".join(r.stderr.split())
        assert r.returncode == 2 and why in said, (argv, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr and r.stderr.count("error: ") == 1, r.stderr
        assert not (tmp_path / "s.sqlite").exists(), "refused before anything was measured"


def test_the_replay_says_what_it_waits_a_repetition() -> None:
    """The replay's wait is announced with the pattern (tune app's table and --json)."""
    from colltune.apploop.profiling.replay import choose

    entry = {"collective": "allreduce", "comm_size": 4, "time_s": {"mean": 1e-4},
             "arrival": {"spread_s": {"median": 2e-3, "p90": 2e-3, "max": 2.1e-3},
                         "call_s": 1e-4, "delays_s": [[0, 0, 0, 2e-3]] * 4}}
    profile = {"clock": {"synced": True, "drift_s": 0, "error_s": 0}}
    replay, note = choose([entry], profile, "on")
    assert note is None and "the ranks wait 2000 us a repetition" in replay.how


SHIM = r"""
#include <stdio.h>
#include <stdlib.h>
/* another user's libmpi.so.40: a filter of the real library (every MPI symbol resolves
 * there, so MPI_Init is still the real library's) that runs its own code in every process
 * that loads it */
__attribute__((constructor)) static void shim(void)
{
    const char *mark = getenv("SHIM_MARK");
    if (mark) {
        FILE *f = fopen(mark, "a");
        if (f) {
            fputs("ran\n", f);
            fclose(f);
        }
    }
}
"""


def _shim(ompi41: OpenMPI, where: Path) -> Path:
    """A libmpi.so.40 in a directory of its own that loads the prefix's real library by
    path (an ELF filter: the loader reads the filtee's path from it) and names every
    symbol of it, so programs linked to libmpi.so.40 run on it unchanged."""
    from colltune.kernel.build import loaded_libraries

    real = loaded_libraries(build_kernel(ompi41), ompi41.tool_env())["libmpi.so.40"]
    real = real.resolve()
    d = where / "shim"
    d.mkdir()
    syms = subprocess.run(["nm", "-D", "--defined-only", str(real)], capture_output=True,
                          text=True, check=True).stdout.split("\n")
    stubs = [f"void {s[2]}(void) {{}}" if s[1] in "TW" else f"char {s[2]}[8];"
             for s in (ln.split() for ln in syms) if len(s) == 3 and s[1] in "TWBDVR"]
    (d / "shim.c").write_text(SHIM + "\n".join(stubs) + "\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-w", "-Wl,-soname,libmpi.so.40",
                    f"-Wl,--filter={real}", "-o", str(d / "libmpi.so.40"),
                    str(d / "shim.c")], check=True)
    return d


@pytest.mark.mpi
def test_a_shim_named_as_the_mpi_library_is_seen_in_every_launch(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    """Finding 4 (b): a libmpi.so.40 that loads the real library by path and adds a
    constructor passed each launch's check (only the file defining MPI_Init was looked
    at): under --keep-env the kernel's ranks ran it and a rules file was written. Now the
    proof covers every MPI-named object the ranks loaded: refused, nothing written, in
    tune and in tune profile."""
    d = _shim(ompi41, tmp_path)
    mark = tmp_path / "mark"
    env = {**ompi41.tool_env(), "LD_LIBRARY_PATH": str(d), "SHIM_MARK": str(mark)}
    out = tmp_path / "rules.conf"
    r = tune_cli("reduce", "--keep-env", "--mpi", "/usr", "--np", "2", "--oversubscribe",
                 "--sizes", "8", "--out", str(out), "--db", str(tmp_path / "db.sqlite"),
                 env=env)
    said = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 3, said
    assert f"loaded {d / 'libmpi.so.40'}, outside /usr" in said, said
    assert not out.exists()
    exe = _build(ompi41, tmp_path)
    r = tune_cli("profile", "--keep-env", "--mpi", "/usr", "-o", str(tmp_path / "p.json"),
                 "--", str(ompi41.mpirun), "-np", "2", "--oversubscribe", "-x",
                 "LD_LIBRARY_PATH", str(exe), "20", "0", env=env)
    said = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 3 and f"loaded {d / 'libmpi.so.40'}, outside /usr" in said, said
    assert not (tmp_path / "p.json").exists()


@pytest.mark.parametrize("value", ["/nonexistent/lib:", ":/nonexistent/lib", "."],
                         ids=["trailing-empty", "leading-empty", "relative"])
def test_an_empty_or_relative_library_path_entry_is_judged_as_the_working_directory(
        tmp_path: Path, value: str) -> None:
    """Finding 4 (a): `LD_LIBRARY_PATH=/opt/x:` (what `export LD_LIBRARY_PATH=X:$...` leaves
    when it was unset) makes the loader search the working directory: another user's
    libmpi.so.40 there ran inside ompi_info, and the guard skipped the empty entry. Now the
    entry is judged as the directory the loader searches: refused, naming the file."""
    import shutil
    import sys

    from colltune.backends.common import tools

    get_mpi("ompi41")
    theirs = tmp_path / "libmpi.so.40"
    shutil.copy2(Path("/usr/lib/x86_64-linux-gnu/libmpi.so.40").resolve(), theirs)
    env = {k: v for k, v in os.environ.items() if k != tools.KEEP_ENV}
    env["LD_LIBRARY_PATH"] = value
    r = subprocess.run([sys.executable, "-m", "colltune.cli", "--version", "--mpi", "/usr"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
                       check=False)
    assert r.returncode == 3, r.stdout + r.stderr
    assert f"LD_LIBRARY_PATH holds {theirs}" in " ".join(r.stderr.split()), r.stderr
    # the same entries with no MPI library in the working directory: nothing to refuse
    theirs.unlink()
    r = subprocess.run([sys.executable, "-m", "colltune.cli", "--version", "--mpi", "/usr"],
                       capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
                       check=False)
    assert r.returncode == 0, r.stdout + r.stderr


HELPERS = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* the job's ranks call only allreduce; rank 0 records what a system() child sees, and
 * spawns two helpers (this program again) that call only bcast among themselves */
int main(int argc, char **argv)
{
    MPI_Comm parent, child;
    double x[8] = {0}, y[8];
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_get_parent(&parent);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (parent != MPI_COMM_NULL) {
        for (int i = 0; i < 300; i++)
            MPI_Bcast(x, 8, MPI_DOUBLE, 0, MPI_COMM_WORLD);
        MPI_Comm_disconnect(&parent);
        MPI_Finalize();
        return 0;
    }
    if (rank == 0) {
        char cmd[4200];
        snprintf(cmd, sizeof cmd, "env > %.4000s", argv[1]);
        if (system(cmd) != 0)
            return 1;
    }
    for (int i = 0; i < 300; i++)
        MPI_Allreduce(x, y, 8, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    MPI_Comm_spawn(argv[0], MPI_ARGV_NULL, 2, MPI_INFO_NULL, 0, MPI_COMM_WORLD, &child,
                   MPI_ERRCODES_IGNORE);
    MPI_Comm_disconnect(&child);
    MPI_Finalize();
    return 0;
}
"""


@pytest.mark.mpi
def test_the_layer_stays_in_the_jobs_own_ranks(ompi41: OpenMPI, tmp_path: Path) -> None:
    """Finding 3: ranks calling only allreduce spawned two helpers calling bcast; the layer
    explored in the helpers too and their schedules and evidence replaced the ranks': the
    store held only bcast points, exit 0. Now a spawned process is inert, a system() child
    sees neither the layer nor its settings, and only the ranks' allreduce is stored."""
    from colltune.store import Store

    exe = _compile(ompi41, tmp_path, "helpers", HELPERS)
    seen = tmp_path / "child.env"
    db = tmp_path / "s.sqlite"
    r = tune_cli("online", "-o", str(tmp_path / "r.conf"), "--mpi", str(ompi41.prefix),
                 "--db", str(db), "--timeout", "120", "--", str(ompi41.mpirun), "-np", "2",
                 "--oversubscribe", str(exe), str(seen), env=ompi41.tool_env())
    assert r.returncode == 0, r.stdout + r.stderr
    store = Store(db, readonly=True)
    stored = {c.collective for c in store.contexts()}
    store.close()
    assert stored == {"allreduce"}, stored
    child = seen.read_text()
    assert "collonline" not in child and "COLLTUNE_ONLINE" not in child, child


def test_a_foreign_writer_makes_tune_online_refuse(tmp_path: Path) -> None:
    """A process that claimed a rank's place after the rank did (claim_rank's foreign.PID)
    stops the run before anything is stored, naming what to read."""
    from colltune.apploop.online.driver import _ran_on

    (tmp_path / "foreign.4242").write_text("node1 4242 world rank 0\n")
    with pytest.raises(Exception) as e:
        _ran_on(tmp_path, None)  # type: ignore[arg-type]
    assert "not the job's ranks loaded the layer" in str(e.value)


@pytest.mark.mpi
def test_a_second_process_claiming_a_rank_is_inert_and_named(ompi41: OpenMPI,
                                                             tmp_path: Path) -> None:
    """The layer itself: a second job's ranks started into the same directory (as a
    singleton helper would claim rank 0) find the ranks claimed, write foreign.PID and
    explore nothing."""
    from colltune.kernel.build import build_kernel as build

    exe = _build(ompi41, tmp_path)
    lib = build(ompi41, name="collonline")
    d = tmp_path / "dir"
    d.mkdir(mode=0o700)
    plan = tmp_path / "plan"
    plan.write_text(plan_head())
    cmd = [str(ompi41.mpirun), "-np", "2", "--oversubscribe", "-x", f"LD_PRELOAD={lib}",
           "-x", f"COLLTUNE_ONLINE_PLAN={plan}", "-x", f"COLLTUNE_ONLINE_DIR={d}", str(exe),
           "20", "0"]
    first = subprocess.run(cmd, capture_output=True, text=True, env=ompi41.tool_env(),
                           timeout=120, check=False)
    assert first.returncode == 0 and not list(d.glob("foreign.*")), first.stderr
    schedule = (d / "schedule.0").read_text()
    second = subprocess.run(cmd, capture_output=True, text=True, env=ompi41.tool_env(),
                            timeout=120, check=False)
    assert second.returncode == 0, second.stderr
    assert len(list(d.glob("foreign.*"))) == 2, list(d.iterdir())
    assert "is not one of the job's ranks" in second.stderr
    assert (d / "schedule.0").read_text() == schedule  # the first job's, untouched


@pytest.mark.mpi
def test_the_ranks_library_is_checked_before_anything_is_stored(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    """Finding 2: `tune online --mpi <Open MPI 5 prefix> -- mpirun.openmpi ./app41`: the
    ranks ran Open MPI 4.1.4, the calls were stored under 5.0.11 and the file said "tuned
    with Open MPI 5.0.11", exit 0. Now each rank's library (its words, file and every
    MPI-named object) is checked as tune profile checks it: nothing stored, no file."""
    from conftest import get_mpi as mpi_named

    ompi50 = mpi_named("ompi50")
    exe = _build(ompi41, tmp_path)
    out, db = tmp_path / "w.conf", tmp_path / "s.sqlite"
    r = tune_cli("online", "-o", str(out), "--mpi", str(ompi50.prefix), "--db", str(db),
                 "--timeout", "120", "--", str(ompi41.mpirun), "-np", "2", "--oversubscribe",
                 str(exe), "80", "0", env=ompi41.tool_env())
    said = " ".join((r.stdout + r.stderr).split())
    assert r.returncode == 3, said
    assert "rank 0" in said and "nothing stored, no file written" in said, said
    assert not out.exists()
    if db.exists():
        from colltune.store import Store

        store = Store(db, readonly=True)
        assert store.contexts() == []
        store.close()


DUPS = r"""
#include <mpi.h>
/* 70,000 communicators made, used and freed, as a solver that splits per step does */
int main(int argc, char **argv)
{
    int x = 1, y;
    MPI_Init(&argc, &argv);
    for (int i = 0; i < 70000; i++) {
        MPI_Comm c;
        MPI_Comm_dup(MPI_COMM_WORLD, &c);
        MPI_Allreduce(&x, &y, 1, MPI_INT, MPI_SUM, c);
        MPI_Comm_free(&c);
    }
    MPI_Finalize();
    return 0;
}
"""


@pytest.mark.mpi
def test_the_layer_frees_what_it_made_for_a_freed_communicator(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    """Finding 5: an application that dups, uses and frees a communicator 70,000 times ran
    alone in seconds, and aborted in MPI_Comm_dup with MPI_ERR_INTERN under tune online
    (the layer's private duplicate of each was never freed). Now it runs to the end."""
    exe = _compile(ompi41, tmp_path, "dups", DUPS)
    r = tune_cli("online", "-o", str(tmp_path / "r.conf"), "--mpi", str(ompi41.prefix),
                 "--db", str(tmp_path / "s.sqlite"), "--timeout", "300",
                 "--evidence", str(tmp_path / "ev"), "--", str(ompi41.mpirun), "-np", "2",
                 "--oversubscribe", str(exe), env=ompi41.tool_env(), timeout=400)
    said = r.stdout + r.stderr
    assert r.returncode == 0 and "MPI_ERR" not in said, said[-2000:]
    # and nothing of the 70,000 stays in the schedule (none explored: each had one call)
    rows = (tmp_path / "ev" / "schedule.0").read_text().splitlines()
    assert len(rows) < 10, len(rows)


def _online_from(ompi41: OpenMPI, where: Path, db: Path, *opts: str
                 ) -> subprocess.CompletedProcess[str]:
    """`tune online ... -- mpirun -np 2 ./online 80 0` run from `where`, as a user in that
    project directory would."""
    import sys

    return subprocess.run(
        [sys.executable, "-m", "colltune.cli", "online", "-o", str(where / "r.conf"),
         "--mpi", str(ompi41.prefix), "--db", str(db), "--timeout", "120", *opts, "--",
         str(ompi41.mpirun), "-np", "2", "--oversubscribe", "./online", "80", "0"],
        capture_output=True, text=True, cwd=where, timeout=300, check=False,
        env={**os.environ, **ompi41.tool_env()})


def _online_keys(db: Path) -> set[str]:
    from colltune.store import Store

    store = Store(db, readonly=True)
    keys = {c.mpi_key for c in store.contexts()}
    store.close()
    return keys


@pytest.mark.mpi
def test_runs_pool_only_when_they_are_one_program_or_the_user_says_so(
        ompi41: OpenMPI, tmp_path: Path) -> None:
    """Finding 6: `mpirun -np 2 ./app` from projA/, then another ./app from projB/: the
    second run took up the first's halving and the library's point held both (the key
    was the command line alone; tune app's exclusions used it too). Now the key is the
    program (command, working directory, the content of each file it names); a rebuilt
    ./app is another series; --series NAME pools runs on purpose."""
    from colltune.apploop.online.for_app import online_key

    db = tmp_path / "s.sqlite"
    projects = [tmp_path / "projA", tmp_path / "projB"]
    for p in projects:
        p.mkdir()
        _build(ompi41, p)
    for p in projects:
        r = _online_from(ompi41, p, db)
        assert r.returncode == 0, r.stdout + r.stderr
    keys = _online_keys(db)
    assert len(keys) == 2, keys
    cmd = [str(ompi41.mpirun), "-np", "2", "--oversubscribe", "./online", "80", "0"]
    assert keys == {online_key(ompi41.key, cmd, str(p)) for p in projects}
    # the same directory, the program rebuilt with other content: a series of its own
    before = online_key(ompi41.key, cmd, str(projects[0]))
    with (projects[0] / "online").open("ab") as f:
        f.write(b"\0")
    assert online_key(ompi41.key, cmd, str(projects[0])) != before
    # named by the user: both projects' runs in one series
    db2 = tmp_path / "s2.sqlite"
    for p in projects:
        r = _online_from(ompi41, p, db2, "--series", "campaign-7")
        assert r.returncode == 0, r.stdout + r.stderr
    assert _online_keys(db2) == {online_key(ompi41.key, [], series="campaign-7")}

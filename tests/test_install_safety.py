"""Safe to install for every user: nothing a profile, rules file or path holds runs when a
user loads an exported module or sources a profile (each generated file is loaded by its
real interpreter); no write through a symlink or onto a device or FIFO; modes other users'
jobs can read; read-only commands never write the store."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from colltune.core.catalog import MAXREQ
from colltune.errors import ColltuneError
from colltune.outputs.export import _modules
from colltune.rules import mpich_env
from colltune.rules.safe import SAFE_VALUE, check_env
from conftest import missing
from helpers import foreign_database, module_env, tune_cli

EXAMPLES = int(os.environ.get("COLLTUNE_FUZZ_EXAMPLES", "150"))
RULES = "1\n7\n1\n4\n1\n0 1 0 0\n"  # reduce, linear at every size

ATTACKS = {
    "tcl": "a} [exec touch PWNED] {b",
    "lua": 'a", os.execute("touch PWNED"), "b',
    "shell": "$(touch PWNED)",
    "backticks": "`touch PWNED`",
    "newline": "a\ntouch PWNED",
}


@pytest.mark.parametrize("how", sorted(ATTACKS))
def test_mpich_profile_value_that_would_run_code_is_refused(how: str, tmp_path: Path) -> None:
    value = ATTACKS[how]
    prof = tmp_path / "tuning.env"
    (tmp_path / "t.json").write_text('{"collective=reduce": {"composition=alpha": {}}}')
    quoted = "'" + value.replace("'", "'\\''") + "'"
    prof.write_text(f"export MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE=0\n"
                    f"export MPIR_CVAR_COLL_SELECTION_TUNING_JSON_FILE={tmp_path}/t.json\n"
                    f"export MPIR_CVAR_REDUCE_INTRA_ALGORITHM={quoted}\n")
    check = tune_cli("check", str(prof))
    assert check.returncode != 0, check.stdout
    r = tune_cli("export", "--from", str(prof), "--site", str(tmp_path / "site"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "site").exists()
    assert not list(tmp_path.rglob("PWNED")) and not Path("PWNED").exists()


def test_mvapich2_profile_value_that_would_run_code_is_refused(tmp_path: Path) -> None:
    prof = tmp_path / "mv2.conf"
    prof.write_text(f"MV2_SHOW_ENV_INFO = {ATTACKS['tcl']}\n")
    check = tune_cli("check", str(prof))
    assert check.returncode != 0
    assert "has characters no MVAPICH2 variable takes" in check.stdout + check.stderr
    r = tune_cli("export", "--from", str(prof), "--site", str(tmp_path / "site"))
    assert r.returncode == 2 and not (tmp_path / "site").exists()


def test_a_newline_in_a_path_never_reaches_a_generated_file(tmp_path: Path) -> None:
    """The stamp names the resolved --from path: through a symlink whose directory name
    holds a newline, that used to put `touch X` on a line of its own in every file."""
    evil = tmp_path / "dir\ntouch PWNED\n#"
    evil.mkdir()
    (evil / "rules.conf").write_text(RULES)
    link = tmp_path / "rules.conf"
    link.symlink_to(evil / "rules.conf")
    r = tune_cli("export", "--from", str(link), "--site", str(tmp_path / "site"))
    assert r.returncode == 2 and "cannot be written into module files" in r.stderr, r.stderr
    assert not (tmp_path / "site").exists()
    # the same through --site
    (tmp_path / "ok.conf").write_text(RULES)
    for site in (tmp_path / "s\nplm_rsh_agent = evil", tmp_path / 's"q', tmp_path / "s\\b"):
        r = tune_cli("export", "--from", str(tmp_path / "ok.conf"), "--site", str(site))
        assert r.returncode == 2 and "--site" in r.stderr, r.stderr
        assert not site.exists()


def test_mpich_profile_with_an_unclosed_quote_is_a_clean_error(tmp_path: Path) -> None:
    prof = tmp_path / "p.env"
    prof.write_text("export MPIR_CVAR_REDUCE_DEVICE_COLLECTIVE='0\n")
    r = tune_cli("check", str(prof))
    assert r.returncode != 0 and "Traceback" not in r.stderr


values = st.text(st.characters(codec="utf-8"), max_size=40)
names = st.sampled_from(["OMPI_MCA_coll_tuned_use_dynamic_rules", "MV2_FOO", "X"])


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(env=st.dictionaries(names, values, min_size=1, max_size=3))
def test_modules_run_nothing_and_set_exactly_the_values(env: dict[str, str],
                                                        tmp_path: Path) -> None:
    src = tmp_path / "rules.conf"
    src.write_text(RULES)
    try:
        tcl, lua = _modules(env, "colltune", src)
    except ColltuneError:
        assert not all(SAFE_VALUE.fullmatch(v) for v in env.values())
        return
    work = tmp_path / "cwd"
    work.mkdir(exist_ok=True)
    for name, text in (("tuned", tcl), ("tuned.lua", lua)):
        path = tmp_path / name
        path.write_text(text)
        assert module_env(path, cwd=work) == env
    assert not list(work.iterdir())


@settings(max_examples=EXAMPLES, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=values)
def test_shell_profile_sets_exactly_the_value(value: str, tmp_path: Path) -> None:
    """The MPICH profile (sourced by bash) either refuses the value or sets it exactly."""
    prof = mpich_env.EnvProfile(collectives=["reduce"], algorithms={"reduce": value},
                                comments=[f"a comment with {value}"])
    try:
        check_env(prof.variables(), "the MPICH profile")
    except ColltuneError:
        return
    path = tmp_path / "p.env"
    path.write_text(mpich_env.render(prof))
    out = subprocess.run(["bash", "-c", 'set -eu; source "$1"; printf %s '
                                        '"$MPIR_CVAR_REDUCE_INTRA_ALGORITHM"', "-", str(path)],
                         capture_output=True, text=True, cwd=tmp_path, check=False)
    assert out.returncode == 0 and out.stdout == value
    assert mpich_env.parse(path.read_text()).algorithms == {"reduce": value}


# findings 3-5: symbolic links, devices and FIFOs, permissions (real files)

def test_export_never_writes_through_a_symlink(tmp_path: Path) -> None:
    src = tmp_path / "rules.conf"
    src.write_text(RULES)
    site = tmp_path / "site"
    site.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    victim.chmod(0o600)
    (site / "openmpi-mca-params.conf").symlink_to(victim)
    for extra in ([], ["--force"]):
        r = tune_cli("export", "--from", str(src), "--site", str(site), *extra)
        assert r.returncode == 2 and "symbolic link" in r.stderr, r.stderr
        assert victim.read_text() == "precious\n" and (victim.stat().st_mode & 0o777) == 0o600
    # a dangling link: nothing is created where it points
    (site / "openmpi-mca-params.conf").unlink()
    (site / "openmpi-mca-params.conf").symlink_to(tmp_path / "elsewhere")
    r = tune_cli("export", "--from", str(src), "--site", str(site))
    assert r.returncode == 2 and not (tmp_path / "elsewhere").exists()
    assert not (site / "colltune-rules.conf").exists()  # nothing half-written either


def test_fifos_devices_and_huge_files_are_refused_not_read(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    r = tune_cli("check", str(fifo), timeout=30)  # used to wait for a writer forever
    assert r.returncode != 0 and "not a regular file" in r.stdout + r.stderr
    big = tmp_path / "big.conf"
    with open(big, "wb") as f:
        f.truncate(64 * 2**20)  # sparse: no disk used
    r = tune_cli("check", str(big), timeout=30)
    assert r.returncode != 0 and "larger than any file colltune reads" in r.stdout + r.stderr
    src = tmp_path / "rules.conf"
    src.write_text(RULES)
    r = tune_cli("export", "--from", str(fifo), "--site", str(tmp_path / "s"), timeout=30)
    assert r.returncode == 2 and not (tmp_path / "s").exists()


def test_outputs_refuse_devices_and_fifos(tmp_path: Path) -> None:
    from colltune.outfile import write_atomic

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ColltuneError, match="not a regular file"):
        write_atomic(fifo, "x")
    assert fifo.is_fifo()
    if os.geteuid() != 0:
        pytest.skip("a device node needs root (mknod); the FIFO case above ran")
    dev = tmp_path / "null"
    os.mknod(dev, 0o666 | 0o020000, os.makedev(1, 3))  # a copy of /dev/null
    with pytest.raises(ColltuneError, match="not a regular file"):
        write_atomic(dev, "x")
    assert dev.is_char_device()


def test_new_files_follow_the_umask_and_rewrites_keep_their_mode(tmp_path: Path) -> None:
    from colltune.outfile import write_atomic

    old = os.umask(0o022)
    try:
        write_atomic(tmp_path / "new.conf", "x")
        assert (tmp_path / "new.conf").stat().st_mode & 0o777 == 0o644  # was 0600
        shared = tmp_path / "shared.conf"
        shared.write_text("old")
        shared.chmod(0o664)
        write_atomic(shared, "new")
        assert shared.read_text() == "new" and shared.stat().st_mode & 0o777 == 0o664
        os.umask(0o077)  # a cautious admin: the export is still readable by every job
        src = tmp_path / "rules.conf"
        src.write_text(RULES)
        r = tune_cli("export", "--from", str(src), "--site", str(tmp_path / "site"))
        assert r.returncode == 0, r.stderr
        for f in (tmp_path / "site").rglob("*"):
            if f.is_file():
                assert f.stat().st_mode & 0o777 == 0o644, f
            else:  # the directories it made too: the files must be reachable
                assert f.stat().st_mode & 0o777 == 0o755, f
        assert (tmp_path / "site").stat().st_mode & 0o777 == 0o755
    finally:
        os.umask(old)


def _store_with_host(path: Path, host: str) -> None:
    import random

    from colltune.core.config import DEFAULT, Config
    from colltune.core.records import PointResult
    from colltune.store import Context, Store

    rng = random.Random(1)
    store = Store(path)
    ctx = Context("openmpi-4.1.4@/usr", "Open MPI", "4.1.4", "/usr", host, 4, 4, 1, "reduce")
    for cfg, mu in ((DEFAULT, 1e-5), (Config(1), 2e-5)):
        xs = [mu * rng.lognormvariate(0, 0.05) for _ in range(20)]
        store.add(ctx, cfg, PointResult(0, 64, "ok", len(xs), sorted(xs)[10], samples=xs),
                  "mpit")
    store.close()


def test_report_names_from_store_text_stay_inside_out_and_links_are_refused(
        tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    _store_with_host(db, "x/../../ESCAPED")
    out = tmp_path / "a" / "b" / "report"
    r = tune_cli("report", "--db", str(db), "--out", str(out))
    assert r.returncode == 0, r.stderr
    pngs = sorted(p.name for p in tmp_path.rglob("*.png"))
    assert pngs == ["reduce-np4-ompi4_1_4-5c0e77-x_.._.._ESCAPED-latency.png",
                    "reduce-np4-ompi4_1_4-5c0e77-x_.._.._ESCAPED-speedup.png"]
    assert all(p.parent == out for p in tmp_path.rglob("*.png"))
    victim = tmp_path / "victim.csv"
    victim.write_text("mine\n")
    (out / "measurements.csv").unlink()
    (out / "measurements.csv").symlink_to(victim)
    r = tune_cli("report", "--db", str(db), "--out", str(out))
    assert r.returncode != 0 and "symbolic link" in r.stderr, r.stderr
    assert victim.read_text() == "mine\n"


def test_read_only_commands_never_write_a_store(tmp_path: Path) -> None:

    foreign = tmp_path / "foreign.db"
    before = foreign_database(foreign, "mine")
    for argv in (["show"], ["report", "--out", str(tmp_path / "r")], ["model", "show"]):
        r = tune_cli(*argv, "--db", str(foreign))
        assert r.returncode != 0 and "not a colltune measurement store" in r.stderr, r.stderr
    r = tune_cli("export", "--from", str(foreign), "--site", str(tmp_path / "s"))
    assert r.returncode != 0 and "not a colltune measurement store" in r.stderr, r.stderr
    assert foreign.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["foreign.db"]  # no -wal, no -shm
    r = tune_cli("model", "show", "--db", str(tmp_path / "typo.db"))
    assert r.returncode != 0 and "no measurement store" in r.stderr
    assert not (tmp_path / "typo.db").exists()


def test_a_store_on_a_read_only_filesystem_is_shown_and_reported(tmp_path: Path) -> None:
    mnt = tmp_path / "ro"
    mnt.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}): needs root")
    try:
        import socket

        _store_with_host(mnt / "s.db", socket.gethostname())
        subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True)
        r = tune_cli("show", "--db", str(mnt / "s.db"), env={"COLUMNS": "200"})
        assert r.returncode == 0 and "default(0)" in r.stdout, r.stderr
        r = tune_cli("report", "--db", str(mnt / "s.db"), "--out", str(tmp_path / "rep"))
        assert r.returncode == 0, r.stderr
        r = tune_cli("export", "--from", str(mnt / "s.db"), "--site", str(tmp_path / "site"))
        assert r.returncode == 0, r.stderr
        out = tmp_path / "from-db.conf"
        r = tune_cli("reduce", "--from-db", "--db", str(mnt / "s.db"), "--np", "4", "--mpi",
                     "/usr", "--out", str(out))
        assert r.returncode == 0 and "read-only here" in r.stderr, r.stderr
        from colltune.rules import ompi_classic

        assert [c.comsize for c in ompi_classic.read(out).collectives[11]][-1] == 4
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def _small_files() -> None:
    """In the child: files over 200 bytes cannot be written (EFBIG, not a signal)."""
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (200, 200))


def test_an_export_that_fails_midway_changes_nothing(tmp_path: Path) -> None:
    """The rules file (132 bytes) is written, the MCA parameter file (over 200) cannot be:
    the rules and MCA files an earlier export installed stay as they were (even with
    --force), the directories it made are gone, no temporary file is left behind."""
    import sys

    src = tmp_path / "rules.conf"
    src.write_text(RULES)
    site = tmp_path / "site"
    site.mkdir()
    before = {"colltune-rules.conf": "old rules\n", "openmpi-mca-params.conf": "old = 1\n"}
    for name, text in before.items():
        (site / name).write_text(text)
    r = subprocess.run([sys.executable, "-m", "colltune.cli", "export", "--from", str(src),
                        "--site", str(site), "--force"], capture_output=True, text=True,
                       preexec_fn=_small_files, check=False)
    assert r.returncode == 2 and "nothing was changed" in r.stderr, r.stdout + r.stderr
    assert {p.name: p.read_text() for p in site.iterdir()} == before  # no modulefiles/
    # what is in the way is seen before anything is written, too
    (site / "modulefiles").write_text("a file where the module directory goes\n")
    r = tune_cli("export", "--from", str(src), "--site", str(site), "--force")
    assert r.returncode == 2 and "Not a directory" in r.stderr, r.stderr
    assert (site / "colltune-rules.conf").read_text() == "old rules\n"
    r = tune_cli("export", "--from", str(src), "--site", str(tmp_path / "new" / "deep"))
    assert r.returncode == 0, r.stderr  # the same export where nothing is in the way


LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")


@settings(max_examples=max(5, EXAMPLES // 10), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(env=st.dictionaries(names, st.one_of(st.from_regex(SAFE_VALUE, fullmatch=True), values),
                           min_size=1, max_size=3))
def test_lmod_loads_both_modules_and_sets_exactly_the_values(env: dict[str, str],
                                                             tmp_path: Path) -> None:
    """Lmod itself (Debian's lmod), as a cluster user runs `module load`: the Tcl module
    (through Lmod's Tcl reader) and the Lua module each set exactly the values and run
    nothing else."""
    if not LMOD_INIT.exists():
        missing("needs Debian's lmod")
    src = tmp_path / "rules.conf"
    src.write_text(RULES)
    try:
        tcl, lua = _modules(env, "colltune", src)
    except ColltuneError:
        assert not all(SAFE_VALUE.fullmatch(v) for v in env.values())
        return
    work = tmp_path / "cwd"
    work.mkdir(exist_ok=True)
    for kind, name, text in (("tcl", "tuned", tcl), ("lua", "tuned.lua", lua)):
        mods = tmp_path / kind / "colltune"
        mods.mkdir(parents=True, exist_ok=True)
        (mods / name).write_text(text)
        r = subprocess.run(
            ["bash", "-c", f'source {LMOD_INIT} && module use "$1" && module load '
                           'colltune/tuned && env -0', "-", str(tmp_path / kind)],
            capture_output=True, cwd=work, timeout=60, check=False,
            env={k: v for k, v in os.environ.items() if k not in env})
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        got = dict(kv.split("=", 1) for kv in r.stdout.decode().split("\0") if "=" in kv)
        assert {k: got.get(k) for k in env} == env, kind
    assert not list(work.iterdir())


def test_two_installations_of_one_version_do_not_collide_in_the_report(tmp_path: Path
                                                                       ) -> None:
    """Report honesty: two Open MPI 4.1.4 installations (a site build, a copy) get their own
    plots, anchors, headings and CSV rows; the rules text is in the format tune writes
    (version 2 where max_requests is chosen); a summary table heads the page."""
    import csv
    import random

    from colltune.core.config import DEFAULT, Config
    from colltune.core.records import PointResult
    from colltune.store import Context, Store

    rng = random.Random(3)
    db = tmp_path / "s.db"
    store = Store(db)
    for prefix, fast in (("/usr", Config.of(2, {MAXREQ: 8})), ("/opt/ompi-4.1.4", Config(1))):
        ctx = Context(f"openmpi-4.1.4@{prefix}", "Open MPI", "4.1.4", prefix, "h", 4, 4, 1,
                      "reduce", "openmpi")
        for cfg, mu in ((DEFAULT, 2e-5), (fast, 1e-5)):
            xs = [mu * rng.lognormvariate(0, 0.03) for _ in range(20)]
            store.add(ctx, cfg, PointResult(0, 4096, "ok", 20, sorted(xs)[10], samples=xs),
                      "mpit")
    store.close()
    out = tmp_path / "rep"
    r = tune_cli("report", "--db", str(db), "--out", str(out))
    assert r.returncode == 0, r.stderr
    page = (out / "index.html").read_text()
    assert "at /usr" in page and "at /opt/ompi-4.1.4" in page
    assert len(list(out.glob("*-latency.png"))) == 2
    assert "sizes tuned" in page and "rule-file-version-2" in page and "classic" in page
    with open(out / "decisions.csv") as f:
        prefixes = {row["prefix"] for row in csv.DictReader(f)}
    assert prefixes == {"/usr", "/opt/ompi-4.1.4"}

